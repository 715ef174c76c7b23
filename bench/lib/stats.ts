/** Small statistics helpers for the benchmarks: percentiles of samples, median/min/max of runs. */

export function percentile(samples: readonly number[], p: number): number {
  if (!samples.length) return Number.NaN;
  const sorted = [...samples].sort((a, b) => a - b);
  const rank = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[rank];
}

export interface Spread {
  median: number;
  min: number;
  max: number;
  runs: number[];
}

/** Median, min and max of one figure measured in repeated runs. */
export function spread(runs: readonly number[]): Spread {
  const sorted = [...runs].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  const median = sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
  return { median, min: sorted[0], max: sorted[sorted.length - 1], runs: [...runs] };
}

/** High-resolution wall clock in milliseconds. */
export const nowMs = (): number => performance.now();

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Times `fn` `n` times (sequentially) and returns each duration in ms. */
export async function timeEach(n: number, fn: (i: number) => Promise<unknown>): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    const t = nowMs();
    await fn(i);
    out.push(nowMs() - t);
  }
  return out;
}
