import { getEventListeners } from "node:events";
import { describe, expect, it, vi } from "vitest";
import { PlatformError } from "../../src/channels/types.js";
import { backoffDelay, DEFAULT_BACKOFF, retryDelay, sleep } from "../../adapters/telegram/backoff.js";
import { commandsHash, DEFAULT_COMMANDS, syncCommands } from "../../adapters/telegram/commands.js";
import { classify, describeError, redactToken, toPlatformError } from "../../adapters/telegram/errors.js";
import { chatActionParams, chatTypeOfTarget, rateLimitsFor, replyMessageId, sameChatTargets, sendMessageParams } from "../../adapters/telegram/outbound.js";
import { type PollerDeps, type PollPhase, Poller } from "../../adapters/telegram/poller.js";
import type { TgUpdate } from "../../adapters/telegram/wire.js";
import type { AbortLike } from "../../src/util/run-abort.js";
import { waitFor } from "../fakes/telegram-bot-api.js";

const TOKEN = "123456789:AAF-secret_Token";
/** What telegraf throws for an `ok:false` answer. */
function apiError(error_code: number, description: string, parameters?: object): Error {
  return Object.assign(new Error(`${error_code}: ${description}`), { response: { ok: false, error_code, description, parameters } });
}

function memKv() {
  const m = new Map<string, unknown>();
  return { m, get: async <T>(k: string) => m.get(k) as T | undefined, set: async <T>(k: string, v: T) => void m.set(k, v), delete: async (k: string) => void m.delete(k) };
}

/** A long poll that stays open until the poller aborts it, and then fails as the real call does. */
function parkedPoll(signal: AbortLike): Promise<TgUpdate[]> {
  return new Promise((_resolve, reject) => signal.addEventListener("abort", () => reject(signal.reason), { once: true }));
}

/** Poller dependencies that poll, accept and store nothing unless a test says otherwise. */
function pollerDeps(overrides: Partial<PollerDeps> = {}): PollerDeps {
  return {
    prepare: async () => {},
    getUpdates: (_params, signal) => parkedPoll(signal),
    handle: async () => {},
    kv: memKv(),
    offsetKey: "offset",
    timeoutSeconds: 30,
    allowedUpdates: ["message"],
    backoff: { initialMs: 5, maxMs: 1000, factor: 2, jitter: 0 },
    onPollOk: () => {},
    onError: () => {},
    ...overrides,
  };
}

