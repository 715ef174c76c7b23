/**
 * Recovery decisions for a closed Baileys connection, as one pure table (style §12), plus the
 * backoff curve. Status codes are Baileys' `DisconnectReason` values (7.0.0-rc14); they are
 * spelled out here so this module never imports Baileys.
 */

/** restart = reopen at once; reconnect = reopen after backoff; fatal = stay down until an operator acts. */
export type DisconnectAction = "restart" | "reconnect" | "fatal";

export const DisconnectCode = {
  loggedOut: 401,
  forbidden: 403,
  timedOut: 408,
  multideviceMismatch: 411,
  connectionClosed: 428,
  connectionReplaced: 440,
  badSession: 500,
  unavailableService: 503,
  restartRequired: 515,
} as const;

export function classifyDisconnect(code: number | undefined): DisconnectAction {
  switch (code) {
    // Expected right after a QR scan: the server wants a fresh socket with the new creds.
    case DisconnectCode.restartRequired:
      return "restart";
    // The phone unlinked this device: the creds are dead, reconnecting only yields 401 again.
    case DisconnectCode.loggedOut:
    // Another client opened this session; reconnecting would kick it and loop forever.
    case DisconnectCode.connectionReplaced:
    // Account banned/blocked: hammering the server cannot help and may make it worse.
    case DisconnectCode.forbidden:
    // Legacy "multi-device not joined": nothing changes between attempts.
    case DisconnectCode.multideviceMismatch:
      return "fatal";
    // 408 timed out / lost, 428 closed, 500 bad session, 503 unavailable, unknown codes and
    // errors without a code are all worth another try (ecosystem B-5: never die silently).
    default:
      return "reconnect";
  }
}

export interface BackoffPolicy {
  initialMs: number;
  maxMs: number;
  factor: number;
  /** Fraction of the base delay added at random, so many clients do not reconnect in lockstep. */
  jitter: number;
}

/** OpenClaw's web.reconnect defaults (openclaw-behaviour §7.3). */
export const DEFAULT_BACKOFF: BackoffPolicy = { initialMs: 2_000, maxMs: 30_000, factor: 1.8, jitter: 0.25 };

/** Delay before reconnect attempt `attempt` (1-based): initial·factor^(attempt-1), plus up to jitter·base, capped at maxMs. */
export function backoffDelay(attempt: number, policy: BackoffPolicy = DEFAULT_BACKOFF, random: () => number = Math.random): number {
  const base = policy.initialMs * policy.factor ** Math.max(attempt - 1, 0);
  const jittered = base + base * policy.jitter * random();
  return Math.min(policy.maxMs, Math.round(jittered));
}

/** The HTTP-like status Baileys puts on its Boom errors (`error.output.statusCode`), if any. */
export function statusCodeOf(error: unknown): number | undefined {
  const code = (error as { output?: { statusCode?: unknown } } | null | undefined)?.output?.statusCode;
  return typeof code === "number" ? code : undefined;
}
