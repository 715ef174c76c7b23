import { describe, expect, it } from "vitest";
import { BoundedMap } from "../../src/util/bounded-map.js";

describe("BoundedMap (two generations, O(1) eviction)", () => {
  it("keeps between capacity/2 and capacity entries, always the newest, oldest first", () => {
    const m = new BoundedMap<number, string>(10);
    for (let i = 0; i < 1000; i++) {
      m.set(i, `v${i}`);
      expect(m.size).toBeLessThanOrEqual(10);
      if (i >= 10) expect(m.size).toBeGreaterThanOrEqual(5);
    }
    const keys = [...m.entries()].map(([k]) => k);
    expect(keys).toEqual([...keys].sort((a, b) => a - b));
    expect(keys.at(-1)).toBe(999);
    expect(keys).toEqual(Array.from({ length: keys.length }, (_, i) => 1000 - keys.length + i));
    expect(m.has(0)).toBe(false);
    expect(m.get(999)).toBe("v999");
  });

  it.each([
    ["get", (m: BoundedMap<string, number>) => m.get("a")],
    ["set", (m: BoundedMap<string, number>) => m.set("a", 2)],
  ])("%s counts as a use: the entry outlives entries written after it", (_what, use) => {
    const m = new BoundedMap<string, number>(4);
    m.set("a", 1);
    m.set("b", 1);
    use(m);
    m.set("x0", 0);
    m.set("x1", 1);
    // Without the use, "a" would be the oldest of four and gone with "b".
    expect(m.has("a")).toBe(true);
    expect(m.has("b")).toBe(false);
    expect([...m.entries()].map(([k]) => k)).toEqual(["a", "x0", "x1"]);
  });

  it("rewriting an entry of the old generation moves it rather than copying it: one entry, counted once, at the newest position", () => {
    const m = new BoundedMap<string, number>(4);
    m.set("a", 1);
    m.set("b", 2);
    m.set("a", 3);
    expect(m.size).toBe(2);
    expect([...m.entries()]).toEqual([["b", 2], ["a", 3]]);
  });

  it("replacing a value keeps one entry; delete and clear forget; undefined-free has/get agree", () => {
    const m = new BoundedMap<string, number>(100);
    m.set("k", 1);
    m.set("k", 2);
    expect(m.size).toBe(1);
    expect(m.get("k")).toBe(2);
    expect(m.delete("k")).toBe(true);
    expect(m.delete("k")).toBe(false);
    expect(m.has("k")).toBe(false);
    expect(m.get("k")).toBeUndefined();
    m.set("a", 1);
    m.set("b", 2);
    m.clear();
    expect(m.size).toBe(0);
    expect([...m.values()]).toEqual([]);
  });
});
