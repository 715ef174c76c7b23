/**
 * The process's memory and garbage collections, for `health` and `switchboard status`: a daemon
 * whose latency spikes is first asked how often its collector stopped it. A full collection
 * (mark-compact) pauses the event loop for milliseconds and slows it for tens around that; under
 * load, how many came and how long they paused tells a busy collector from a slow daemon.
 */
import { constants, PerformanceObserver } from "node:perf_hooks";

export interface GcCounts {
  /** Full collections (mark-compact) since the observer started, and their pauses in all (ms). */
  full: number;
  fullPauseMs: number;
  /** Young-generation collections (scavenges), and their pauses in all (ms). */
  young: number;
  youngPauseMs: number;
}

export interface ProcessStats {
  rssMb: number;
  heapUsedMb: number;
  gc: GcCounts;
}

const counts: GcCounts = { full: 0, fullPauseMs: 0, young: 0, youngPauseMs: 0 };
let observer: PerformanceObserver | undefined;

/** Starts counting collections (once per process; later calls do nothing). */
export function observeGc(): void {
  if (observer) return;
  observer = new PerformanceObserver((list) => {
    for (const entry of list.getEntries()) {
      const kind = (entry as unknown as { detail?: { kind?: number } }).detail?.kind;
      if (kind === constants.NODE_PERFORMANCE_GC_MAJOR) {
        counts.full++;
        counts.fullPauseMs += entry.duration;
      } else if (kind === constants.NODE_PERFORMANCE_GC_MINOR) {
        counts.young++;
        counts.youngPauseMs += entry.duration;
      }
    }
  });
  observer.observe({ entryTypes: ["gc"] });
}

export function processStats(): ProcessStats {
  const mem = process.memoryUsage();
  const mb = (bytes: number) => Math.round((bytes / 2 ** 20) * 10) / 10;
  const ms = (n: number) => Math.round(n * 10) / 10;
  return {
    rssMb: mb(mem.rss),
    heapUsedMb: mb(mem.heapUsed),
    gc: { full: counts.full, fullPauseMs: ms(counts.fullPauseMs), young: counts.young, youngPauseMs: ms(counts.youngPauseMs) },
  };
}
