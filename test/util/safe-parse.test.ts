import { describe, expect, it } from "vitest";
import { z } from "zod";
import { safeParse } from "../../src/util/safe-parse.js";

// zod 4.6's safeParse throws on these (a length check compares an object `length` with a number);
// each is a value a hostile gateway frame, config file or adapter can carry.
const THROWING_FOR_ZOD: Array<[string, unknown]> = [
  ["JSON whose length cannot become a number", JSON.parse('{"length":{"valueOf":1,"toString":1}}')],
  ["a length holding a prototype-less object", { length: [Object.create(null)] }],
];

describe("safeParse at the trust boundaries", () => {
  it.each(THROWING_FOR_ZOD)("%s: a failure naming why, not a throw", (_what, value) => {
    const schema = z.string().min(1);
    expect(() => schema.safeParse(value)).toThrow(/Cannot convert object to primitive value/);
    const result = safeParse(schema, value);
    expect(result.success).toBe(false);
    expect(result.error?.issues).toEqual([expect.objectContaining({ code: "custom", path: [], message: "value could not be checked: Cannot convert object to primitive value" })]);
  });

  it("otherwise the same result as zod's", () => {
    const schema = z.object({ key: z.string().min(1) });
    expect(safeParse(schema, { key: "main" })).toEqual({ success: true, data: { key: "main" } });
    expect(safeParse(schema, { key: "" }).error?.issues.map((i) => i.path)).toEqual([["key"]]);
  });
});
