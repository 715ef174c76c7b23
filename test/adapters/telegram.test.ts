/**
 * The Telegram adapter end to end: real telegraf, real HTTP, against the fake Bot API.
 */
import net from "node:net";
import pino from "pino";
import { afterEach, describe, expect, it, vi } from "vitest";
import { createTelegramAdapter, type TelegramAdapter, type TelegramAdapterOptions } from "../../adapters/telegram/index.js";
import { type AdapterKv, type InboundMessage, type OutboundTarget, PlatformError } from "../../src/channels/types.js";
import { ConfigSchema, type TelegramConfig } from "../../src/config/schema.js";
import { type ApiReply, errors, FakeTelegramBotApi, fakeUser, groupChat, ok, privateChat, supergroupChat, waitFor } from "../fakes/telegram-bot-api.js";
import { startHarness } from "../helpers/harness.js";

class MemoryKv implements AdapterKv {
  readonly map = new Map<string, unknown>();
  async get<T>(key: string): Promise<T | undefined> {
    return this.map.get(key) as T | undefined;
  }
  async set<T>(key: string, value: T): Promise<void> {
    this.map.set(key, value);
  }
  async delete(key: string): Promise<void> {
    this.map.delete(key);
  }
}

const OFFSET_KEY = "telegram:default:offset";
const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  while (cleanups.length) await cleanups.pop()!();
});

interface Harness {
  api: FakeTelegramBotApi;
  kv: MemoryKv;
  adapter: TelegramAdapter;
  /** Successfully accepted messages, in order. */
  inbound: InboundMessage[];
  /** Replaceable onInbound behaviour; the default accepts. */
  handler: (m: InboundMessage) => Promise<void>;
}

interface BootOptions {
  api?: FakeTelegramBotApi;
  kv?: MemoryKv;
  config?: Partial<TelegramConfig>;
  options?: TelegramAdapterOptions;
  start?: boolean;
  log?: pino.Logger;
}

async function newApi(opts?: ConstructorParameters<typeof FakeTelegramBotApi>[0]): Promise<FakeTelegramBotApi> {
  const api = new FakeTelegramBotApi(opts);
  await api.start();
  cleanups.unshift(() => api.stop()); // fakes close after every adapter
  return api;
}

function telegramConfig(extra: Partial<TelegramConfig>): TelegramConfig {
  const parsed = ConfigSchema.parse({ channels: { telegram: { enabled: true, pollTimeoutSeconds: 30, ...extra } } });
  return parsed.channels.telegram!;
}

async function boot(o: BootOptions = {}): Promise<Harness> {
  const api = o.api ?? (await newApi());
  const kv = o.kv ?? new MemoryKv();
  const h = { api, kv, inbound: [] as InboundMessage[] } as Harness;
  h.handler = async (m) => void h.inbound.push(m);
  const ctx = { onInbound: (m: InboundMessage) => h.handler(m), kv, log: o.log ?? pino({ level: "silent" }) };
  const config = telegramConfig({ botToken: api.token, apiRoot: api.apiRoot, ...o.config });
  h.adapter = createTelegramAdapter(config, ctx, { backoff: { initialMs: 20, maxMs: 200 }, ...o.options });
  cleanups.push(() => h.adapter.stop());
  if (o.start !== false) {
    const seq = api.calls.length;
    await h.adapter.start();
    await api.waitForCall("getUpdates", (c) => c.seq >= seq);
  }
  return h;
}

const alice = fakeUser("Alice", { last_name: "Smith", username: "alice" });
const bob = fakeUser("Bob");
const target = (m: InboundMessage, extra: Partial<OutboundTarget> = {}): OutboundTarget => ({ channel: "telegram", accountId: m.accountId, to: m.to, threadId: m.threadId, ...extra });

