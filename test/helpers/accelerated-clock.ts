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
  };
}
