import { describe, expect, it } from "vitest";
import { PlatformError } from "../../src/channels/types.js";
import { backoffDelay, DEFAULT_BACKOFF, retryDelay } from "../../adapters/telegram/backoff.js";
import { commandsHash, DEFAULT_COMMANDS, syncCommands } from "../../adapters/telegram/commands.js";
import { classify, describeError, redactToken, toPlatformError } from "../../adapters/telegram/errors.js";
import { chatActionParams, rateLimitsFor, replyMessageId, sendMessageParams } from "../../adapters/telegram/outbound.js";
import { type PollPhase, Poller } from "../../adapters/telegram/poller.js";
import type { TgUpdate } from "../../adapters/telegram/wire.js";
import { waitFor } from "../fakes/telegram-bot-api.js";

const TOKEN = "123456789:AAF-secret_Token";
/** What telegraf throws for an `ok:false` answer. */
function apiError(error_code: number, description: string, parameters?: object): Error {
  return Object.assign(new Error(`${error_code}: ${description}`), { response: { ok: false, error_code, description, parameters } });
}

describe("telegram error mapping (errors.ts)", () => {
  const cases: { name: string; err: unknown; code: string; retryAfterMs?: number }[] = [
    { name: "429 → rate_limited with retry_after in ms", err: apiError(429, "Too Many Requests: retry after 3", { retry_after: 3 }), code: "rate_limited", retryAfterMs: 3000 },
    { name: "401 → auth", err: apiError(401, "Unauthorized"), code: "auth" },
    { name: "403 blocked → forbidden", err: apiError(403, "Forbidden: bot was blocked by the user"), code: "forbidden" },
    { name: "400 chat not found → not_found", err: apiError(400, "Bad Request: chat not found"), code: "not_found" },
    { name: "400 group upgraded (migrate_to_chat_id) → not_found", err: apiError(400, "Bad Request: group chat was upgraded to a supergroup chat", { migrate_to_chat_id: -1001 }), code: "not_found" },
    { name: "400 other → invalid", err: apiError(400, "Bad Request: message is too long"), code: "invalid" },
    { name: "409 → transport", err: apiError(409, "Conflict: terminated by other getUpdates request"), code: "transport" },
    { name: "500 → transport", err: apiError(500, "Internal Server Error"), code: "transport" },
    { name: "502 → transport", err: apiError(502, "Bad Gateway"), code: "transport" },
    { name: "network error → transport", err: Object.assign(new Error("request to http://x/bot1:a/sendMessage failed, reason: socket hang up"), { name: "FetchError" }), code: "transport" },
  ];
  it.each(cases)("$name", ({ err, code, retryAfterMs }) => {
    expect(classify(err)).toEqual(retryAfterMs === undefined ? { code } : { code, retryAfterMs });
    const pe = toPlatformError(err, "sendMessage", TOKEN);
    expect(pe).toBeInstanceOf(PlatformError);
    expect(pe.code).toBe(code);
    expect(pe.retryable).toBe(code === "transport" || code === "rate_limited");
  });

  it("T1 the token never survives in message, cause message or cause stack", () => {
    const raw = new Error(`request to http://127.0.0.1:1/bot${TOKEN}/getUpdates failed, reason: ECONNREFUSED`);
    const pe = toPlatformError(raw, "getUpdates", TOKEN);
    expect(pe.message).not.toContain("secret");
    expect((pe.cause as Error).message).not.toContain(TOKEN);
    expect((pe.cause as Error).stack ?? "").not.toContain(TOKEN);
    expect(pe.message).toContain("ECONNREFUSED");
  });

  it("T2 redaction covers the literal token and any bot<id>:<secret> shape", () => {
    expect(redactToken(`x ${TOKEN} y`, TOKEN)).toBe("x <redacted> y");
    expect(redactToken("/bot42:other-Secret_1/getMe", TOKEN)).toBe("/bot<redacted>/getMe");
    expect(describeError(apiError(401, "Unauthorized"), TOKEN)).toBe("401: Unauthorized");
  });
});