describe("telegram adapter: boot", () => {
  it("B1 boots with getMe, deleteWebhook, setMyCommands, then long-polls message updates", async () => {
    const { api, adapter } = await boot();
    expect(api.apiCalls.map((c) => c.method)).toEqual(["getMe", "deleteWebhook", "setMyCommands"]);
    expect(api.callsTo("deleteWebhook")[0].body).toEqual({ drop_pending_updates: false });
    expect(api.callsTo("getUpdates")[0].body).toEqual({ timeout: 30, allowed_updates: ["message", "edited_message"] });
    expect(adapter.botUsername()).toBe("SwitchboardTestBot");
    expect(adapter.health()).toEqual({ connected: true, lastInboundAt: null, lastError: null });
    expect(adapter.textChunkLimit).toBe(4000);
  });

  it("B2 a webhook left behind by another deployment is removed so polling works", async () => {
    const api = await newApi();
    api.webhookUrl = "https://old.example.com/hook";
    const h = await boot({ api });
    api.injectText({ chat: privateChat(alice), from: alice, text: "hi" });
    await waitFor(() => h.inbound.length === 1);
    expect(api.webhookUrl).toBe("");
  });

  it("B3 a rejected token (401) fails start() with an auth error and no polling", async () => {
    const api = await newApi();
    const h = await boot({ api, config: { botToken: "777:not-the-right-one" }, start: false });
    const err = await h.adapter.start().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(PlatformError);
    expect((err as PlatformError).code).toBe("auth");
    expect(String((err as Error).message)).not.toContain("not-the-right-one");
    expect(h.adapter.health().lastError).toBe("getMe: 401: Unauthorized — Telegram refused the bot token: copy it again from @BotFather (/mybots → API Token) into channels.telegram.botToken, then restart");
    expect(api.callsTo("getUpdates")).toHaveLength(0);
  });

  it("B9 a token not shaped like <bot id>:<secret> fails start() before any call, and health says what is wrong (no token in it)", async () => {
    const api = await newApi();
    // A space or quote pasted along, the "bot" of the URL path, a link instead of the token.
    for (const botToken of ["123456789:AAF-fake token", "bot123456789:AAF-fake-token_for-tests", "https://t.me/SwitchboardTestBot"]) {
      const h = await boot({ api, config: { botToken }, start: false });
      const err = await h.adapter.start().catch((e: unknown) => e);
      expect(err).toMatchObject({ name: "PlatformError", code: "auth" });
      expect(h.adapter.health().lastError).toBe("channels.telegram.botToken is not a bot token: expected <bot id>:<secret> (like 123456789:AAE…), exactly as @BotFather gives it");
      expect(String((err as Error).message)).not.toContain(botToken);
    }
    expect(api.calls).toHaveLength(0);
  });

  it("B10 an empty token is said in health, so `switchboard status` shows why Telegram is disconnected", async () => {
    const h = await boot({ config: { botToken: "" }, start: false });
    await expect(h.adapter.start()).rejects.toMatchObject({ code: "auth" });
    expect(h.adapter.health()).toMatchObject({ connected: false, lastError: expect.stringMatching(/^channels\.telegram\.botToken is empty: set it to the token @BotFather gave you/) });
  });

  it("B11 a 404 to getMe (a token Telegram cannot parse, or an apiRoot that is not the Bot API) fails start() instead of retrying as if unreachable", async () => {
    const api = await newApi();
    // The fake answers 404 outside /bot<token>/<method>, as the Bot API does for a malformed token.
    const h = await boot({ api, config: { apiRoot: `${api.apiRoot}not-the-bot-api/` }, start: false });
    const err = await h.adapter.start().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(PlatformError);
    expect(String((err as Error).message)).toMatch(/getMe failed: 404: Not Found — Telegram does not know this bot token \(or channels\.telegram\.apiRoot is not the Bot API\)/);
    expect(h.adapter.health().lastError).toMatch(/^getMe: 404: Not Found — Telegram does not know this bot token/);
    expect(api.calls.map((c) => c.method)).toEqual([]);
    expect(api.callsTo("getUpdates")).toHaveLength(0);
  });

  it("B12 privacy mode on while requireMention is false (globally or for a group) is warned about at connect: Telegram withholds unmentioned group messages", async () => {
    const connectLogs = async (config: Partial<TelegramConfig>, canReadAll: boolean) => {
      const api = await newApi();
      if (canReadAll) api.override("getMe", () => ok({ ...api.bot, can_join_groups: true, can_read_all_group_messages: true, supports_inline_queries: false }));
      const lines: Array<Record<string, unknown>> = [];
      await boot({ api, config, log: pino({ level: "info" }, { write: (line: string) => void lines.push(JSON.parse(line) as Record<string, unknown>) }) });
      return lines;
    };
    const warned = (lines: Array<Record<string, unknown>>) => lines.filter((l) => l.level === 40 && String(l.msg).startsWith("telegram privacy mode is on"));
    const global = await connectLogs({ requireMention: false }, false);
    expect(warned(global)).toHaveLength(1);
    expect(warned(global)[0].msg).toContain("@BotFather → /setprivacy → Disable, then remove and re-add the bot to each group");
    expect(global.find((l) => l.msg === "telegram connected")).toMatchObject({ bot: "SwitchboardTestBot", privacyMode: true });
    expect(warned(await connectLogs({ groups: { "-100123": { requireMention: false } } }, false))).toHaveLength(1);
    // Mentions only (the default): privacy mode delivers exactly those. Privacy off: everything arrives.
    expect(warned(await connectLogs({}, false))).toHaveLength(0);
    const readsAll = await connectLogs({ requireMention: false }, true);
    expect(warned(readsAll)).toHaveLength(0);
    expect(readsAll.find((l) => l.msg === "telegram connected")).toMatchObject({ privacyMode: false });
  });

  it("B4 an unreachable Telegram at start does not fail start(); it connects in the background", async () => {
    const api = await newApi();
    api.failNext("getMe", errors.badGateway, 2);
    const h = await boot({ api, start: false });
    await h.adapter.start();
    expect(h.adapter.health().connected).toBe(false);
    await api.waitForCall("getUpdates");
    await waitFor(() => h.adapter.health().connected);
    expect(api.callsTo("getMe")).toHaveLength(3);
  });

  it("B6 a second start() of a running adapter starts no second poller (which would fight the first with 409s)", async () => {
    const h = await boot();
    await h.adapter.start();
    h.api.injectText({ chat: privateChat(alice), from: alice, text: "once" });
    await waitFor(() => h.inbound.length === 1);
    expect(h.api.callsTo("getMe")).toHaveLength(1);
    expect(h.adapter.health().lastError).toBeNull();
  });

  it("B3 after a rejected token a second start() fails the same way instead of reporting a running adapter", async () => {
    const api = await newApi();
    const h = await boot({ api, config: { botToken: "777:not-the-right-one" }, start: false });
    await expect(h.adapter.start()).rejects.toMatchObject({ code: "auth" });
    await expect(h.adapter.start()).rejects.toMatchObject({ code: "auth" });
    expect(api.callsTo("getMe")).toHaveLength(2);
    expect(api.callsTo("getUpdates")).toHaveLength(0);
  });

  it("B7 health reports disconnected while the webhook cannot be removed: nothing is being polled", async () => {
    const api = await newApi();
    api.failNext("deleteWebhook", errors.badGateway, 100);
    // A retry far away, so the check below cannot land between a retry's getMe and its failure.
    const h = await boot({ api, start: false, options: { backoff: { initialMs: 60_000, maxMs: 60_000 } } });
    await h.adapter.start();
    await waitFor(() => h.adapter.health().lastError?.startsWith("prepare:"), 5000, "the background boot failed");
    expect(h.adapter.health().connected).toBe(false);
    expect(api.callsTo("getUpdates")).toHaveLength(0);
  });

  it("B8 a restart whose first getMe fails still removes a webhook set while the adapter was stopped", async () => {
    const api = await newApi();
    const h = await boot({ api });
    await h.adapter.stop();
    api.webhookUrl = "https://other.example.com/hook";
    api.failNext("getMe", errors.badGateway);
    await h.adapter.start();
    api.injectText({ chat: privateChat(alice), from: alice, text: "after the restart" });
    await waitFor(() => h.inbound.length === 1, 5000, "inbound after the restart");
    expect(api.webhookUrl).toBe("");
  });

  it("B5 an empty token fails start() with auth; an unreachable https root still starts and stops promptly", async () => {
    const empty = await boot({ config: { botToken: "" }, start: false });
    await expect(empty.adapter.start()).rejects.toMatchObject({ code: "auth" });

    const kv = new MemoryKv();
    const ctx = { onInbound: async () => {}, kv, log: pino({ level: "silent" }) };
    // A retry a minute away: stop() must cut that wait short, or it outlasts the test's timeout.
    const adapter = createTelegramAdapter(telegramConfig({ botToken: "1:x", apiRoot: "https://127.0.0.1:1" }), ctx, { backoff: { initialMs: 60_000, maxMs: 60_000 } });
    cleanups.push(() => adapter.stop());
    await adapter.start();
    await waitFor(() => adapter.health().lastError?.startsWith("prepare:"), 5000, "background retry");
    expect(adapter.health().connected).toBe(false);
    await adapter.stop();
    expect(adapter.health().connected).toBe(false);
  });
});

