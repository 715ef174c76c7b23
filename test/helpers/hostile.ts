/**
 * fast-check generators of hostile input shared by the fuzz tests: values that have broken
 * parsers and key codecs before (empty, huge, unicode, prototype names, path tricks, key-shaped
 * strings, numbers at the edges), mixed with fully arbitrary JSON.
 */
import fc from "fast-check";
import { seedFrom } from "./seeded-random.js";

/** `SB_FUZZ_SEED=<integer>` explores other cases (a failure prints what fast-check replays it with). */
export const FUZZ_SEED = seedFrom("SB_FUZZ_SEED", 0x5b0a_2d);

const nastyStrings = fc.constantFrom(
  "",
  " ",
  "main",
  "global",
  "unknown",
  "agent:main:main",
  "agent:main:telegram:group:-100123",
  "agent:other:discord:channel:42",
  "agent:main:subagent:00000000-0000-0000-0000-000000000000",
  "cron:daily",
  "hook:x",
  "node-1",
  "agent:",
  "agent::",
  ":::",
  "::leading colons",
  ":base64:AAAA",
  "__proto__",
  "constructor",
  "prototype",
  "../../../../etc/passwd",
  "C:\\Windows\\system32",
  "\u0000",
  "\ud800",
  "🦄".repeat(50),
  "a".repeat(5000),
  "<script>alert(1)</script>",
  "${SWITCHBOARD_GATEWAY_TOKEN}",
  "/send off",
  "/stop",
  "@SwitchboardTestBot /send off",
  "NO_REPLY",
  "REPLY_SKIP",
);

export const hostileString = fc.oneof({ weight: 3, arbitrary: nastyStrings }, { weight: 2, arbitrary: fc.string({ maxLength: 40 }) }, { weight: 1, arbitrary: fc.string({ unit: "binary", maxLength: 40 }) });

export const hostileNumber = fc.oneof(
  fc.constantFrom(0, -0, 1, -1, 0.5, 2 ** 31, 2 ** 53, -(2 ** 53), 1e308, -1e308, Number.MAX_SAFE_INTEGER),
  fc.integer(),
  fc.double({ noNaN: true, noDefaultInfinity: true }),
);

/** Any JSON-ish value, biased towards hostile leaves. */
export const hostileValue: fc.Arbitrary<unknown> = fc.letrec((tie) => ({
  value: fc.oneof(
    { depthSize: "small", withCrossShrink: true },
    hostileString,
    hostileNumber,
    fc.boolean(),
    fc.constant(null),
    fc.array(tie("value"), { maxLength: 4 }),
    fc.dictionary(hostileString, tie("value"), { maxKeys: 4 }),
  ),
})).value;

/** An object with some of `keys` (values hostile or arbitrary) plus, sometimes, extra keys. */
export function shapedLike(keys: readonly string[]): fc.Arbitrary<Record<string, unknown>> {
  return fc
    .tuple(fc.subarray([...keys]), fc.array(hostileValue, { minLength: keys.length, maxLength: keys.length }), fc.option(fc.dictionary(hostileString, hostileValue, { maxKeys: 2 }), { nil: undefined }))
    .map(([present, values, extra]) => {
      const out: Record<string, unknown> = { ...(extra ?? {}) };
      present.forEach((k, i) => (out[k] = values[i]));
      return out;
    });
}

/** A value of `valid` mostly, otherwise hostile — to get past the first check and exercise the next. */
export function mostly<T>(valid: fc.Arbitrary<T>): fc.Arbitrary<unknown> {
  return fc.oneof({ weight: 6, arbitrary: valid as fc.Arbitrary<unknown> }, { weight: 1, arbitrary: hostileValue });
}
