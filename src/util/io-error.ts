/** A system call's (ENOSPC, EIO…) or SQLite's (SQLITE_FULL, SQLITE_BUSY…) failure: the kind a retry can outlast. */
export function isIoError(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === "string" && (/^E[A-Z0-9]+$/.test(code) || code.startsWith("SQLITE_"));
}
