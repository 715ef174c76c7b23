import { describe, expect, it } from "vitest";
import { backoffDelay, classifyDisconnect, DEFAULT_BACKOFF, statusCodeOf, type DisconnectAction } from "../../adapters/whatsapp/reconnect.js";

describe("classifyDisconnect", () => {
  it.each<[number | undefined, DisconnectAction]>([
    [515, "restart"], // restartRequired, expected right after the QR scan
    [401, "fatal"], // loggedOut
    [440, "fatal"], // connectionReplaced
    [403, "fatal"], // forbidden
    [411, "fatal"], // multideviceMismatch
    [408, "reconnect"], // timedOut / connectionLost
    [428, "reconnect"], // connectionClosed
    [500, "reconnect"], // badSession
    [503, "reconnect"], // unavailableService
    [405, "reconnect"], // unknown codes are retried
    [undefined, "reconnect"], // no Boom status at all
  ])("%s → %s", (code, action) => {
    expect(classifyDisconnect(code)).toBe(action);
  });
});

describe("backoffDelay (2 s → 30 s, factor 1.8, jitter 0.25)", () => {
  it.each([
    [1, 0, 2_000],
    [1, 0.999999, 2_500],
    [2, 0, 3_600],
    [3, 0, 6_480],
    [4, 0, 11_664],
    [5, 0, 20_995],
    [5, 0.5, 23_620], // 20 995.2 × 1.125
    [6, 0, 30_000], // 37 791 capped
    [6, 0.999999, 30_000],
    [50, 0.5, 30_000],
    [0, 0, 2_000], // attempt numbers below 1 behave like the first
  ])("attempt %i with random %f → %i ms", (attempt, r, delay) => {
    expect(backoffDelay(attempt, DEFAULT_BACKOFF, () => r)).toBe(delay);
  });

  it("never exceeds the cap nor undercuts the base for any random value", () => {
    for (let attempt = 1; attempt <= 12; attempt++) {
      for (const r of [0, 0.1, 0.5, 0.9, 0.999]) {
        const d = backoffDelay(attempt, DEFAULT_BACKOFF, () => r);
        const base = Math.min(30_000, 2_000 * 1.8 ** (attempt - 1));
        expect(d).toBeGreaterThanOrEqual(Math.round(base));
        expect(d).toBeLessThanOrEqual(30_000);
        expect(d).toBeLessThanOrEqual(Math.round(base * 1.25));
      }
    }
  });
});

describe("statusCodeOf", () => {
  it("reads Boom's output.statusCode and nothing else", () => {
    expect(statusCodeOf({ output: { statusCode: 515 } })).toBe(515);
    expect(statusCodeOf(new Error("plain"))).toBeUndefined();
    expect(statusCodeOf({ output: { statusCode: "515" } })).toBeUndefined();
    expect(statusCodeOf(undefined)).toBeUndefined();
  });
});