describe("telegram adapter: inbound mapping", () => {
  it("D1 a private message maps to chatType direct with the sender id as peer", async () => {
    const h = await boot();
    const u = h.api.injectText({ chat: privateChat(alice), from: alice, text: "hello" });
    await waitFor(() => h.inbound[0]);
    const m = u.message as { message_id: number; date: number };
    expect(h.inbound[0]).toEqual({
      channel: "telegram", accountId: "default", chatType: "direct", peerId: String(alice.id), senderId: String(alice.id), senderName: "Alice Smith",
      text: "hello", messageId: `${alice.id}:${m.message_id}`, wasMentioned: false, to: String(alice.id), timestamp: m.date * 1000,
    });
    expect(h.adapter.health().lastInboundAt).toEqual(expect.any(Number));
  });

  it("D2 a group message maps to chatType group with the chat id as peer and the title", async () => {
    const h = await boot();
    h.api.injectText({ chat: groupChat(-5001, "Family"), from: bob, text: "dinner?" });
    await waitFor(() => h.inbound[0]);
    expect(h.inbound[0]).toMatchObject({ chatType: "group", peerId: "-5001", to: "-5001", senderId: String(bob.id), groupName: "Family", wasMentioned: false });
  });

  it("D3 a forum topic message carries the topic as threadId and the reply goes back into the topic", async () => {
    const h = await boot();
    h.api.injectText({ chat: supergroupChat(-100888, "Forum", { forum: true }), from: alice, text: "in topic", threadId: 77 });
    await waitFor(() => h.inbound[0]);
    expect(h.inbound[0]).toMatchObject({ chatType: "group", peerId: "-100888", threadId: "77", wasMentioned: false });
    await h.adapter.send(target(h.inbound[0]), "topic reply");
    expect(h.api.callsTo("sendMessage")[0].body).toEqual({ chat_id: "-100888", text: "topic reply", message_thread_id: 77 });
    expect(h.api.sent[0]).toMatchObject({ message_thread_id: 77, is_topic_message: true });
  });

  it("D4 the General topic (id 1) is a thread for routing but sends omit it, as Telegram rejects it", async () => {
    const h = await boot();
    h.api.injectText({ chat: supergroupChat(-100888, "Forum", { forum: true }), from: alice, text: "general chat" });
    await waitFor(() => h.inbound[0]);
    expect(h.inbound[0].threadId).toBe("1");
    await h.adapter.send(target(h.inbound[0]), "to general");
    expect(h.api.callsTo("sendMessage")[0].body).toEqual({ chat_id: "-100888", text: "to general" });
  });

  it("D5 a non-forum supergroup's reply thread id does not become a threadId", async () => {
    const h = await boot();
    h.api.injectText({ chat: supergroupChat(-100777, "Ops"), from: alice, text: "reply chain", threadId: 55 });
    await waitFor(() => h.inbound[0]);
    expect(h.inbound[0].threadId).toBeUndefined();
  });

  it("D6 edited messages are delivered flagged edited, with their own id", async () => {
    const h = await boot();
    const u = h.api.injectText({ chat: privateChat(alice), from: alice, text: "helo" });
    const id = (u.message as { message_id: number }).message_id;
    h.api.injectText({ chat: privateChat(alice), from: alice, text: "hello", editOf: id });
    await waitFor(() => h.inbound.length === 2);
    expect(h.inbound[1]).toMatchObject({ edited: true, text: "hello" });
    expect(h.inbound[1].messageId).not.toBe(h.inbound[0].messageId);
  });

  it("D7 forwarded messages are flagged", async () => {
    const h = await boot();
    h.api.injectText({ chat: privateChat(alice), from: alice, text: "/send off", forwardedFrom: bob });
    await waitFor(() => h.inbound[0]);
    expect(h.inbound[0].forwarded).toBe(true);
  });

  it("I1 the bot's own messages and service messages (someone joined) are skipped, but the offset moves past them", async () => {
    const h = await boot();
    const group = groupChat(-5001, "Family");
    h.api.injectText({ chat: group, from: h.api.bot, text: "echo of my own" });
    h.api.pushUpdate({ message: { message_id: 900, from: alice, chat: group, date: 1_700_000_000, new_chat_members: [bob] } });
    const last = h.api.injectText({ chat: group, from: alice, text: "real" });
    await waitFor(() => h.inbound.length === 1);
    expect(h.inbound.map((m) => m.text)).toEqual(["real"]);
    await waitFor(async () => (await h.kv.get(OFFSET_KEY)) === last.update_id + 1);
    await waitFor(() => h.api.pendingUpdates.length === 0, 5000, "fake saw the confirming offset");
  });
});

describe("telegram adapter: media", () => {
  const group = groupChat(-5001, "Family");
  const photo = { photo: [{ file_id: "p", file_unique_id: "p", width: 90, height: 90 }] };

  it("P1 media without a caption reaches the core as a placeholder saying what was sent; a caption comes first", async () => {
    const h = await boot();
    const dm = privateChat(alice);
    h.api.injectText({ chat: dm, from: alice }); // a sticker
    h.api.injectText({ chat: dm, from: alice, media: { voice: { file_id: "v", duration: 3 } } });
    h.api.injectText({ chat: dm, from: alice, media: { document: { file_id: "d", file_name: "report.pdf" } } });
    h.api.injectText({ chat: dm, from: alice, caption: "look at this" });
    await waitFor(() => h.inbound.length === 4);
    expect(h.inbound.map((m) => m.text)).toEqual(["[sticker]", "[voice message]", "[document: report.pdf]", "look at this\n[photo]"]);
  });

  it("P2 an album is one message: its first item and its captioned ones; the other items are skipped, and the offset moves past them", async () => {
    const h = await boot();
    h.api.injectText({ chat: group, from: alice, caption: "our trip", mediaGroupId: "A" });
    h.api.injectText({ chat: group, from: alice, media: photo, mediaGroupId: "A" });
    h.api.injectText({ chat: group, from: alice, media: photo, mediaGroupId: "A" });
    h.api.injectText({ chat: group, from: alice, media: photo, mediaGroupId: "B" });
    h.api.injectText({ chat: group, from: alice, media: photo, mediaGroupId: "B" });
    const last = h.api.injectText({ chat: group, from: alice, text: "next" });
    await waitFor(() => h.inbound.length === 3);
    expect(h.inbound.map((m) => m.text)).toEqual(["our trip\n[photo]", "[photo]", "next"]);
    await waitFor(async () => (await h.kv.get(OFFSET_KEY)) === last.update_id + 1);
  });

  it("P3 an album's first item the core refused is handed over again when Telegram delivers it again, the rest still skipped", async () => {
    const h = await boot();
    let refusals = 1;
    h.handler = async (m) => {
      if (refusals-- > 0) throw new Error("store unavailable");
      h.inbound.push(m);
    };
    h.api.injectText({ chat: group, from: alice, media: photo, mediaGroupId: "A" });
    h.api.injectText({ chat: group, from: alice, media: photo, mediaGroupId: "A" });
    await waitFor(() => h.inbound.length === 1);
    await waitFor(() => h.api.pendingUpdates.length === 0, 5000, "both items confirmed");
    expect(h.inbound.map((m) => m.text)).toEqual(["[photo]"]);
  });
});

