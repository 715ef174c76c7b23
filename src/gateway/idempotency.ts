/**
 * Results of side-effecting gateway calls by idempotencyKey, shared by every connection, so a
 * client that retries after a reconnect gets the first result instead of a second effect.
 */
export class IdempotencyCache<T> {
  private readonly items = new Map<string, { value: T; expires: number }>();

  constructor(
    private readonly ttlMs = 10 * 60_000,
    private readonly max = 10_000,
  ) {}

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
    this.items.delete(key);
    this.items.set(key, { value, expires: Date.now() + this.ttlMs });
    // Oldest first: Map iteration order is insertion order.
    while (this.items.size > this.max) this.items.delete(this.items.keys().next().value as string);
  }
}
