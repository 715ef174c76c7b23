/**
 * Which session is waiting on which through sessions_send (R14). A run holds its session's lane
 * for as long as it waits, so the awaited side's message back to the waiter — or one round a
 * longer cycle (A waits on B, B on C, C sends to A) — queues behind the very wait it would have
 * to end: every run of the cycle would sit out its whole timeout, and none could answer.
 */
export class SendWaits {
  /** Waiting session key → the session key it waits on. A session runs one turn at a time, so one each. */
  private readonly waitingOn = new Map<string, string>();

  /** Whether `from` waiting on `to` would close a cycle: `to` waits, directly or through others, on `from`. */
  closesCycle(from: string, to: string): boolean {
    const seen = new Set<string>();
    for (let at: string | undefined = to; at !== undefined && !seen.has(at); at = this.waitingOn.get(at)) {
      if (at === from) return true;
      seen.add(at);
    }
    return false;
  }

  /** `from` waits on `to` until `wait` settles. */
  async during<T>(from: string, to: string, wait: Promise<T>): Promise<T> {
    this.waitingOn.set(from, to);
    try {
      return await wait;
    } finally {
      if (this.waitingOn.get(from) === to) this.waitingOn.delete(from);
    }
  }
}