describe("telegram backoff", () => {
  const mid = () => 0.5;
  it("B1 doubles from 1 s and caps at 30 s", () => {
    expect([0, 1, 2, 3, 4, 5, 6, 10].map((a) => backoffDelay(a, DEFAULT_BACKOFF, mid))).toEqual([1000, 2000, 4000, 8000, 16000, 30000, 30000, 30000]);
  });
  it("B2 jitter stays within ±20 % and never exceeds the cap", () => {
    expect(backoffDelay(1, DEFAULT_BACKOFF, () => 0)).toBe(1600);
    expect(backoffDelay(1, DEFAULT_BACKOFF, () => 1)).toBe(2400);
    expect(backoffDelay(9, DEFAULT_BACKOFF, () => 1)).toBe(30000);
  });
  it("B3 a 429's retry_after overrides the backoff schedule", () => {
    expect(retryDelay(apiError(429, "Too Many Requests", { retry_after: 7 }), 0, DEFAULT_BACKOFF, mid)).toBe(7000);
    expect(retryDelay(apiError(409, "Conflict"), 2, DEFAULT_BACKOFF, mid)).toBe(4000);
  });
});

describe("telegram outbound payloads and limits", () => {
  const t = (extra: object = {}) => ({ channel: "telegram" as const, accountId: "default", to: "-100888", ...extra });
  it("O1 a topic reply carries message_thread_id", () => {
    expect(sendMessageParams(t({ threadId: "77" }), "hi")).toEqual({ chat_id: "-100888", text: "hi", message_thread_id: 77 });
  });
  it("O2 the General topic (1) is omitted for sends but kept for typing", () => {
    expect(sendMessageParams(t({ threadId: "1" }), "hi")).toEqual({ chat_id: "-100888", text: "hi" });
    expect(chatActionParams(t({ threadId: "1" }))).toEqual({ chat_id: "-100888", action: "typing", message_thread_id: 1 });
  });
  it("O3 replyToMessageId accepts our <chat>:<id> form, edits and bare ids", () => {
    expect(replyMessageId("-100888:45")).toBe(45);
    expect(replyMessageId("42:7:edit:1700000000")).toBe(7);
    expect(replyMessageId("45")).toBe(45);
    expect(replyMessageId("garbage")).toBeUndefined();
    expect(sendMessageParams(t({ replyToMessageId: "-100888:45" }), "hi").reply_parameters).toEqual({ message_id: 45, allow_sending_without_reply: true });
  });
  it("O4 a non-numeric threadId is an invalid target", () => {
    expect(() => sendMessageParams(t({ threadId: "abc" }), "hi")).toThrow(expect.objectContaining({ code: "invalid" }));
  });
  it("L1 private chats: 1/s; groups (negative ids, @names): 20/min; global 30/s", () => {
    expect(rateLimitsFor(t({ to: "42" }))).toEqual([{ key: "chat:42", count: 1, intervalMs: 1000 }, { key: "global", count: 30, intervalMs: 1000 }]);
    expect(rateLimitsFor(t())).toEqual([{ key: "chat:-100888", count: 20, intervalMs: 60000 }, { key: "global", count: 30, intervalMs: 1000 }]);
    expect(rateLimitsFor(t({ to: "@news" }))[0]).toEqual({ key: "chat:@news", count: 20, intervalMs: 60000 });
  });
  it("L2 config rateLimit overrides the defaults; fractional rates stretch the interval", () => {
    expect(rateLimitsFor(t({ to: "42" }), { perChatPerSecond: 0.5, globalPerSecond: 10 })).toEqual([{ key: "chat:42", count: 1, intervalMs: 2000 }, { key: "global", count: 10, intervalMs: 1000 }]);
    expect(rateLimitsFor(t(), { perChatPerMinute: 10 })[0]).toEqual({ key: "chat:-100888", count: 10, intervalMs: 60000 });
  });
});