describe("telegram adapter: mentions and commands", () => {
  const group = groupChat(-5001, "Family");

  it("M1 @botusername (any case) is a mention; another handle is not", async () => {
    const h = await boot();
    h.api.injectText({ chat: group, from: alice, text: "hey @switchboardtestbot" });
    h.api.injectText({ chat: group, from: alice, text: "hey @someone_else" });
    await waitFor(() => h.inbound.length === 2);
    expect(h.inbound.map((m) => m.wasMentioned)).toEqual([true, false]);
  });

  it("M2 a reply to one of the bot's messages is a mention", async () => {
    const h = await boot();
    h.api.injectText({ chat: group, from: alice, text: "question" });
    await waitFor(() => h.inbound[0]);
    await h.adapter.send(target(h.inbound[0]), "answer");
    h.api.injectText({ chat: group, from: alice, text: "follow-up", replyTo: h.api.sent[0] });
    await waitFor(() => h.inbound.length === 2);
    expect(h.inbound[1].wasMentioned).toBe(true);
  });

  it("M3 plain messages in a topic the bot created are not mentions", async () => {
    const h = await boot();
    const forum = supergroupChat(-100888, "Forum", { forum: true });
    h.api.injectText({ chat: forum, from: h.api.bot, text: "topic opener", threadId: 9 });
    h.api.injectText({ chat: forum, from: alice, text: "chatting", threadId: 9 });
    await waitFor(() => h.inbound[0]);
    expect(h.inbound[0]).toMatchObject({ text: "chatting", wasMentioned: false, threadId: "9" });
  });

  it("C1 /send@OurBot off is normalised to /send off (and is addressed to us)", async () => {
    const h = await boot();
    h.api.injectText({ chat: group, from: alice, text: "/send@SwitchboardTestBot off" });
    await waitFor(() => h.inbound[0]);
    expect(h.inbound[0]).toMatchObject({ text: "/send off", wasMentioned: true });
  });

  it("C2 /send@OtherBot off is another bot's: not handed to the core, and the offset moves past it", async () => {
    const h = await boot();
    h.api.injectText({ chat: group, from: alice, text: "/send@OtherBot off" });
    const last = h.api.injectText({ chat: group, from: alice, text: "next" });
    await waitFor(() => h.inbound[0]);
    expect(h.inbound.map((m) => m.text)).toEqual(["next"]);
    await waitFor(async () => (await h.kv.get(OFFSET_KEY)) === last.update_id + 1);
  });
});

describe("telegram adapter: offset durability", () => {
  it("O1 the offset is persisted only after onInbound resolved", async () => {
    const h = await boot();
    let accept!: () => void;
    h.handler = (m) => new Promise<void>((r) => (accept = () => r(void h.inbound.push(m))));
    const u = h.api.injectText({ chat: privateChat(alice), from: alice, text: "slow" });
    await waitFor(() => accept);
    expect(await h.kv.get(OFFSET_KEY)).toBeUndefined();
    accept();
    await waitFor(async () => (await h.kv.get(OFFSET_KEY)) === u.update_id + 1);
  });

  it("O2 a restart with the same kv resumes after processed updates, even if Telegram never saw the confirmation", async () => {
    const api = await newApi();
    // Simulates a crash right after the offset was saved: Telegram keeps every update.
    api.override("getUpdates", async (body) => {
      await new Promise((r) => setTimeout(r, 20));
      return ok(api.pendingUpdates.filter((u) => u.update_id >= Number(body.offset ?? 0)));
    });
    const h1 = await boot({ api });
    const a = api.injectText({ chat: privateChat(alice), from: alice, text: "a" });
    const b = api.injectText({ chat: privateChat(alice), from: alice, text: "b" });
    await waitFor(() => h1.inbound.length === 2);
    await waitFor(async () => (await h1.kv.get(OFFSET_KEY)) === b.update_id + 1);
    await h1.adapter.stop();
    api.override("getUpdates", undefined);
    expect(api.pendingUpdates.map((u) => u.update_id)).toEqual([a.update_id, b.update_id]);

    const seq = api.calls.length;
    const h2 = await boot({ api, kv: h1.kv });
    expect(api.calls.find((c) => c.method === "getUpdates" && c.seq >= seq)?.body.offset).toBe(b.update_id + 1);
    api.injectText({ chat: privateChat(alice), from: alice, text: "c" });
    await waitFor(() => h2.inbound.length === 1);
    expect(h2.inbound.map((m) => m.text)).toEqual(["c"]);
  });

  it("O3 an update whose onInbound rejected is re-delivered, with the ones after it, in order", async () => {
    const api = await newApi();
    api.injectText({ chat: privateChat(alice), from: alice, text: "x" });
    api.injectText({ chat: privateChat(alice), from: alice, text: "y" });
    const h = await boot({ api, start: false });
    const attempts: string[] = [];
    h.handler = async (m) => {
      attempts.push(m.text);
      if (m.text === "x" && attempts.length === 1) throw new Error("store unavailable");
      h.inbound.push(m);
    };
    await h.adapter.start();
    await waitFor(() => attempts.length === 4);
    // A batch is handed over at once (the core stores it in one commit); after a rejection the
    // poll restarts at the rejected update, so "x" comes again before "y" (the core dedupes "y").
    expect(attempts).toEqual(["x", "y", "x", "y"]);
    expect(h.adapter.health().lastError).toContain("store unavailable");
  });

  it("O4 an update whose onInbound never resolved before stop() is delivered again after a restart", async () => {
    const api = await newApi();
    const h1 = await boot({ api, options: { stopGraceMs: 50 } });
    let stuck = false;
    h1.handler = () => ((stuck = true), new Promise<void>(() => {}));
    const u = api.injectText({ chat: privateChat(alice), from: alice, text: "in flight" });
    await waitFor(() => stuck);
    await h1.adapter.stop();
    expect(await h1.kv.get(OFFSET_KEY)).toBeUndefined();

    const h2 = await boot({ api, kv: h1.kv });
    await waitFor(() => h2.inbound.length === 1);
    expect(h2.inbound[0].text).toBe("in flight");
    await waitFor(async () => (await h2.kv.get(OFFSET_KEY)) === u.update_id + 1);
  });

  it("O5 update ids renumbered below the stored offset (Telegram, after a week without updates) are handled and confirmed, not skipped in a busy loop", async () => {
    const api = await newApi();
    api.renumberUpdates(900_000);
    const h = await boot({ api });
    const before = api.injectText({ chat: privateChat(alice), from: alice, text: "before the quiet week" });
    await waitFor(async () => (await h.kv.get(OFFSET_KEY)) === before.update_id + 1, 5000, "first offset stored");
    // A week later Telegram numbers updates afresh, here below our offset: the server answers such
    // an offset from the head of its queue, and only an offset past these ids confirms them.
    api.renumberUpdates(1000);
    const after = api.injectText({ chat: privateChat(alice), from: alice, text: "after the quiet week" });
    await waitFor(() => h.inbound.length === 2, 5000, "the renumbered message handed to the core");
    expect(h.inbound.map((m) => m.text)).toEqual(["before the quiet week", "after the quiet week"]);
    await waitFor(async () => (await h.kv.get(OFFSET_KEY)) === after.update_id + 1, 5000, "the offset follows Telegram's numbering");
    await waitFor(() => api.pendingUpdates.length === 0, 5000, "Telegram saw the update confirmed");
  });
});

