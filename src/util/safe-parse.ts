/**
 * zod's `safeParse`, made total. zod 4.6's length checks also run on a value of the wrong type
 * that has a `length` property, and compare that with a number: `{"length": {"valueOf": 1,
 * "toString": 1}}` — valid JSON — makes `safeParse` itself throw "Cannot convert object to
 * primitive value" (found by the inbound fuzz test). At a trust boundary that is a rejection
 * like any other, reported as an issue at the root.
 */
import { z } from "zod";

export function safeParse<T extends z.ZodType>(schema: T, value: unknown): z.ZodSafeParseResult<z.output<T>> {
  try {
    return schema.safeParse(value) as z.ZodSafeParseResult<z.output<T>>;
  } catch (err) {
    const message = `value could not be checked: ${err instanceof Error ? err.message : String(err)}`;
    return { success: false, error: new z.ZodError([{ code: "custom", path: [], message, input: undefined }]) } as z.ZodSafeParseResult<z.output<T>>;
  }
}
