/** Capped exponential backoff with jitter, plus an abortable sleep. */
import { apiFailureOf } from "./errors.js";

export interface BackoffOptions {
  initialMs: number;
  maxMs: number;
  factor: number;
  /** Fraction of the delay randomised either way, so restarted pollers don't retry in lockstep. */
  jitter: number;
}

/** 1 s → 30 s: a 409 from a second poller usually clears within a minute (ecosystem B.3). */
export const DEFAULT_BACKOFF: BackoffOptions = { initialMs: 1000, maxMs: 30_000, factor: 2, jitter: 0.2 };

export function backoffDelay(attempt: number, o: BackoffOptions, random: () => number = Math.random): number {
  const base = Math.min(o.maxMs, o.initialMs * o.factor ** Math.max(0, attempt));
  const spread = base * o.jitter * (2 * random() - 1);
  return Math.max(0, Math.min(o.maxMs, Math.round(base + spread)));
}

/** A 429's retry_after is an order from Telegram, not a hint: waiting less prolongs the lock-out. */
export function retryDelay(err: unknown, attempt: number, o: BackoffOptions, random?: () => number): number {
  const api = apiFailureOf(err);
  const after = api?.error_code === 429 ? api.parameters?.retry_after : undefined;
  if (typeof after === "number" && after >= 0) return after * 1000;
  return backoffDelay(attempt, o, random);
}

/** Resolves after `ms`, or at once when `signal` aborts; never rejects. */
export { sleepUnlessAborted as sleep } from "../../src/util/run-abort.js";