describe("telegram adapter: polling errors", () => {
  it("R1 a second poller on the same token (409) is survived: polling recovers once it is gone", async () => {
    const api = await newApi();
    const h1 = await boot({ api });
    const h2 = await boot({ api, kv: new MemoryKv() });
    await waitFor(() => h1.adapter.health().lastError?.includes("409"), 5000, "h1 saw a 409");
    await h2.adapter.stop();
    api.injectText({ chat: privateChat(alice), from: alice, text: "after the conflict" });
    await waitFor(() => h1.inbound.length === 1);
    expect(h1.adapter.health().connected).toBe(true);
    expect(h1.adapter.health().lastError).toMatch(/^poll: 409: Conflict/);
  });

  it("R1b a 409 says in health and the log what to do: another program reads this bot's updates", async () => {
    const api = await newApi();
    const lines: Array<Record<string, unknown>> = [];
    const h1 = await boot({ api, log: pino({ level: "warn" }, { write: (line: string) => void lines.push(JSON.parse(line) as Record<string, unknown>) }) });
    await boot({ api, kv: new MemoryKv() });
    const hint = "another program is reading this bot's updates (a second switchboard, or the same bot running elsewhere): stop it, or give each its own bot from @BotFather";
    await waitFor(() => h1.adapter.health().lastError?.includes("409"), 5000, "h1 saw a 409");
    expect(h1.adapter.health().lastError).toBe(`poll: 409: ${errors.conflict.description} — ${hint}`);
    expect(lines.find((l) => l.msg === "telegram polling error")?.err).toBe(`poll: 409: ${errors.conflict.description} — ${hint}`);
  });

  it("two pollers fighting over one token: the 409 is warned once a minute, each retry only at debug", async () => {
    const api = await newApi();
    const lines: Array<Record<string, unknown>> = [];
    const h1 = await boot({ api, log: pino({ level: "debug" }, { write: (line: string) => void lines.push(JSON.parse(line) as Record<string, unknown>) }) });
    await boot({ api, kv: new MemoryKv() });
    const conflicts = () => lines.filter((l) => String(l.err).startsWith("poll: 409"));
    await waitFor(() => conflicts().length >= 5, 10_000, "h1 retried through several 409s");
    expect(h1.adapter.health().lastError).toMatch(/^poll: 409/);
    expect(conflicts().filter((l) => l.msg === "telegram polling error")).toHaveLength(1);
    expect(conflicts().slice(1).every((l) => l.msg === "telegram polling error (repeated)" && l.level === 20)).toBe(true);
  });

  it("two pollers fighting over one token: the warning a minute later says how many retries were held back since the last", async () => {
    const api = await newApi();
    const lines: Array<Record<string, unknown>> = [];
    // The clock the warnings' window reads stands still until the test moves it a minute on.
    vi.useFakeTimers({ toFake: ["Date"] });
    try {
      await boot({ api, log: pino({ level: "debug" }, { write: (line: string) => void lines.push(JSON.parse(line) as Record<string, unknown>) }) });
      await boot({ api, kv: new MemoryKv() });
      const conflicts = () => lines.filter((l) => String(l.err).startsWith("poll: 409"));
      const warnings = () => conflicts().filter((l) => l.msg === "telegram polling error");
      await vi.waitFor(() => expect(conflicts().length).toBeGreaterThanOrEqual(3), { timeout: 10_000 });
      expect(warnings()).toHaveLength(1);
      vi.setSystemTime(Date.now() + 61_000);
      await vi.waitFor(() => expect(warnings()).toHaveLength(2), { timeout: 10_000 });
      const held = conflicts().indexOf(warnings()[1]) - 1;
      expect(held).toBeGreaterThanOrEqual(2);
      expect(warnings()[0]).not.toHaveProperty("repeatedSinceLastWarning");
      expect(warnings()[1]).toMatchObject({ level: 40, repeatedSinceLastWarning: held });
    } finally {
      vi.useRealTimers();
    }
  });

  it("R2 a 429 on getUpdates waits retry_after seconds before polling again", async () => {
    const api = await newApi();
    api.failNext("getUpdates", errors.tooManyRequests(1));
    const h = await boot({ api });
    const polls = await waitFor(() => (api.callsTo("getUpdates").length >= 2 ? api.callsTo("getUpdates") : undefined));
    expect(polls[0].reply).toEqual(errors.tooManyRequests(1));
    // The test backoff is 20 ms, so a ~1 s gap can only come from retry_after.
    expect(polls[1].at - polls[0].at).toBeGreaterThanOrEqual(950);
    expect(h.adapter.health().lastError).toBe("poll: 429: Too Many Requests: retry after 1");
  });

  it("R3 5xx and dropped connections are retried with backoff, and errors never show the token", async () => {
    const api = await newApi();
    const replies: ApiReply[] = [errors.badGateway, { destroySocket: true }, errors.serverError];
    api.override("getUpdates", () => replies.shift());
    const h = await boot({ api, start: false });
    const lastErrors = new Set<string>();
    await h.adapter.start();
    api.injectText({ chat: privateChat(alice), from: alice, text: "survived" });
    await waitFor(() => {
      const e = h.adapter.health().lastError;
      if (e) lastErrors.add(e);
      return h.inbound.length === 1;
    });
    expect(api.callsTo("getUpdates").length).toBeGreaterThanOrEqual(4);
    for (const e of lastErrors) expect(e).not.toContain(api.token.split(":")[1]);
    expect(h.adapter.health().connected).toBe(true);
  });
});

