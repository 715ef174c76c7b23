/**
 * Results of side-effecting gateway calls by idempotencyKey, shared by every connection, so a
 * client that retries after a reconnect gets the first result instead of a second effect.
 */
import { BoundedMap } from "../util/bounded-map.js";

export class IdempotencyCache<T> {
  private readonly items: BoundedMap<string, { value: T; expires: number }>;

  constructor(
    private readonly ttlMs = 10 * 60_000,
    max = 10_000,
  ) {
    this.items = new BoundedMap(max);
  }

  get(key: string): T | undefined {
    const hit = this.items.get(key);
    if (!hit) return undefined;
    if (hit.expires < Date.now()) {
      this.items.delete(key);
      return undefined;
    }
    return hit.value;
  }

  set(key: string, value: T): void {
    this.items.set(key, { value, expires: Date.now() + this.ttlMs });
  }
}
