/**
 * Waits for `p`, but at most `ms`: true once it fulfils, false at the deadline (`p` goes on
 * unwatched). A rejection within the deadline propagates. Shutdown paths use it so that one
 * hanging SDK call or slow handler cannot hold up a stop.
 */
export async function within(p: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<false>((resolve) => (timer = setTimeout(() => resolve(false), ms)));
  try {
    return await Promise.race([p.then(() => true as const), deadline]);
  } finally {
    clearTimeout(timer);
  }
}