describe("telegram adapter: polling errors (health and connections)", () => {
  it("R4 health reports disconnected while getUpdates fails, and connected again once a poll succeeds", async () => {
    const api = await newApi();
    const h = await boot({ api });
    let failing = true;
    api.override("getUpdates", () => (failing ? errors.badGateway : undefined));
    // Ends the parked poll, so the next one meets the outage.
    api.injectText({ chat: privateChat(alice), from: alice, text: "before the outage" });
    await waitFor(() => h.adapter.health().lastError?.includes("502"), 5000, "a failed poll");
    expect(h.adapter.health().connected).toBe(false);
    failing = false;
    api.injectText({ chat: privateChat(alice), from: alice, text: "after the outage" });
    await waitFor(() => h.inbound.length === 2, 5000, "inbound after the outage");
    expect(h.adapter.health().connected).toBe(true);
  });

  it("R4 after a failed poll the next one is short, so health shows connected again without waiting out a quiet long poll", async () => {
    const api = await newApi();
    api.failNext("getUpdates", errors.badGateway);
    const h = await boot({ api });
    // No message arrives: only a poll that answers at once can show the connection restored.
    await waitFor(() => h.adapter.health().connected && api.callsTo("getUpdates").length >= 3, 5000, "connected again");
    expect(api.callsTo("getUpdates").map((c) => (c.body as { timeout: number }).timeout)).toEqual([30, 0, 30]);
  });

  it("R5 a failed poll is retried on a fresh connection, not on the kept-alive socket that may be the stuck part", async () => {
    const api = await newApi();
    api.failNext("getUpdates", errors.badGateway);
    await boot({ api });
    const polls = await waitFor(() => (api.callsTo("getUpdates").length >= 2 ? api.callsTo("getUpdates") : undefined));
    expect(polls[0].reply).toEqual(errors.badGateway);
    expect(polls[1].clientPort).toEqual(expect.any(Number));
    expect(polls[1].clientPort).not.toBe(polls[0].clientPort);
  });
});

describe("telegram adapter: sending", () => {
  async function withDm(o: BootOptions = {}) {
    const h = await boot(o);
    h.api.injectText({ chat: privateChat(alice), from: alice, text: "hi" });
    await waitFor(() => h.inbound[0]);
    return h;
  }

  it("S1 send returns the platform message id and replies to the given message", async () => {
    const h = await withDm();
    const receipt = await h.adapter.send(target(h.inbound[0], { replyToMessageId: h.inbound[0].messageId }), "hello back");
    expect(receipt).toEqual({ messageId: String(h.api.sent[0].message_id) });
    expect(h.api.callsTo("sendMessage")[0].body).toEqual({
      chat_id: String(alice.id), text: "hello back", reply_parameters: { message_id: Number(h.inbound[0].messageId.split(":")[1]), allow_sending_without_reply: true },
    });
    expect(h.api.sent[0].reply_to_message?.text).toBe("hi");
  });

  it("S2 a user who blocked the bot (403) → PlatformError forbidden, not retried", async () => {
    const h = await withDm();
    h.api.blockChat(alice.id);
    const err = await h.adapter.send(target(h.inbound[0]), "x").catch((e: unknown) => e);
    expect(err).toMatchObject({ name: "PlatformError", channel: "telegram", code: "forbidden", retryable: false });
    expect(h.api.callsTo("sendMessage")).toHaveLength(1);
  });

  it("S3 Telegram's per-chat limit (429) → rate_limited with retryAfterMs, not retried", async () => {
    const api = await newApi({ enforceRateLimits: true });
    const h = await withDm({ api });
    await h.adapter.send(target(h.inbound[0]), "first");
    const err = (await h.adapter.send(target(h.inbound[0]), "second").catch((e: unknown) => e)) as PlatformError;
    expect(err).toBeInstanceOf(PlatformError);
    expect([err.code, err.retryAfterMs, err.retryable]).toEqual(["rate_limited", 1000, true]);
    expect(api.rateLimitHits).toBe(1);
    expect(api.callsTo("sendMessage")).toHaveLength(2);
  });

  it("S4 chat not found → not_found; a dropped connection → transport", async () => {
    const api = await newApi({ strictChats: true });
    const h = await boot({ api });
    const err = (await h.adapter.send({ channel: "telegram", accountId: "default", to: "424242" }, "x").catch((e: unknown) => e)) as PlatformError;
    expect(err.code).toBe("not_found");
    api.failNext("sendMessage", { destroySocket: true });
    const err2 = (await h.adapter.send({ channel: "telegram", accountId: "default", to: "424242" }, "x").catch((e: unknown) => e)) as PlatformError;
    expect(err2.code).toBe("transport");
    expect(err2.message).not.toContain(api.token);
  });

  it("S6 onWire (the outbox's journal line) runs once per send, before the request is written to its socket, also for a send Telegram refuses", async () => {
    const h = await withDm();
    const order: string[] = [];
    // The socket write the request's flush makes (headers and body, corked together).
    const original = net.Socket.prototype.write;
    const spy = vi.spyOn(net.Socket.prototype, "write").mockImplementation(function (this: net.Socket, ...args: Parameters<net.Socket["write"]>) {
      if (String(args[0]).includes("/sendMessage")) order.push("request written");
      return Reflect.apply(original, this, args) as boolean;
    });
    cleanups.push(async () => spy.mockRestore());
    await h.adapter.send(target(h.inbound[0]), "one", { onWire: () => order.push("wire") });
    h.api.blockChat(alice.id);
    await h.adapter.send(target(h.inbound[0]), "two", { onWire: () => order.push("wire") }).catch(() => undefined);
    expect(order).toEqual(["wire", "request written", "wire", "request written"]);
  });

  it("S7 a reply to a group upgraded to a supergroup meanwhile (400 migrate_to_chat_id) goes to the new id, and later sends go there directly", async () => {
    const h = await boot();
    const group = groupChat(-5001, "Family");
    h.api.injectText({ chat: group, from: alice, text: "question" });
    await waitFor(() => h.inbound[0]);
    // Upgraded while the reply was being written; its service messages not yet polled.
    h.api.migrateChat(group, supergroupChat(-1005001, "Family"), alice, { announce: false });
    let wires = 0;
    const receipt = await h.adapter.send(target(h.inbound[0]), "answer", { onWire: () => void wires++ });
    expect(h.api.callsTo("sendMessage").map((c) => c.body.chat_id)).toEqual(["-5001", "-1005001"]);
    expect(h.api.sent.map((m) => [m.chat.id, m.text])).toEqual([[-1005001, "answer"]]);
    expect(receipt).toEqual({ messageId: String(h.api.sent[0].message_id) });
    // The resend has its journal line too: a crash during it must not pass for "never sent".
    expect(wires).toBe(2);
    await h.adapter.send(target(h.inbound[0]), "more");
    expect(h.api.callsTo("sendMessage").map((c) => c.body.chat_id)).toEqual(["-5001", "-1005001", "-1005001"]);
  });

  it("S8 the upgrade's service message is logged with both ids, and sends to the old id go to the new one from then on", async () => {
    const lines: Array<Record<string, unknown>> = [];
    const log = pino({ level: "info" }, { write: (line: string) => void lines.push(JSON.parse(line) as Record<string, unknown>) });
    const h = await boot({ log });
    const group = groupChat(-5001, "Family");
    const upgraded = supergroupChat(-1005001, "Family");
    h.api.migrateChat(group, upgraded, alice);
    h.api.injectText({ chat: upgraded, from: alice, text: "in the supergroup" });
    await waitFor(() => h.inbound[0]);
    expect(h.inbound.map((m) => [m.peerId, m.text])).toEqual([["-1005001", "in the supergroup"]]);
    // Both service messages name the upgrade; it is logged once.
    const logged = lines.filter((l) => l.from === "-5001" && l.to === "-1005001");
    expect(logged.map((l) => l.level)).toEqual([40]);
    expect(logged[0].msg).toMatch(/upgraded to a supergroup/);
    await h.adapter.send({ channel: "telegram", accountId: "default", to: "-5001" }, "to the old id");
    expect(h.api.callsTo("sendMessage").map((c) => c.body.chat_id)).toEqual(["-1005001"]);
  });

  it("S5 typing sends a typing chat action into the topic, and never throws", async () => {
    const h = await boot();
    const t: OutboundTarget = { channel: "telegram", accountId: "default", to: "-100888", threadId: "77" };
    await h.adapter.typing!(t);
    expect(h.api.callsTo("sendChatAction")[0].body).toEqual({ chat_id: "-100888", action: "typing", message_thread_id: 77 });
    h.api.blockChat(-100888);
    await expect(h.adapter.typing!(t)).resolves.toBeUndefined();
  });

  it("L1 rateLimitsFor reports Telegram's published limits", async () => {
    const h = await boot({ start: false });
    expect(h.adapter.rateLimitsFor!({ channel: "telegram", accountId: "default", to: "42" })).toEqual([{ key: "chat:42", count: 1, intervalMs: 1000 }, { key: "global", count: 30, intervalMs: 1000 }]);
    expect(h.adapter.rateLimitsFor!({ channel: "telegram", accountId: "default", to: "-100888" })[0]).toEqual({ key: "chat:-100888", count: 20, intervalMs: 60_000 });
  });
});

