import { describe, expect, it } from "vitest";
import { MinHeap } from "../../src/util/min-heap.js";

/** Runs `ops` (a number pushes it, "pop" pops) and returns what each pop gave. */
function run(ops: Array<number | "pop">): Array<number | undefined> {
  const heap = new MinHeap<number>((a, b) => a < b);
  const popped: Array<number | undefined> = [];
  for (const op of ops) {
    if (op === "pop") popped.push(heap.pop());
    else heap.push(op);
  }
  return popped;
}

const pops = (n: number): "pop"[] => Array.from({ length: n }, () => "pop");

describe("MinHeap", () => {
  it.each<[string, Array<number | "pop">, Array<number | undefined>]>([
    ["an empty heap pops undefined", ["pop"], [undefined]],
    ["one item comes back, then nothing", [7, ...pops(2)], [7, undefined]],
    ["ascending pushes pop in order", [1, 2, 3, 4, 5, ...pops(5)], [1, 2, 3, 4, 5]],
    ["descending pushes pop in order", [5, 4, 3, 2, 1, ...pops(5)], [1, 2, 3, 4, 5]],
    ["equal items all come out", [2, 1, 2, 1, 2, ...pops(5)], [1, 1, 2, 2, 2]],
    ["a push between pops goes in its place, even before what is left", [5, 3, 8, "pop", 1, 9, ...pops(4)], [3, 1, 5, 8, 9]],
    [
      // Enough items for pop to sift down several levels, choosing the lesser child at each.
      "fifteen shuffled items pop sorted",
      [9, 14, 2, 11, 0, 7, 13, 4, 1, 12, 6, 10, 3, 8, 5, ...pops(15)],
      Array.from({ length: 15 }, (_, i) => i),
    ],
  ])("%s", (_name, ops, expected) => {
    expect(run(ops)).toEqual(expected);
  });

  it("a long run of pushes and pops, with many equal items, pops what a sorted list would", () => {
    const heap = new MinHeap<number>((a, b) => a < b);
    const sorted: number[] = [];
    // A fixed-seed LCG: the same run every time.
    let seed = 7;
    const next = () => (seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31);
    for (let i = 0; i < 2000; i++) {
      if (next() % 3 === 0) {
        expect(heap.pop()).toBe(sorted.shift());
      } else {
        const item = next() % 50;
        heap.push(item);
        const at = sorted.findIndex((x) => x > item);
        sorted.splice(at === -1 ? sorted.length : at, 0, item);
      }
      expect(heap.size).toBe(sorted.length);
    }
  });

  it("peek shows the least item without taking it; size counts the items", () => {
    const heap = new MinHeap<{ at: number }>((a, b) => a.at < b.at);
    expect(heap.peek()).toBeUndefined();
    for (const at of [30, 10, 20]) heap.push({ at });
    expect(heap.peek()?.at).toBe(10);
    expect(heap.size).toBe(3);
    heap.pop();
    expect(heap.peek()?.at).toBe(20);
    expect(heap.size).toBe(2);
    heap.clear();
    expect(heap.size).toBe(0);
    expect(heap.pop()).toBeUndefined();
  });
});
