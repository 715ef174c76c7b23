/**
 * Eviction cost of the daemon's bounded caches (done inbound ids, finished outbox outcomes, run
 * completions, idempotency results) once they are full: a plain Map evicting its oldest key with
 * `keys().next()` against src/util/bounded-map.ts, per insert-and-evict, at several sizes.
 */
import { BoundedMap } from "../src/util/bounded-map.js";
import { nowMs } from "./lib/stats.js";

export interface EvictionFigures {
  size: number;
  plainMapUs: number;
  boundedMapUs: number;
}

function plainMapFifo(size: number, ops: number): number {
  const m = new Map<string, number>();
  for (let i = 0; i < size; i++) m.set(`k${i}`, i);
  let next = size;
  const t0 = nowMs();
  for (let i = 0; i < ops; i++) {
    m.set(`k${next++}`, i);
    if (m.size > size) m.delete(m.keys().next().value as string);
  }
  return ((nowMs() - t0) / ops) * 1000;
}

function boundedMap(size: number, ops: number): number {
  const m = new BoundedMap<string, number>(size);
  for (let i = 0; i < size; i++) m.set(`k${i}`, i);
  let next = size;
  const t0 = nowMs();
  for (let i = 0; i < ops; i++) m.set(`k${next++}`, i);
  return ((nowMs() - t0) / ops) * 1000;
}

export function benchEviction(sizes = [10_000, 100_000, 200_000], ops = 100_000): EvictionFigures[] {
  return sizes.map((size) => ({ size, plainMapUs: plainMapFifo(size, ops), boundedMapUs: boundedMap(size, ops) }));
}

if (import.meta.url === `file://${process.argv[1]}`) {
  for (const f of benchEviction()) console.log(`${f.size} entries: plain Map ${f.plainMapUs.toFixed(2)} µs, BoundedMap ${f.boundedMapUs.toFixed(2)} µs per insert+evict`);
}