describe("telegram adapter: command menu", () => {
  it("K1 setMyCommands runs once across restarts with the same kv, and again when the commands change", async () => {
    const api = await newApi();
    const kv = new MemoryKv();
    const h1 = await boot({ api, kv });
    await h1.adapter.stop();
    const h2 = await boot({ api, kv });
    await h2.adapter.stop();
    expect(api.callsTo("setMyCommands")).toHaveLength(1);
    expect(api.commands.get("default")?.map((c) => (c as { command: string }).command)).toEqual(["send", "status", "sid", "new", "reset", "stop", "help"]);

    await boot({ api, kv, options: { commands: [{ command: "status", description: "Show the session status" }] } });
    expect(api.callsTo("setMyCommands")).toHaveLength(2);
    expect(api.commands.get("default")).toEqual([{ command: "status", description: "Show the session status" }]);
  });

  it("K2 a 429 on setMyCommands does not block polling; the next start tries again", async () => {
    const api = await newApi();
    api.failNext("setMyCommands", errors.tooManyRequests(480));
    const kv = new MemoryKv();
    const h1 = await boot({ api, kv });
    expect(h1.adapter.health().lastError).toBe("setMyCommands: 429: Too Many Requests: retry after 480");
    api.injectText({ chat: privateChat(alice), from: alice, text: "still works" });
    await waitFor(() => h1.inbound.length === 1);
    await h1.adapter.stop();
    await boot({ api, kv });
    expect(api.callsTo("setMyCommands").map((c) => (c.reply as { ok: boolean }).ok)).toEqual([false, true]);
  });
});

function resourceCounts(): Map<string, number> {
  const counts = new Map<string, number>();
  for (const r of process.getActiveResourcesInfo()) counts.set(r, (counts.get(r) ?? 0) + 1);
  return counts;
}

describe("telegram adapter: stop", () => {
  it("T1 stop() aborts the parked long poll promptly, polls no more and leaks no handles", async () => {
    const before = resourceCounts();
    const api = new FakeTelegramBotApi();
    await api.start();
    // A grace longer than the test's timeout: stop() returns only if it aborted the parked poll
    // instead of waiting for it.
    const h = await boot({ api, options: { stopGraceMs: 60_000 } });
    const polls = api.callsTo("getUpdates").length;
    expect(api.isPolling).toBe(true);
    await h.adapter.stop();
    // Aborting our own poll is not a polling error: a clean shutdown leaves none behind.
    expect(h.adapter.health()).toMatchObject({ connected: false, lastError: null });
    await waitFor(() => !api.isPolling, 2000, "fake saw the long poll aborted");
    await api.stop();
    expect(api.callsTo("getUpdates")).toHaveLength(polls);
    const leaked = (): string[] => [...resourceCounts()].filter(([type, n]) => n > (before.get(type) ?? 0)).map(([type]) => type);
    await waitFor(() => leaked().length === 0, 2000, "handles released").catch(() => expect(leaked()).toEqual([]));
  });

  it("T3 stop() while start() still waits for getMe: the late answer neither connects nor boots nor polls", async () => {
    const api = await newApi();
    let release!: () => void;
    const held = new Promise<void>((r) => (release = r));
    api.override("getMe", async () => {
      await held;
      return undefined;
    });
    const h = await boot({ api, start: false });
    const starting = h.adapter.start();
    await api.waitForCall("getMe");
    await h.adapter.stop();
    const afterStop = api.calls.length;
    release();
    await starting;
    // getMe really was answered successfully, so only stop() can have ended the boot.
    expect(api.callsTo("getMe")[0].reply).toMatchObject({ ok: true });
    expect(h.adapter.health().connected).toBe(false);
    expect(api.calls.slice(afterStop).map((c) => c.method)).toEqual([]);
  });

  it.each([
    ["deleteWebhook", undefined],
    ["setMyCommands", errors.tooManyRequests(480)],
    ["getMe", errors.unauthorized],
  ] as const)("T4 stop() while the boot waits for %s: its late answer neither connects, nor reports an error, nor calls Telegram again", async (method, reply) => {
    const api = await newApi();
    let release!: () => void;
    const held = new Promise<void>((r) => (release = r));
    api.override(method, async () => {
      await held;
      return reply;
    });
    const h = await boot({ api, start: false });
    const starting = h.adapter.start();
    await api.waitForCall(method);
    await h.adapter.stop();
    const afterStop = api.calls.length;
    release();
    // A start overtaken by stop() has nothing left to report, not even a refused token.
    await starting;
    expect(api.callsTo(method)[0].reply).toBeDefined();
    expect(h.adapter.health()).toMatchObject({ connected: false, lastError: null });
    expect(api.calls.slice(afterStop).map((c) => c.method)).toEqual([]);
  });

  it("T5 stop() waits, within its grace, for an update the core is still accepting, and its offset is stored before stop() returns", async () => {
    const h = await boot({ options: { stopGraceMs: 60_000 } });
    let accept!: () => void;
    h.handler = (m) => new Promise<void>((r) => (accept = () => r(void h.inbound.push(m))));
    const u = h.api.injectText({ chat: privateChat(alice), from: alice, text: "being accepted" });
    await waitFor(() => accept);
    let stopped = false;
    const stopping = h.adapter.stop().then(() => (stopped = true));
    await new Promise((r) => setTimeout(r, 25));
    expect(stopped).toBe(false);
    accept();
    await stopping;
    expect(await h.kv.get(OFFSET_KEY)).toBe(u.update_id + 1);
  });

  it("T6 stop() closes the connections that sends and typing kept alive", async () => {
    const h = await boot();
    const to: OutboundTarget = { channel: "telegram", accountId: "default", to: String(alice.id) };
    await h.adapter.send(to, "hello");
    await h.adapter.typing!(to);
    const ports = ["sendMessage", "sendChatAction"].map((m) => h.api.callsTo(m)[0].clientPort!);
    expect(ports.map((p) => h.api.isConnectionOpen(p))).toEqual([true, true]);
    await h.adapter.stop();
    await waitFor(() => ports.every((p) => !h.api.isConnectionOpen(p)), 2000, "kept-alive connections closed");
  });

  it("T2 stop() is prompt even while onInbound hangs", async () => {
    const h = await boot({ options: { stopGraceMs: 200 } });
    let called = false;
    h.handler = () => ((called = true), new Promise<void>(() => {}));
    h.api.injectText({ chat: privateChat(alice), from: alice, text: "hang" });
    await waitFor(() => called);
    // The handler never settles: stop() returns once the grace is over, or the test times out.
    await h.adapter.stop();
    expect(h.adapter.health().connected).toBe(false);
  });
});

