/** A binary min-heap: push and pop in O(log n), the least item in O(1). */
export class MinHeap<T> {
  private readonly items: T[] = [];

  /** `less(a, b)`: a comes out before b. */
  constructor(private readonly less: (a: T, b: T) => boolean) {}

  get size(): number {
    return this.items.length;
  }

  peek(): T | undefined {
    return this.items[0];
  }

  push(item: T): void {
    const { items, less } = this;
    let i = items.push(item) - 1;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (!less(item, items[parent])) break;
      items[i] = items[parent];
      i = parent;
    }
    items[i] = item;
  }

  pop(): T | undefined {
    const { items, less } = this;
    if (items.length <= 1) return items.pop();
    const top = items[0];
    const last = items.pop() as T;
    let i = 0;
    for (;;) {
      let child = 2 * i + 1;
      if (child >= items.length) break;
      if (child + 1 < items.length && less(items[child + 1], items[child])) child++;
      if (!less(items[child], last)) break;
      items[i] = items[child];
      i = child;
    }
    items[i] = last;
    return top;
  }

  clear(): void {
    this.items.length = 0;
  }
}
