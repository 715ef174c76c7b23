/**
 * Sliding-window limiter: keeps each bucket under "at most `count` sends per `intervalMs`", the
 * shape platforms publish their limits in, so the outbox waits instead of collecting 429s.
 */
import type { RateLimit } from "../channels/types.js";

export class RateLimiter {
  private readonly windows = new Map<string, number[]>();

  constructor(private readonly now: () => number = Date.now) {}

  /** Milliseconds to wait before a send under all `limits` is allowed (0 = now). */
  delayFor(limits: readonly RateLimit[]): number {
    const t = this.now();
    let wait = 0;
    for (const limit of limits) {
      const stamps = this.prune(limit, t);
      if (stamps.length >= limit.count) wait = Math.max(wait, stamps[stamps.length - limit.count] + limit.intervalMs - t);
    }
    return Math.max(0, wait);
  }

  /** Record one send under every bucket. */
  record(limits: readonly RateLimit[]): void {
    const t = this.now();
    for (const limit of limits) this.prune(limit, t).push(t);
  }

  /** A platform said 429: treat the bucket as full until `retryAfterMs` has passed. */
  penalize(limits: readonly RateLimit[], retryAfterMs: number): void {
    const until = this.now() + retryAfterMs;
    for (const limit of limits) {
      const stamps = this.prune(limit, this.now());
      const filler = until - limit.intervalMs;
      while (stamps.length < limit.count) stamps.push(filler);
      for (let i = 0; i < stamps.length; i++) stamps[i] = Math.max(stamps[i], filler);
    }
  }

  private prune(limit: RateLimit, t: number): number[] {
    const bucketKey = `${limit.key}|${limit.count}/${limit.intervalMs}`;
    let stamps = this.windows.get(bucketKey);
    if (!stamps) {
      stamps = [];
      this.windows.set(bucketKey, stamps);
    }
    let drop = 0;
    while (drop < stamps.length && stamps[drop] <= t - limit.intervalMs) drop++;
    if (drop) stamps.splice(0, drop);
    return stamps;
  }
}
