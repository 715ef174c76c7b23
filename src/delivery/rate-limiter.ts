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

  /** Record one send under every bucket; returns its stamp for `settle`. */
  record(limits: readonly RateLimit[]): number {
    const t = this.now();
    for (const limit of limits) this.prune(limit, t).push(t);
    return t;
  }

  /**
   * The platform answered the send stamped `recordedAt`: count it from now instead. The platform
   * counted it when the request arrived, somewhere between the two; counting from the later end
   * keeps network jitter (a slow request followed by a fast one) from landing a send paced right
   * at the window's edge inside the platform's window — a 429 a pure pacer would collect.
   */
  settle(limits: readonly RateLimit[], recordedAt: number): void {
    const t = this.now();
    if (t <= recordedAt) return;
    for (const limit of limits) {
      const stamps = this.prune(limit, t);
      let i = stamps.lastIndexOf(recordedAt);
      if (i < 0) {
        // Pruned while its request was in flight (a call slower than the window): the platform
        // still counts it, so it counts again, from now — else it would stop counting at all.
        let at = stamps.length;
        while (at > 0 && stamps[at - 1] > t) at--;
        stamps.splice(at, 0, t);
        continue;
      }
      // Moved up to its place among the later stamps, in place: with a generous limit a window
      // holds thousands of stamps, and two splices per send allocated and copied them (bench/).
      for (; i + 1 < stamps.length && stamps[i + 1] <= t; i++) stamps[i] = stamps[i + 1];
      stamps[i] = t;
    }
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
    const key = bucketKey(limit);
    let stamps = this.windows.get(key);
    if (!stamps) {
      stamps = [];
      this.windows.set(key, stamps);
    }
    let drop = 0;
    while (drop < stamps.length && stamps[drop] <= t - limit.intervalMs) drop++;
    if (drop) stamps.splice(0, drop);
    return stamps;
  }
}

function bucketKey(limit: RateLimit): string {
  return `${limit.key}|${limit.count}/${limit.intervalMs}`;
}
