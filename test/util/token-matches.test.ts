import { describe, expect, it } from "vitest";
import { tokenMatches } from "../../src/util/token-matches.js";

describe("tokenMatches", () => {
  const expected = "gateway-secret-0123456789";
  it.each<[string, string | undefined, boolean]>([
    ["the token itself", expected, true],
    ["nothing", undefined, false],
    ["an empty string", "", false],
    ["a prefix", expected.slice(0, -1), false],
    ["the token and more", `${expected}x`, false],
    ["another of the same length", "gateway-secret-0123456780", false],
    ["another case", expected.toUpperCase(), false],
    ["with surrounding space", ` ${expected}`, false],
  ])("security: %s → %s", (_name, given, matches) => {
    expect(tokenMatches(expected, given)).toBe(matches);
  });
});
