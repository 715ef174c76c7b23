/**
 * A map bounded to its most recently written (or read) entries, with O(1) eviction.
 *
 * Evicting a plain Map's oldest key (`map.keys().next()`) walks over every entry deleted before
 * it, and under steady eviction those pile up at the front: ~6 µs per eviction at 10,000 entries,
 * 15–50 µs at 100,000 (`bench/bounded-map.ts`, ~0.3 µs here) — once its caches filled up, a busy
 * daemon paid that several times a message.
 * Two generations instead: entries go to the young map; when it holds capacity/2 of them, the old
 * generation is dropped whole and the young one takes its place. The map therefore holds between
 * capacity/2 and capacity entries, always the newest, and iterates oldest first.
 */
export class BoundedMap<K, V> {
  private young = new Map<K, V>();
  private old = new Map<K, V>();
  private readonly half: number;

  constructor(capacity: number) {
    this.half = Math.max(1, Math.ceil(capacity / 2));
  }

  /** The value, which also counts as a use: the entry moves to the newest position. */
  get(key: K): V | undefined {
    if (this.young.has(key)) return this.young.get(key);
    if (!this.old.has(key)) return undefined;
    const value = this.old.get(key) as V;
    this.set(key, value);
    return value;
  }

  has(key: K): boolean {
    return this.young.has(key) || this.old.has(key);
  }

  /** Inserts or replaces; either way the entry becomes the newest. */
  set(key: K, value: V): void {
    this.old.delete(key);
    this.young.delete(key);
    this.young.set(key, value);
    if (this.young.size >= this.half) {
      this.old = this.young;
      this.young = new Map();
    }
  }

  delete(key: K): boolean {
    const inYoung = this.young.delete(key);
    return this.old.delete(key) || inYoung;
  }

  clear(): void {
    this.young.clear();
    this.old.clear();
  }

  get size(): number {
    return this.young.size + this.old.size;
  }

  /** Oldest first. */
  *entries(): IterableIterator<[K, V]> {
    yield* this.old;
    yield* this.young;
  }

  *values(): IterableIterator<V> {
    for (const [, value] of this.entries()) yield value;
  }

  [Symbol.iterator](): IterableIterator<[K, V]> {
    return this.entries();
  }
}
