/**
 * A clock running `speed` times faster than the wall clock, shared by a platform fake (its rate
 * limit windows) and the daemon's outbox (its rate limiter and backoff), so that hours of
 * rate-limited sending take seconds while the limiter logic stays the real one.
 */
export interface AcceleratedClock {
  speed: number;
  now(): number;
  sleep(ms: number): Promise<void>;
  /** Accelerated milliseconds since the clock was created. */
  elapsed(): number;
  /**
   * Wall-clock milliseconds read from the same source as now(), for a party that has to count in
   * real time (a fake whose `retry-after` a client waits out with real timers) yet must measure
   * the same intervals as the parties on now(): wallNow() advances by exactly 1/speed of now().
   */
  wallNow(): number;
}

export function acceleratedClock(speed: number): AcceleratedClock {
  const origin = Date.now();
  const start = performance.now();
  const now = () => origin + (performance.now() - start) * speed;
  return {
    speed,
    now,
    sleep: (ms) => new Promise((resolve) => setTimeout(resolve, Math.max(0, ms / speed))),
    elapsed: () => now() - origin,
    wallNow: () => origin + (performance.now() - start),
  };
}