describe("telegram error mapping (errors.ts)", () => {
  const cases: { name: string; err: unknown; code: string; retryAfterMs?: number }[] = [
    { name: "429 → rate_limited with retry_after in ms", err: apiError(429, "Too Many Requests: retry after 3", { retry_after: 3 }), code: "rate_limited", retryAfterMs: 3000 },
    { name: "401 → auth", err: apiError(401, "Unauthorized"), code: "auth" },
    { name: "403 blocked → forbidden", err: apiError(403, "Forbidden: bot was blocked by the user"), code: "forbidden" },
    { name: "400 chat not found → not_found", err: apiError(400, "Bad Request: chat not found"), code: "not_found" },
    { name: "400 group upgraded (migrate_to_chat_id) → not_found", err: apiError(400, "Bad Request: group chat was upgraded to a supergroup chat", { migrate_to_chat_id: -1001 }), code: "not_found" },
    { name: "400 message thread not found (forum topic deleted) → not_found", err: apiError(400, "Bad Request: message thread not found"), code: "not_found" },
    { name: "400 user not found → not_found", err: apiError(400, "Bad Request: user not found"), code: "not_found" },
    { name: "400 other → invalid", err: apiError(400, "Bad Request: message is too long"), code: "invalid" },
    { name: "408 (a proxy's request timeout) → transport", err: apiError(408, "HTTP 408 answered with a body that is not JSON"), code: "transport" },
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
    // The description is the server's text: a proxy in front of the Bot API may echo the request path.
    expect(describeError(apiError(404, `Not Found: /bot${TOKEN}/getUpdates`), TOKEN)).toBe("404: Not Found: /bot<redacted>/getUpdates");
  });

  it("a group upgraded to a supergroup: the error names the new chat id, so the operator can rebind", () => {
    const pe = toPlatformError(apiError(400, "Bad Request: group chat was upgraded to a supergroup chat", { migrate_to_chat_id: -1001234 }), "sendMessage", TOKEN);
    expect(pe).toMatchObject({ code: "not_found", retryable: false });
    expect(pe.message).toContain("(chat migrated to -1001234)");
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
  it("B4 a finished retry wait leaves no listener on the stop signal: a long outage must not pile them up", async () => {
    const stopper = new AbortController();
    for (let i = 0; i < 3; i++) await sleep(1, stopper.signal);
    expect(getEventListeners(stopper.signal, "abort")).toHaveLength(0);
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
    expect(replyMessageId("42:0")).toBeUndefined();
    expect(replyMessageId("-3")).toBeUndefined();
    expect(sendMessageParams(t({ replyToMessageId: "-100888:45" }), "hi").reply_parameters).toEqual({ message_id: 45, allow_sending_without_reply: true });
  });
  it("O4 a non-numeric or non-positive threadId is an invalid target", () => {
    for (const threadId of ["abc", "0", "-3"]) expect(() => sendMessageParams(t({ threadId }), "hi")).toThrow(expect.objectContaining({ code: "invalid" }));
  });
  it("L1 private chats: 1/s; groups (negative ids, @names): 20/min; global 30/s", () => {
    expect(rateLimitsFor(t({ to: "42" }))).toEqual([{ key: "chat:42", count: 1, intervalMs: 1000 }, { key: "global", count: 30, intervalMs: 1000 }]);
    expect(rateLimitsFor(t())).toEqual([{ key: "chat:-100888", count: 20, intervalMs: 60000 }, { key: "global", count: 30, intervalMs: 1000 }]);
    expect(rateLimitsFor(t({ to: "@news" }))[0]).toEqual({ key: "chat:@news", count: 20, intervalMs: 60000 });
  });
  it("D2 a chat id tells the send policy its chat type: negative ids and @names are groups, a user's id a private chat", () => {
    expect(["-100888", "-42", "@news", "42", "", "abc"].map(chatTypeOfTarget)).toEqual(["group", "group", "group", "direct", undefined, undefined]);
  });
  it("D2 O2 a send without a topic and one to General are each other's spelling (both land in General); other topics have none", () => {
    expect(sameChatTargets(t())).toEqual([{ ...t(), threadId: "1" }]);
    expect(sameChatTargets(t({ threadId: "1" }))).toEqual([t()]);
    expect(sameChatTargets(t({ threadId: "77" }))).toEqual([]);
  });
  it("L3 forum topics share their group's limit: Telegram counts per chat, not per topic", () => {
    expect(rateLimitsFor(t({ threadId: "77" }))).toEqual(rateLimitsFor(t()));
  });
  it("L2 config rateLimit overrides the defaults; fractional rates stretch the interval", () => {
    expect(rateLimitsFor(t({ to: "42" }), { perChatPerSecond: 0.5, globalPerSecond: 10 })).toEqual([{ key: "chat:42", count: 1, intervalMs: 2000 }, { key: "global", count: 10, intervalMs: 1000 }]);
    expect(rateLimitsFor(t(), { perChatPerMinute: 10 })[0]).toEqual({ key: "chat:-100888", count: 10, intervalMs: 60000 });
  });
});

describe("telegram command menu sync", () => {
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
  it("K4 a changed description alone re-registers the menu", async () => {
    const kv = memKv();
    const calls: unknown[] = [];
    const deps = { kv, key: "k", commands: DEFAULT_COMMANDS, setMyCommands: async (c: unknown) => calls.push(c) };
    await syncCommands(deps);
    const reworded = DEFAULT_COMMANDS.map((c) => (c.command === "stop" ? { ...c, description: "Stop the reply and its sub-agents" } : c));
    expect(await syncCommands({ ...deps, commands: reworded })).toBe("registered");
    expect(calls).toHaveLength(2);
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
    let nextId = 1;
    const poller = new Poller(
      pollerDeps({
        getUpdates: (_params, signal) => {
          const outcome = polls.shift();
          if (outcome === "fail") return Promise.reject(apiError(500, "Internal Server Error"));
          if (outcome === "ok") return Promise.resolve(script.handles ? [{ update_id: nextId++ } as TgUpdate] : []);
          return parkedPoll(signal);
        },
        handle: async () => {
          if (handles.shift() === "fail") throw new Error("store unavailable");
        },
        onError: (_err, phase, retryInMs) => void retries.push({ phase, retryInMs }),
      }),
    );
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

describe("telegram poller offsets", () => {
  /** getUpdates answering `batches` in turn, then parking; records the offset of every call. */
  function scripted(batches: TgUpdate[][]) {
    const offsets: (number | undefined)[] = [];
    const getUpdates: PollerDeps["getUpdates"] = (params, signal) => {
      offsets.push(params.offset);
      const batch = batches.shift();
      return batch ? Promise.resolve(batch) : parkedPoll(signal);
    };
    return { offsets, getUpdates };
  }

  it("P3 an update below the acknowledged offset (ids renumbered after a quiet week) is handed over and confirmed: the offset follows Telegram's ids back", async () => {
    const { offsets, getUpdates } = scripted([[{ update_id: 5 }], [{ update_id: 3 }], [{ update_id: 4 }]]);
    const handled: number[] = [];
    const poller = new Poller(pollerDeps({ getUpdates, handle: async (u) => void handled.push(u.update_id) }));
    poller.start();
    await waitFor(() => offsets.length === 4, 5000, "fourth poll");
    await poller.stop(1000);
    // Telegram only forgets an update once an offset past its id arrives: asking from 6 again
    // would be answered with 3 again, for ever.
    expect(handled).toEqual([5, 3, 4]);
    expect(offsets).toEqual([undefined, 6, 4, 5]);
  });

  it("P6 rejections inside a batch: the offset moves past the accepted prefix only, never past a rejected update", async () => {
    const { offsets, getUpdates } = scripted([[{ update_id: 1 }, { update_id: 2 }, { update_id: 3 }, { update_id: 4 }], [{ update_id: 2 }, { update_id: 3 }, { update_id: 4 }]]);
    const rejectOnce = new Set([2, 4]);
    const accepted: number[] = [];
    const poller = new Poller(
      pollerDeps({
        getUpdates,
        handle: async (u) => {
          if (rejectOnce.delete(u.update_id)) throw new Error("store unavailable");
          accepted.push(u.update_id);
        },
      }),
    );
    poller.start();
    await waitFor(() => offsets.length === 3, 5000, "third poll");
    await poller.stop(1000);
    // 1 was accepted, 2 was not: asking from 2 again keeps 2 (and re-sends 3, which the core
    // dedupes); asking from 3 or 5 would lose it, asking from the start would repeat 1.
    expect(offsets).toEqual([undefined, 2, 5]);
    expect(accepted).toEqual([1, 3, 2, 3, 4]);
  });

  it("P7 stop() waits, within its grace, for an update the core is still accepting, and its offset is stored before stop() returns", async () => {
    const kv = memKv();
    let accept!: () => void;
    const { getUpdates } = scripted([[{ update_id: 1 }]]);
    const poller = new Poller(pollerDeps({ kv, getUpdates, handle: () => new Promise<void>((r) => (accept = r)) }));
    poller.start();
    await waitFor(() => accept, 5000, "update handed over");
    let stopped = false;
    const stopping = poller.stop(5000).then(() => void (stopped = true));
    await new Promise((r) => setImmediate(r));
    expect(stopped).toBe(false);
    accept();
    await stopping;
    expect(kv.m.get("offset")).toBe(2);
  });

  it("P8 a batch whose answer arrives as stop() aborts the poll is not handed to the core (Telegram sends it again)", async () => {
    let answer!: (batch: TgUpdate[]) => void;
    const handled: number[] = [];
    const poller = new Poller(
      pollerDeps({
        getUpdates: () => new Promise<TgUpdate[]>((r) => (answer = r)),
        handle: async (u) => void handled.push(u.update_id),
      }),
    );
    poller.start();
    await waitFor(() => answer, 5000, "first poll");
    const stopping = poller.stop(1000);
    answer([{ update_id: 1 }]);
    await stopping;
    expect(handled).toEqual([]);
  });

  it("P9 short polling (timeout 0): an empty answer is followed by a pause, not by an immediate new request", async () => {
    vi.useFakeTimers();
    try {
      let polls = 0;
      // Parks after a few polls, so a loop that does not pause cannot spin forever.
      const poller = new Poller(pollerDeps({ timeoutSeconds: 0, getUpdates: (_params, signal) => (++polls <= 5 ? Promise.resolve([]) : parkedPoll(signal)) }));
      poller.start();
      await vi.advanceTimersByTimeAsync(999);
      expect(polls).toBe(1);
      await vi.advanceTimersByTimeAsync(1);
      expect(polls).toBe(2);
      await poller.stop(1000);
    } finally {
      vi.useRealTimers();
    }
  });

  it("P10 an answered poll leaves no timer behind: after stop() nothing holds the process open", async () => {
    vi.useFakeTimers();
    try {
      const { offsets, getUpdates } = scripted([[{ update_id: 1 }]]);
      const poller = new Poller(pollerDeps({ getUpdates }));
      poller.start();
      await vi.advanceTimersByTimeAsync(0);
      expect(offsets).toEqual([undefined, 2]);
      await poller.stop(1000);
      expect(vi.getTimerCount()).toBe(0);
    } finally {
      vi.useRealTimers();
    }
  });

  it("P4 a failed offset write is reported as a persist error and polling goes on; the next batch's write lands", async () => {
    const kv = memKv();
    let failingWrites = 1;
    const { getUpdates } = scripted([[{ update_id: 1 }], [{ update_id: 2 }]]);
    const handled: number[] = [];
    const phases: PollPhase[] = [];
    const poller = new Poller(
      pollerDeps({
        getUpdates,
        handle: async (u) => void handled.push(u.update_id),
        kv: {
          ...kv,
          set: async <T>(k: string, v: T) => {
            if (failingWrites-- > 0) throw new Error("disk full");
            await kv.set(k, v);
          },
        },
        onError: (_err, phase) => void phases.push(phase),
      }),
    );
    poller.start();
    await waitFor(() => kv.m.get("offset") === 3, 5000, "second offset stored");
    await poller.stop(1000);
    expect(handled).toEqual([1, 2]);
    expect(phases).toEqual(["persist"]);
  });

  it("P5 a long poll that never answers (a silently dead connection) is abandoned after its timeout plus 15 s, and polling resumes", async () => {
    vi.useFakeTimers();
    try {
      let polls = 0;
      const errors: string[] = [];
      const poller = new Poller(
        pollerDeps({
          getUpdates: (_params, signal) => (polls++, parkedPoll(signal)),
          onError: (err, phase) => void errors.push(`${phase}: ${(err as Error).message}`),
        }),
      );
      poller.start();
      await vi.advanceTimersByTimeAsync(45_000 - 1);
      expect(errors).toEqual([]);
      await vi.advanceTimersByTimeAsync(1);
      expect(errors).toEqual(["poll: getUpdates: no answer within 30s + 15s, connection presumed dead"]);
      await vi.advanceTimersByTimeAsync(5);
      expect(polls).toBe(2);
      await poller.stop(1000);
    } finally {
      vi.useRealTimers();
    }
  });
});