describe("telegram command menu sync", () => {
  function memKv() {
    const m = new Map<string, unknown>();
    return { m, get: async <T>(k: string) => m.get(k) as T | undefined, set: async <T>(k: string, v: T) => void m.set(k, v), delete: async (k: string) => void m.delete(k) };
  }
  it("K1 registers once, then only when the list changes", async () => {
    const kv = memKv();
    const calls: unknown[] = [];
    const deps = { kv, key: "k", commands: DEFAULT_COMMANDS, setMyCommands: async (c: unknown) => calls.push(c) };
    expect(await syncCommands(deps)).toBe("registered");
    expect(await syncCommands(deps)).toBe("unchanged");
    expect(await syncCommands({ ...deps, commands: [...DEFAULT_COMMANDS, { command: "model", description: "Pick a model" }] })).toBe("registered");
    expect(calls).toHaveLength(2);
  });
  it("K2 a failed registration stores no hash, so the next start retries", async () => {
    const kv = memKv();
    await expect(syncCommands({ kv, key: "k", commands: DEFAULT_COMMANDS, setMyCommands: async () => Promise.reject(apiError(429, "Too Many Requests", { retry_after: 500 })) })).rejects.toThrow();
    expect(kv.m.has("k")).toBe(false);
  });
  it("K3 the default menu has the seven core commands with valid names", () => {
    expect(DEFAULT_COMMANDS.map((c) => c.command)).toEqual(["send", "status", "sid", "new", "reset", "stop", "help"]);
    expect(DEFAULT_COMMANDS.every((c) => /^[a-z0-9_]{1,32}$/.test(c.command) && c.description.length <= 256)).toBe(true);
    expect(commandsHash(DEFAULT_COMMANDS)).toBe(commandsHash(DEFAULT_COMMANDS.map((c) => ({ ...c }))));
  });
});

describe("telegram poller retry schedule", () => {
  type Outcome = "ok" | "fail";
  /**
   * Drives a Poller with scripted getUpdates / handle outcomes and records the retry delay of
   * every failure as the poller reports it (no wall clock involved). Once the script runs out,
   * getUpdates parks like a long poll until stop().
   */
  async function run(script: { polls: Outcome[]; handles?: Outcome[]; failures: number }) {
    const polls = [...script.polls];
    const handles = [...(script.handles ?? [])];
    const retries: { phase: PollPhase; retryInMs: number }[] = [];
    const kv = new Map<string, unknown>();
    let nextId = 1;
    const poller = new Poller({
      prepare: async () => {},
      getUpdates: (_params, signal) => {
        const outcome = polls.shift();
        if (outcome === "fail") return Promise.reject(apiError(500, "Internal Server Error"));
        if (outcome === "ok") return Promise.resolve(script.handles ? [{ update_id: nextId++ } as TgUpdate] : []);
        return new Promise((resolve) => signal.addEventListener("abort", () => resolve([]), { once: true }));
      },
      handle: async () => {
        if (handles.shift() === "fail") throw new Error("store unavailable");
      },
      kv: { get: async <T>(k: string) => kv.get(k) as T | undefined, set: async <T>(k: string, v: T) => void kv.set(k, v), delete: async (k: string) => void kv.delete(k) },
      offsetKey: "offset",
      timeoutSeconds: 30,
      allowedUpdates: ["message"],
      backoff: { initialMs: 5, maxMs: 1000, factor: 2, jitter: 0 },
      onPollOk: () => {},
      onError: (_err, phase, retryInMs) => void retries.push({ phase, retryInMs }),
    });
    poller.start();
    await waitFor(() => retries.length === script.failures, 5000, `${script.failures} failures reported`);
    await poller.stop(1000);
    return retries;
  }

  it("P1 a successful poll resets the getUpdates backoff: 3 failures, a success, a failure → the initial delay again", async () => {
    const retries = await run({ polls: ["fail", "fail", "fail", "ok", "fail"], failures: 4 });
    expect(retries).toEqual([5, 10, 20, 5].map((retryInMs) => ({ phase: "poll", retryInMs })));
  });

  it("P2 an accepted batch resets the onInbound-rejection backoff: 3 rejections, an acceptance, a rejection → the initial delay again", async () => {
    const retries = await run({ polls: ["ok", "ok", "ok", "ok", "ok"], handles: ["fail", "fail", "fail", "ok", "fail"], failures: 4 });
    expect(retries).toEqual([5, 10, 20, 5].map((retryInMs) => ({ phase: "handle", retryInMs })));
  });
});
