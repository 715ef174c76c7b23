import { describe, expect, it } from "vitest";
import { normalizeDeliveryContext } from "../../src/sessions/entry.js";

describe("delivery context", () => {
  it("normalises: trimmed, channel lowercased, empty fields dropped", () => {
    expect(normalizeDeliveryContext({ channel: " Telegram " as never, to: " 42 ", accountId: "  ", threadId: " 7 " })).toEqual({ channel: "telegram", to: "42", threadId: "7" });
  });

  it.each([
    ["no to", { channel: "telegram" as const }],
    ["a blank to", { channel: "telegram" as const, to: "  " }],
    ["no channel", { to: "42" }],
    ["a blank channel", { channel: " " as never, to: "42" }],
    ["nothing", undefined],
  ])("a context with %s is no route (undefined), never half a route", (_label, ctx) => {
    expect(normalizeDeliveryContext(ctx)).toBeUndefined();
  });
});
