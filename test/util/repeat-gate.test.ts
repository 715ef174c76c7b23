import { describe, expect, it } from "vitest";
import { RepeatGate } from "../../src/util/repeat-gate.js";

describe("RepeatGate", () => {
  // [ms since start, text, what pass() answers]
  const cases: Array<[string, Array<[number, string, number | undefined]>]> = [
    ["a new text passes at once", [[0, "a", 0]]],
    ["the same text within the window is held back", [[0, "a", 0], [1000, "a", undefined], [59_999, "a", undefined]]],
    ["the same text after the window passes, with the count held back", [[0, "a", 0], [10, "a", undefined], [20, "a", undefined], [60_000, "a", 2]]],
    ["the window runs from the last text let through, not the last one held", [[0, "a", 0], [50_000, "a", undefined], [60_000, "a", 1], [100_000, "a", undefined]]],
    ["another text passes at once and drops the count of the first", [[0, "a", 0], [10, "a", undefined], [20, "b", 0], [30, "a", 0]]],
    ["each warning counts only those held back since the one before", [[0, "a", 0], [10, "a", undefined], [20, "a", undefined], [60_000, "a", 2], [60_010, "a", undefined], [120_000, "a", 1]]],
  ];
  it.each(cases)("%s", (_name, steps) => {
    let now = 0;
    const gate = new RepeatGate(60_000, () => now);
    for (const [at, text, expected] of steps) {
      now = at;
      expect(gate.pass(text), `${text} at ${at} ms`).toBe(expected);
    }
  });
});