/** The whole daemon (in process) polling a fresh Bot API fake, stopped after the test. */
async function daemonOnTelegram(telegram: Record<string, unknown> = {}, config: Record<string, unknown> = {}) {
  const api = new FakeTelegramBotApi({ maxLongPollMs: 200 });
  const apiRoot = await api.start();
  const h = await startHarness({ config: { ...config, channels: { telegram: { enabled: true, botToken: api.token, apiRoot, pollTimeoutSeconds: 1, ...telegram } } } });
  cleanups.push(async () => {
    await h.stop();
    await api.stop();
  });
  await api.waitForCall("getUpdates");
  return { api, h };
}

describe("telegram end to end: a reply that may have arrived", () => {
  it("a sendMessage whose connection drops after Telegram had the whole request is not sent again (a duplicate is worse); it is recorded unknown_after_send, and the chat's next reply goes", async () => {
    const { api, h } = await daemonOnTelegram();
    api.failNext("sendMessage", { destroySocket: true });
    const ada = fakeUser("Ada", { id: 7001 });
    api.injectText({ chat: privateChat(ada), from: ada, text: "first" });
    await waitFor(() => api.callsTo("sendMessage").length === 1, 10_000, "the first reply's send");
    api.injectText({ chat: privateChat(ada), from: ada, text: "second" });
    const entry = h.app.sessions.get("agent:main:main")!;
    const deliveries = async () => (await h.app.transcripts.readLines(h.app.sessions.transcriptPath(entry))).filter((l) => l.type === "delivery");
    // The second reply's outcome is recorded once the daemon has Telegram's answer, after the fake counted the send.
    await waitFor(async () => (await deliveries()).length === 2, 10_000, "both replies' outcomes recorded");
    expect(api.callsTo("sendMessage").map((c) => c.body.text)).toEqual(["echo: first", "echo: second"]);
    expect((await deliveries()).map((d) => d.status)).toEqual(["unknown_after_send", "sent"]);
  });
});

describe("telegram end to end: a group upgraded to a supergroup", () => {
  it("a reply in flight when the group is upgraded is delivered to the supergroup, not lost with a 400", async () => {
    const { api, h } = await daemonOnTelegram();
    const group = groupChat(-5001, "Family");
    const ada = fakeUser("Ada", { id: 7002 });
    // The upgrade lands while the reply is being written (the model answers once it is asked).
    h.model.setResponder(() => {
      api.migrateChat(group, supergroupChat(-1005001, "Family"), ada, { announce: false });
      return { content: "the answer" };
    });
    api.injectText({ chat: group, from: ada, text: "@SwitchboardTestBot question" });
    const entry = await waitFor(() => h.app.sessions.get("agent:main:telegram:group:-5001"), 10_000, "the group's session");
    const deliveries = async () => (await h.app.transcripts.readLines(h.app.sessions.transcriptPath(entry))).filter((l) => l.type === "delivery");
    await waitFor(async () => (await deliveries()).length === 1, 10_000, "the reply's outcome recorded");
    expect((await deliveries()).map((d) => d.status)).toEqual(["sent"]);
    expect(api.sent.map((m) => [m.chat.id, m.text])).toEqual([[-1005001, "the answer"]]);
  });
});

describe("telegram end to end: commands addressed to another bot", () => {
  it("C3 in a group that answers everything, /stop@OtherBot and /send@OtherBot off are neither run as commands nor answered as prompts", async () => {
    const owner = fakeUser("Owner", { id: 7003 });
    const { api, h } = await daemonOnTelegram({ requireMention: false }, { commands: { owners: [`telegram:${owner.id}`] } });
    const group = groupChat(-5002, "Two bots");
    api.injectText({ chat: group, from: owner, text: "/send@OtherBot off" });
    api.injectText({ chat: group, from: owner, text: "/stop@OtherBot" });
    api.injectText({ chat: group, from: owner, text: "hello" });
    await waitFor(() => api.sent.length >= 1, 10_000, "the answer to hello");
    await waitFor(() => api.pendingUpdates.length === 0, 5000, "every update confirmed");
    await h.app.router.idle();
    expect(api.sent.map((m) => m.text)).toEqual(["echo: hello"]);
    expect(h.model.requests).toHaveLength(1);
    expect(h.app.sessions.get("agent:main:telegram:group:-5002")?.sendPolicy).toBeUndefined();
  });
});
