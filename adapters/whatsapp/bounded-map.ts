/**
 * A Map that forgets its oldest entries past `capacity`. The adapter keeps a few in-memory caches
 * (sent messages for Baileys retries, recent inbound for quoting, learned LID→PN pairs); all of
 * them must stay bounded in a daemon that runs for months.
 */
export class BoundedMap<K, V> {
  private readonly map = new Map<K, V>();
  constructor(private readonly capacity: number) {}

  get(key: K): V | undefined {
    return this.map.get(key);
  }

  has(key: K): boolean {
    return this.map.has(key);
  }

  set(key: K, value: V): void {
    // Re-inserting moves the key to the newest position, so hot entries survive eviction.
    this.map.delete(key);
    this.map.set(key, value);
    while (this.map.size > this.capacity) {
      const oldest = this.map.keys().next();
      if (oldest.done) break;
      this.map.delete(oldest.value);
    }
  }

  get size(): number {
    return this.map.size;
  }
}
