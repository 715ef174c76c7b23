/**
 * The Discord adapter with the real discord.js client against the wire-level fake in
 * test/fakes/discord-api.ts (REST + gateway on 127.0.0.1).
 */
import pino from "pino";
import { afterEach, describe, expect, it, vi } from "vitest";
import { ChannelType, Client } from "discord.js";
import { CACHED_PEOPLE, createDiscordAdapter, type DiscordAdapterOptions } from "../../adapters/discord/index.js";
import { PlatformError, type AdapterKv, type ChannelAdapter, type InboundMessage, type NativeCommand, type OutboundTarget } from "../../src/channels/types.js";
import { ConfigSchema, type DiscordConfig } from "../../src/config/schema.js";
import { FakeDiscord, type FakeDiscordOptions } from "../fakes/discord-api.js";

const MESSAGES = "POST /channels/:id/messages";
const waitOpts = { timeout: 5000, interval: 10 };

function memoryKv(): AdapterKv & { map: Map<string, unknown> } {
  const map = new Map<string, unknown>();
  return {
    map,
    get: async <T>(key: string) => map.get(key) as T | undefined,
    set: async <T>(key: string, value: T) => void map.set(key, value),
    delete: async (key: string) => void map.delete(key),
  };
}

function discordConfig(fake: FakeDiscord, overrides: Record<string, unknown> = {}): DiscordConfig {
  const parsed = ConfigSchema.parse({ channels: { discord: { enabled: true, token: fake.token, apiBase: fake.apiBase, ...overrides } } });
  return parsed.channels.discord!;
}

interface Harness {
  fake: FakeDiscord;
  adapter: ChannelAdapter;
  kv: ReturnType<typeof memoryKv>;
  inbound: InboundMessage[];
  commands: NativeCommand[];
}

const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  // Adapters stop before their fake, so nothing reconnects into a closed server.
  for (const fn of cleanups.splice(0).reverse()) await fn();
});

async function startFake(options: FakeDiscordOptions = {}): Promise<FakeDiscord> {
  const fake = await new FakeDiscord(options).start();
  cleanups.push(() => fake.stop());
  return fake;
}

function makeAdapter(
  fake: FakeDiscord,
  opts: {
    kv?: ReturnType<typeof memoryKv>;
    config?: Record<string, unknown>;
    onNativeCommand?: ((cmd: NativeCommand) => Promise<string>) | null;
    /** Runs as the core starts accepting each message, before it is recorded in `inbound`. */
    beforeAccept?: (msg: InboundMessage) => Promise<void>;
    adapter?: DiscordAdapterOptions;
  } = {},
): Harness {
  const kv = opts.kv ?? memoryKv();
  const inbound: InboundMessage[] = [];
  const commands: NativeCommand[] = [];
  const onNativeCommand =
    opts.onNativeCommand === null
      ? undefined
      : async (cmd: NativeCommand) => {
          commands.push(cmd);
          return opts.onNativeCommand ? opts.onNativeCommand(cmd) : `handled ${cmd.text}`;
        };
  const adapter = createDiscordAdapter(discordConfig(fake, opts.config), {
    kv,
    log: pino({ level: "silent" }),
    onInbound: async (msg) => {
      await opts.beforeAccept?.(msg);
      inbound.push(msg);
    },
    ...(onNativeCommand ? { onNativeCommand } : {}),
  }, opts.adapter);
  cleanups.push(() => adapter.stop());
  return { fake, adapter, kv, inbound, commands };
}

async function started(options: FakeDiscordOptions = {}, adapterOpts: Parameters<typeof makeAdapter>[1] = {}): Promise<Harness> {
  const h = makeAdapter(await startFake(options), adapterOpts);
  await h.adapter.start();
  return h;
}

const target = (to: string, extra: Partial<OutboundTarget> = {}): OutboundTarget => ({ channel: "discord", accountId: "default", to, ...extra });

/** Gateway events reach the client in order, so once `barrier` is delivered everything before it was seen. */
async function deliverBarrier(h: Harness): Promise<void> {
  const barrier = h.fake.injectDM({ content: `barrier ${Math.random()}` });
  await vi.waitFor(() => expect(h.inbound.some((m) => m.messageId === barrier.id)).toBe(true), waitOpts);
}

describe("discord adapter: login and slash command registration", () => {
  it("logs in with the bot token and the required intents, then registers the commands once across restarts", async () => {
    const fake = await startFake();
    const kv = memoryKv();
    const first = makeAdapter(fake, { kv });
    await first.adapter.start();

    expect(first.adapter.health()).toMatchObject({ connected: true, lastError: null });
    expect(fake.callsTo("GET /gateway/bot")[0]?.authorization).toBe(`Bot ${fake.token}`);
    const identify = fake.framesWithOp(2)[0]?.d as { intents: number; compress: boolean; shard: number[] };
    // Guilds | GuildMessages | DirectMessages | MessageContent
    expect(identify.intents).toBe(1 | (1 << 9) | (1 << 12) | (1 << 15));
    expect(identify.compress).toBe(false);

    const puts = fake.callsTo("PUT /applications/:id/commands");
    expect(puts).toHaveLength(1);
    expect(puts[0]?.params.id).toBe(fake.applicationId); // READY's application.id, not the bot user id
    const registered = fake.registeredCommands();
    expect(registered.map((c) => c.name).sort()).toEqual(["new", "send", "sid", "status", "stop"]);
    const send = registered.find((c) => c.name === "send")!;
    expect(send.options).toEqual([
      expect.objectContaining({ name: "mode", type: 3, required: true, choices: ["on", "off", "inherit"].map((m) => ({ name: m, value: m })) }),
    ]);

    await first.adapter.stop();
    const second = makeAdapter(fake, { kv });
    await second.adapter.start();
    expect(second.adapter.health().connected).toBe(true);
    expect(fake.commandPuts).toBe(1);
    expect(fake.framesWithOp(2)).toHaveLength(2);

    // A different kv (fresh install) has no record of the registration and writes again.
    const third = makeAdapter(fake, { kv: memoryKv() });
    await third.adapter.start();
    expect(fake.commandPuts).toBe(2);
  });

  it("concurrent start() calls share one login: one gateway connection, each message delivered once", async () => {
    const h = makeAdapter(await startFake());
    await Promise.all([h.adapter.start(), h.adapter.start()]);
    expect(h.fake.openSockets).toBe(1);
    await deliverBarrier(h);
    expect(h.inbound).toHaveLength(1);
  });

  it("a start() made while another is still logging in resolves only once connected", async () => {
    const h = makeAdapter(await startFake());
    const first = h.adapter.start();
    await h.adapter.start();
    expect(h.adapter.health().connected).toBe(true);
    await first;
  });

  it("a start() that failed leaves nothing behind: the next start() logs in again", async () => {
    const fake = await startFake({ approvedIntents: 0 });
    const h = makeAdapter(fake);
    await expect(h.adapter.start()).rejects.toMatchObject({ name: "PlatformError", code: "forbidden" });
    await expect(h.adapter.start()).rejects.toMatchObject({ name: "PlatformError", code: "forbidden" });
    expect(fake.framesWithOp(2)).toHaveLength(2);
  });

  it("a refused slash command registration does not fail start(): messages still arrive, and lastError says why", async () => {
    const fake = await startFake();
    fake.failNext("PUT /applications/:id/commands", { status: 403, body: { code: 50001, message: "Missing Access" } });
    const h = makeAdapter(fake);
    await h.adapter.start();
    expect(h.adapter.health()).toMatchObject({ connected: true, lastError: expect.stringContaining("slash command registration failed") });
    await deliverBarrier(h);
  });

  it("skips registration when registerCommands is off", async () => {
    const h = await started({}, { config: { registerCommands: false } });
    expect(h.adapter.health().connected).toBe(true);
    expect(h.fake.commandPuts).toBe(0);
  });

  it("a rejected token fails start() with PlatformError auth, and the token never appears in lastError", async () => {
    const fake = await startFake();
    const h = makeAdapter(fake, { config: { token: "wrong-secret-token" } });
    const err = await h.adapter.start().then(() => null, (e: unknown) => e);
    expect(err).toBeInstanceOf(PlatformError);
    expect((err as PlatformError).code).toBe("auth");
    expect(h.adapter.health().connected).toBe(false);
    expect(h.adapter.health().lastError).toMatch(/login failed/);
    expect(h.adapter.health().lastError).not.toContain("wrong-secret-token");
    expect((err as PlatformError).message).not.toContain("wrong-secret-token");
  });

  it("a rejected token says what to do, in lastError and in start()'s error: copy the token again from the Developer Portal", async () => {
    const fake = await startFake();
    const h = makeAdapter(fake, { config: { token: "wrong-secret-token" } });
    const err = await h.adapter.start().then(() => null, (e: unknown) => e);
    const hint = "Discord refused the bot token: copy it from the Developer Portal (your application → Bot → Reset Token) into channels.discord.token, then restart";
    expect((err as PlatformError).message).toBe(`discord: An invalid token was provided. — ${hint}`);
    expect(h.adapter.health().lastError).toBe(`login failed: discord: An invalid token was provided. — ${hint}`);
  });

  it("Discord's API unreachable at start (5xx, network) is retried in the background: start() resolves once logged in, and messages arrive", async () => {
    const fake = await startFake();
    // @discordjs/rest tries a 5xx four times itself, then login() fails: two failed logins in a row.
    fake.failNext("GET /gateway/bot", { status: 503, body: { message: "503: Service Unavailable", code: 0 } }, 8);
    const h = makeAdapter(fake, { adapter: { loginRetryDelayMs: () => 20 } });
    await h.adapter.start();
    const statuses = fake.callsTo("GET /gateway/bot").map((c) => c.status);
    expect(statuses.slice(0, 8)).toEqual(Array(8).fill(503));
    expect(statuses.at(-1)).toBe(200);
    expect(h.adapter.health().connected).toBe(true);
    await deliverBarrier(h);
  });

  it("a gateway close that retrying cannot fix (4011 sharding required) fails start() after one IDENTIFY: identifies count against Discord's daily limit", async () => {
    const fake = await startFake();
    fake.refuseIdentify({ code: 4011, reason: "Sharding required." });
    const h = makeAdapter(fake, { adapter: { loginRetryDelayMs: () => 20 } });
    await expect(h.adapter.start()).rejects.toMatchObject({ name: "PlatformError", retryable: false, message: expect.stringContaining("Sharding is required") });
    expect(fake.framesWithOp(2)).toHaveLength(1);
    expect(h.adapter.health()).toMatchObject({ connected: false, lastError: expect.stringContaining("login failed") });
  });

  it("stop() while a failed login waits to be retried ends start() and logs in no more", async () => {
    const fake = await startFake();
    fake.failNext("GET /gateway/bot", { status: 503, body: { message: "503: Service Unavailable", code: 0 } }, 4);
    // A wait longer than the test's timeout: only stop() can end it.
    const h = makeAdapter(fake, { adapter: { loginRetryDelayMs: () => 60_000 } });
    const starting = h.adapter.start();
    await vi.waitFor(() => expect(h.adapter.health().lastError).toMatch(/login failed: discord: HTTP 503/), waitOpts);
    await h.adapter.stop();
    await expect(starting).rejects.toMatchObject({ name: "PlatformError", code: "transport" });
    expect(fake.callsTo("GET /gateway/bot")).toHaveLength(4);
    expect(fake.openSockets).toBe(0);
    // And a later start() logs in at once.
    await h.adapter.start();
    expect(h.adapter.health().connected).toBe(true);
  });

  it("an app without the approved MessageContent intent fails start() with forbidden (gateway close 4014)", async () => {
    const fake = await startFake({ approvedIntents: 0 });
    const h = makeAdapter(fake);
    await expect(h.adapter.start()).rejects.toMatchObject({ name: "PlatformError", code: "forbidden" });
    expect(h.adapter.health().connected).toBe(false);
  });

  it("Message Content not enabled (4014) says where to enable it, in lastError and in start()'s error", async () => {
    const fake = await startFake({ approvedIntents: 0 });
    const h = makeAdapter(fake);
    const hint = "enable Message Content Intent in the Developer Portal (your application → Bot → Privileged Gateway Intents), then restart";
    await expect(h.adapter.start()).rejects.toMatchObject({ message: `discord: Used disallowed intents — ${hint}` });
    expect(h.adapter.health().lastError).toBe(`login failed: discord: Used disallowed intents — ${hint}`);
  });
});

describe("discord adapter: inbound mapping", () => {
  it("maps a DM to chatType direct with the author's id as peer and the DM channel as reply target", async () => {
    const h = await started();
    const before = Date.now();
    const msg = h.fake.injectDM({ content: "hello there" });
    await vi.waitFor(() => expect(h.inbound).toHaveLength(1), waitOpts);
    const m = h.inbound[0]!;
    expect(m).toEqual({
      channel: "discord",
      accountId: "default",
      chatType: "direct",
      peerId: h.fake.ids.alice,
      to: h.fake.dmChannelId(h.fake.ids.alice),
      senderId: h.fake.ids.alice,
      senderName: "Alice",
      text: "hello there",
      messageId: msg.id,
      wasMentioned: false,
      timestamp: m.timestamp,
    });
    expect(m.timestamp).toBeGreaterThanOrEqual(before - 5);
    expect(h.adapter.health().lastInboundAt).not.toBeNull();
  });

  it("maps a guild channel message to chatType channel with the channel id as peer", async () => {
    const h = await started();
    const msg = h.fake.injectMessage({ channelId: h.fake.ids.general, author: h.fake.ids.bob, content: "hi all" });
    await vi.waitFor(() => expect(h.inbound).toHaveLength(1), waitOpts);
    expect(h.inbound[0]).toEqual({
      channel: "discord",
      accountId: "default",
      chatType: "channel",
      peerId: h.fake.ids.general,
      to: h.fake.ids.general,
      groupName: "#general",
      senderId: h.fake.ids.bob,
      senderName: "bob",
      text: "hi all",
      messageId: msg.id,
      wasMentioned: false,
      timestamp: h.inbound[0]!.timestamp,
    });
  });

  it("a guild channel's and a thread's later messages map as their first did: only DM channels are dropped from discord.js's cache", async () => {
    const h = await started();
    for (const n of [1, 2, 3]) {
      h.fake.injectMessage({ channelId: h.fake.ids.thread, content: `thread ${n}` });
      h.fake.injectMessage({ channelId: h.fake.ids.general, content: `general ${n}` });
    }
    await vi.waitFor(() => expect(h.inbound).toHaveLength(6), waitOpts);
    const thread = h.inbound.filter((m) => m.peerId === h.fake.ids.thread);
    const general = h.inbound.filter((m) => m.peerId === h.fake.ids.general);
    expect(thread.map((m) => [m.chatType, m.parentPeerId, m.groupName])).toEqual(Array(3).fill(["channel", h.fake.ids.general, "#design-thread"]));
    expect(general.map((m) => [m.chatType, m.groupName])).toEqual(Array(3).fill(["channel", general[0].groupName]));
    expect(general[0].groupName).toEqual(expect.any(String));
  });

  it("gives a thread its own peer linked to the parent channel, including threads created after login", async () => {
    const h = await started();
    h.fake.injectMessage({ channelId: h.fake.ids.thread, content: "in the thread" });
    await vi.waitFor(() => expect(h.inbound).toHaveLength(1), waitOpts);
    expect(h.inbound[0]).toMatchObject({
      chatType: "channel",
      peerId: h.fake.ids.thread,
      parentPeerId: h.fake.ids.general,
      to: h.fake.ids.thread,
      groupName: "#design-thread",
      senderId: h.fake.ids.alice,
    });

    const fresh = h.fake.addThread(h.fake.ids.random, "new-thread");
    h.fake.injectMessage({ channelId: fresh, author: h.fake.ids.bob, content: "new thread message" });
    await vi.waitFor(() => expect(h.inbound).toHaveLength(2), waitOpts);
    expect(h.inbound[1]).toMatchObject({ peerId: fresh, parentPeerId: h.fake.ids.random, to: fresh, senderId: h.fake.ids.bob });
  });

  it("ignores its own echoed messages and other bots", async () => {
    const h = await started();
    const receipt = await h.adapter.send(target(h.fake.ids.general), "my own reply");
    await vi.waitFor(() => expect(h.fake.dispatched.some((e) => e.t === "MESSAGE_CREATE" && (e.d as { id: string }).id === receipt.messageId)).toBe(true), waitOpts);
    h.fake.injectMessage({ channelId: h.fake.ids.general, author: h.fake.ids.otherBot, content: `<@${h.fake.ids.bot}> bot chatter` });
    await deliverBarrier(h);
    expect(h.inbound.map((m) => m.text)).toEqual([expect.stringMatching(/^barrier/)]);
  });

  it("does not deliver edits (MESSAGE_UPDATE) as new messages", async () => {
    const h = await started();
    const original = h.fake.injectMessage({ channelId: h.fake.ids.general, content: "first version" });
    await vi.waitFor(() => expect(h.inbound).toHaveLength(1), waitOpts);
    h.fake.dispatch("MESSAGE_UPDATE", {
      ...original,
      content: "/send off",
      edited_timestamp: new Date().toISOString(),
      guild_id: h.fake.ids.guild,
      channel_type: 0,
    });
    await deliverBarrier(h);
    expect(h.inbound.map((m) => m.text)).toEqual(["first version", expect.stringMatching(/^barrier/)]);
  });

  it("detects mentions of the bot and replies to the bot's messages; strips the leading mention", async () => {
    const h = await started();
    const { ids } = h.fake;
    h.fake.injectMessage({ channelId: ids.general, content: `<@${ids.bot}> /send off` });
    h.fake.injectMessage({ channelId: ids.general, content: "nobody asked you" });
    h.fake.injectMessage({ channelId: ids.general, content: `hey <@${ids.bob}> look` });
    await vi.waitFor(() => expect(h.inbound).toHaveLength(3), waitOpts);
    expect(h.inbound.map((m) => [m.text, m.wasMentioned])).toEqual([
      ["/send off", true],
      ["nobody asked you", false],
      [`hey <@${ids.bob}> look`, false],
    ]);

    const { messageId } = await h.adapter.send(target(ids.general), "a bot message");
    const reply = h.fake.injectMessage({ channelId: ids.general, content: "thanks!", replyTo: messageId, replyPing: false });
    // Without a ping the bot is not in `mentions`: only the reply itself makes it a mention.
    expect(reply.mentions).toEqual([]);
    await vi.waitFor(() => expect(h.inbound).toHaveLength(4), waitOpts);
    expect(h.inbound[3]).toMatchObject({ text: "thanks!", wasMentioned: true });
  });

  it("a mention of the bot's managed role (what Discord's @-autocomplete often picks) is a mention, stripped like one; another role or @everyone is not", async () => {
    const h = await started();
    const { ids } = h.fake;
    h.fake.injectMessage({ channelId: ids.general, content: `<@&${ids.botRole}> /send off` });
    h.fake.injectMessage({ channelId: ids.general, content: `what do you think, <@&${ids.botRole}>?` });
    h.fake.injectMessage({ channelId: ids.general, content: `<@&${ids.staffRole}> please look` });
    h.fake.injectMessage({ channelId: ids.general, content: "@everyone meeting now" });
    await vi.waitFor(() => expect(h.inbound).toHaveLength(4), waitOpts);
    expect(h.inbound.map((m) => [m.text, m.wasMentioned])).toEqual([
      ["/send off", true],
      ["what do you think, @switchboard?", true],
      [`<@&${ids.staffRole}> please look`, false],
      ["@everyone meeting now", false],
    ]);
  });

  it("a message the core refused does not block its conversation: the next one is still delivered, and the refusal is in lastError", async () => {
    const h = await started({}, {
      beforeAccept: async (m) => {
        if (m.text === "first") throw new Error("store unavailable");
      },
    });
    h.fake.injectDM({ content: "first" });
    h.fake.injectDM({ content: "second" });
    await vi.waitFor(() => expect(h.inbound.map((m) => m.text)).toEqual(["second"]), waitOpts);
    expect(h.adapter.health().lastError).toMatch(/not accepted: store unavailable$/);
  });

  it("marks forwards as forwarded and takes their text from the snapshot", async () => {
    const h = await started();
    h.fake.injectMessage({ channelId: h.fake.ids.general, content: "/send on", forwarded: true });
    await vi.waitFor(() => expect(h.inbound).toHaveLength(1), waitOpts);
    expect(h.inbound[0]).toMatchObject({ text: "/send on", forwarded: true, wasMentioned: false, peerId: h.fake.ids.general });
  });

  it("a sticker alone, a voice message and a forwarded photo reach the core as placeholders saying what was sent", async () => {
    const h = await started();
    h.fake.injectDM({ content: "", stickers: [{ name: "Wave" }] });
    h.fake.injectDM({ content: "", flags: 1 << 13, attachments: [{ filename: "voice-message.ogg", content_type: "audio/ogg" }] });
    h.fake.injectDM({ content: "", forwarded: true, attachments: [{ filename: "cat.png", content_type: "image/png" }] });
    await vi.waitFor(() => expect(h.inbound).toHaveLength(3), waitOpts);
    expect(h.inbound.map((m) => m.text)).toEqual([
      "[sticker: Wave]",
      expect.stringMatching(/^\[voice message\] https:\/\/cdn\.discordapp\.com\/attachments\/\d+\/\d+\/voice-message\.ogg$/),
      expect.stringMatching(/^\[photo: cat\.png\] https:\/\/cdn\.discordapp\.com\/.+\/cat\.png$/),
    ]);
    expect(h.inbound[2].forwarded).toBe(true);
  });
});

describe("discord adapter: send", () => {
  it("posts the text to the target channel without pinging anyone and returns Discord's message id", async () => {
    const h = await started();
    const receipt = await h.adapter.send(target(h.fake.ids.general), "hello @everyone");
    const posted = h.fake.sent(h.fake.ids.general);
    expect(posted).toHaveLength(1);
    expect(receipt.messageId).toBe(posted[0]!.id);
    expect(posted[0]!.content).toBe("hello @everyone");
    expect(h.fake.callsTo(MESSAGES)[0]!.body).toMatchObject({ content: "hello @everyone", allowed_mentions: { parse: [] } });

    await h.adapter.send(target(h.fake.ids.general, { replyToMessageId: receipt.messageId }), "a reply");
    expect(h.fake.callsTo(MESSAGES)[1]!.body).toMatchObject({ message_reference: { message_id: receipt.messageId } });
    expect(h.fake.sent(h.fake.ids.general)[1]!.referenced_message?.id).toBe(receipt.messageId);

    await h.adapter.typing!(target(h.fake.ids.thread));
    expect(h.fake.callsTo("POST /channels/:id/typing").map((c) => c.params.id)).toEqual([h.fake.ids.thread]);
  });

  it("a target threadId sends into the thread's channel, not the parent channel in `to`", async () => {
    const h = await started();
    await h.adapter.send(target(h.fake.ids.general, { threadId: h.fake.ids.thread }), "in the thread");
    expect(h.fake.callsTo(MESSAGES).map((c) => c.params.id)).toEqual([h.fake.ids.thread]);
    expect(h.fake.sent(h.fake.ids.thread).map((m) => m.content)).toEqual(["in the thread"]);
    expect(h.fake.sent(h.fake.ids.general)).toHaveLength(0);
    // A thread is its own channel for Discord's per-channel limit, not a share of its parent's.
    expect(h.adapter.rateLimitsFor!(target(h.fake.ids.general, { threadId: h.fake.ids.thread }))[0]).toEqual({ key: `chat:${h.fake.ids.thread}`, count: 5, intervalMs: 5000 });
  });

  it("channels.discord.rateLimit tightens the pacing beside Discord's own limits (the schema accepts it, so it must act)", async () => {
    const fake = await startFake();
    const { adapter } = makeAdapter(fake, { config: { rateLimit: { perChatPerSecond: 0.5, perChatPerMinute: 10, globalPerSecond: 5 } } });
    const limits = adapter.rateLimitsFor!(target(fake.ids.general, { threadId: fake.ids.thread }));
    const chat = `chat:${fake.ids.thread}`;
    expect(limits).toEqual(
      expect.arrayContaining([
        { key: chat, count: 5, intervalMs: 5000 },
        { key: "global", count: 50, intervalMs: 1000 },
        { key: `${chat}:second`, count: 1, intervalMs: 2000 },
        { key: `${chat}:minute`, count: 10, intervalMs: 60_000 },
        { key: "global:configured", count: 5, intervalMs: 1000 },
      ]),
    );
    expect(limits).toHaveLength(5);
    // Without the option, Discord's own limits alone.
    const plain = makeAdapter(fake).adapter.rateLimitsFor!(target(fake.ids.general));
    expect(plain).toEqual([{ key: `chat:${fake.ids.general}`, count: 5, intervalMs: 5000 }, { key: "global", count: 50, intervalMs: 1000 }]);
  });

  it("typing for a thread target shows in the thread, not in the parent channel in `to`", async () => {
    const h = await started();
    await h.adapter.typing!(target(h.fake.ids.general, { threadId: h.fake.ids.thread }));
    expect(h.fake.callsTo("POST /channels/:id/typing").map((c) => c.params.id)).toEqual([h.fake.ids.thread]);
  });

  it("a send repeated with the same idempotency key (its first outcome unknown) posts one message; another key posts anew", async () => {
    const h = await started();
    const first = await h.adapter.send(target(h.fake.ids.general), "once", { idempotencyKey: "reply:k#0" });
    const again = await h.adapter.send(target(h.fake.ids.general), "once", { idempotencyKey: "reply:k#0" });
    const next = await h.adapter.send(target(h.fake.ids.general), "twice", { idempotencyKey: "reply:k#1" });
    expect(again.messageId).toBe(first.messageId);
    expect(next.messageId).not.toBe(first.messageId);
    expect(h.fake.sent(h.fake.ids.general).map((m) => m.content)).toEqual(["once", "twice"]);
  });

  it("a reply to a message deleted meanwhile still posts: message_reference has fail_if_not_exists false", async () => {
    const h = await started();
    const gone = "1000000000000000001"; // never existed in the fake, as if deleted before the reply
    const receipt = await h.adapter.send(target(h.fake.ids.general, { replyToMessageId: gone }), "late answer");
    expect(h.fake.callsTo(MESSAGES)[0]!.body).toMatchObject({ message_reference: { message_id: gone, fail_if_not_exists: false } });
    expect(h.fake.sent(h.fake.ids.general).map((m) => [m.id, m.content])).toEqual([[receipt.messageId, "late answer"]]);
  });

  it("maps refusals to PlatformError codes: 403 forbidden, unknown channel not_found, bad body invalid", async () => {
    const h = await started();
    h.fake.failNext(MESSAGES, { status: 403, body: { message: "Missing Access", code: 50001 } });
    const forbidden = await h.adapter.send(target(h.fake.ids.general), "nope").catch((e: unknown) => e);
    expect(forbidden).toBeInstanceOf(PlatformError);
    expect(forbidden).toMatchObject({ channel: "discord", code: "forbidden", retryable: false });
    expect((forbidden as Error).message).toContain("50001");
    expect((forbidden as Error).message).not.toContain(h.fake.token);

    await expect(h.adapter.send(target("1999999999999999999"), "where")).rejects.toMatchObject({ code: "not_found" });
    await expect(h.adapter.send(target(h.fake.ids.general), "x".repeat(2001))).rejects.toMatchObject({ code: "invalid" });
    h.fake.failNext(MESSAGES, { status: 401, body: { message: "401: Unauthorized", code: 0 } });
    await expect(h.adapter.send(target(h.fake.ids.general), "who")).rejects.toMatchObject({ code: "auth" });
    expect(h.fake.sent()).toHaveLength(0);
  });

  it("a short 429 is waited out inside the send, and the message arrives exactly once", async () => {
    const h = await started();
    h.fake.failNext(MESSAGES, FakeDiscord.rateLimitReply(0.2));
    const t0 = Date.now();
    const receipt = await h.adapter.send(target(h.fake.ids.general), "patient message");
    expect(Date.now() - t0).toBeGreaterThanOrEqual(150);
    expect(h.fake.callsTo(MESSAGES).map((c) => c.status)).toEqual([429, 200]);
    expect(h.fake.sent(h.fake.ids.general).filter((m) => m.content === "patient message").map((m) => m.id)).toEqual([receipt.messageId]);
  });

  it("a long 429 comes back at once as rate_limited with retryAfterMs, for the outbox to schedule", async () => {
    const h = await started();
    h.fake.failNext(MESSAGES, FakeDiscord.rateLimitReply(60));
    // A minute's wait, beyond the test's timeout: the send must hand it back, not sit it out.
    const err = await h.adapter.send(target(h.fake.ids.general), "later").catch((e: unknown) => e);
    expect(err).toMatchObject({ name: "PlatformError", code: "rate_limited", retryable: true });
    expect((err as PlatformError).retryAfterMs).toBeGreaterThanOrEqual(60_000);
    expect(h.fake.sent()).toHaveLength(0);
  });

  it("under enforced per-channel limits a burst is paced by the client and every message lands once, in order", async () => {
    const h = await started({ enforceRateLimits: { perChannel: { count: 5, intervalMs: 300 } } });
    const texts = Array.from({ length: 8 }, (_, i) => `burst ${i}`);
    const receipts = await Promise.all(texts.map((t) => h.adapter.send(target(h.fake.ids.general), t)));
    const posted = h.fake.sent(h.fake.ids.general);
    expect(posted.map((m) => m.content)).toEqual(texts);
    expect(receipts.map((r) => r.messageId)).toEqual(posted.map((m) => m.id));
    // @discordjs/rest read the x-ratelimit-* headers and waited for the window instead of collecting 429s.
    const calls = h.fake.callsTo(MESSAGES);
    expect(h.fake.rateLimitHits).toBe(0);
    expect(calls[5]!.at - calls[0]!.at).toBeGreaterThanOrEqual(250);
    expect(h.adapter.rateLimitsFor!(target(h.fake.ids.general))).toEqual([
      { key: `chat:${h.fake.ids.general}`, count: 5, intervalMs: 5000 },
      { key: "global", count: 50, intervalMs: 1000 },
    ]);
  });

  it("stop() during start() ends the start with a PlatformError and leaves no socket open", async () => {
    const fake = await startFake();
    const h = makeAdapter(fake);
    const starting = h.adapter.start();
    await h.adapter.stop();
    await expect(starting).rejects.toMatchObject({ name: "PlatformError", code: "transport" });
    expect(h.adapter.health().connected).toBe(false);
    // The abandoned login still reaches the gateway; its socket must be closed once it does.
    await vi.waitFor(() => {
      expect(fake.framesWithOp(2)).toHaveLength(1);
      expect(fake.openSockets).toBe(0);
    }, waitOpts);
    // And the adapter can be started again afterwards.
    await h.adapter.start();
    expect(h.adapter.health().connected).toBe(true);
  });

  it("typing never throws, even when Discord refuses it", async () => {
    const h = await started();
    h.fake.failNext("POST /channels/:id/typing", { status: 403, body: { code: 50001, message: "Missing Access" } });
    await expect(h.adapter.typing!(target(h.fake.ids.general))).resolves.toBeUndefined();
    expect(h.fake.callsTo("POST /channels/:id/typing")).toHaveLength(1);
  });

  it("start() right after a stop() that cancelled a start logs in afresh instead of returning the cancelled start", async () => {
    const fake = await startFake();
    const h = makeAdapter(fake);
    const cancelled = h.adapter.start();
    await h.adapter.stop();
    const restarted = h.adapter.start();
    await expect(cancelled).rejects.toMatchObject({ name: "PlatformError", code: "transport" });
    await restarted;
    expect(h.adapter.health().connected).toBe(true);
    await deliverBarrier(h);
    // The cancelled login's socket is closed once it connects; the new one stays.
    await vi.waitFor(() => expect(fake.openSockets).toBe(1), waitOpts);
  });

  it("send before start and after stop fails as a retryable PlatformError", async () => {
    const fake = await startFake();
    const h = makeAdapter(fake);
    await expect(h.adapter.send(target(fake.ids.general), "early")).rejects.toMatchObject({ code: "transport", retryable: true });
    await h.adapter.start();
    await h.adapter.stop();
    expect(h.adapter.health().connected).toBe(false);
    await vi.waitFor(() => expect(fake.openSockets).toBe(0), waitOpts);
    await expect(h.adapter.send(target(fake.ids.general), "late")).rejects.toMatchObject({ code: "transport" });
  });
});

describe("discord adapter: reconnect", () => {
  it("op 7 → RESUME on resume_gateway_url (no re-IDENTIFY); messages after the reconnect still arrive", async () => {
    const h = await started();
    const identify = h.fake.framesWithOp(2);
    expect(identify).toHaveLength(1);

    h.fake.requestReconnect();
    // By the time RESUME is sent the old socket is gone (connected=false); ShardResume sets it back.
    await vi.waitFor(() => expect(h.fake.framesWithOp(6)).toHaveLength(1), waitOpts);
    const resume = h.fake.framesWithOp(6)[0]!.d as { session_id: string; seq: number; token: string };
    expect(resume.session_id).toMatch(/^fake-session-/);
    expect(resume.seq).toBeGreaterThanOrEqual(2); // READY and GUILD_CREATE were seen
    expect(h.fake.connections.map((c) => c.path)).toEqual(["/gateway", "/resume"]);
    expect(h.fake.framesWithOp(2)).toHaveLength(1);
    await vi.waitFor(() => expect(h.adapter.health().connected).toBe(true), waitOpts);

    const msg = h.fake.injectDM({ content: "after the reconnect" });
    await vi.waitFor(() => expect(h.inbound.map((m) => m.messageId)).toEqual([msg.id]), waitOpts);
  });

  it("a message sent while the socket is down is replayed on RESUME", async () => {
    const h = await started();
    h.fake.dropConnections(4000);
    // The old socket is closing, so this dispatch can only reach the client through the resume replay.
    const missed = h.fake.injectDM({ content: "sent during the outage" });
    await vi.waitFor(() => expect(h.inbound.map((m) => m.messageId)).toEqual([missed.id]), waitOpts);
    expect(h.fake.replayedEvents).toBe(1);
    expect(h.fake.framesWithOp(6)).toHaveLength(1);
    expect(h.fake.framesWithOp(2)).toHaveLength(1);
    await vi.waitFor(() => expect(h.adapter.health().connected).toBe(true), waitOpts);
  });
});

describe("discord adapter: gateway outage", () => {
  it("reports disconnected while the gateway cannot be reached, and connected again once the session resumes", async () => {
    const h = await started();
    const release = h.fake.holdConnections();
    // Runs first on a failure, so the adapter and the fake can shut down.
    cleanups.push(async () => release());
    h.fake.dropConnections(4000);
    await vi.waitFor(() => expect(h.fake.heldConnections).toBe(1), waitOpts);
    expect(h.adapter.health().connected).toBe(false);
    release();
    await vi.waitFor(() => expect(h.adapter.health().connected).toBe(true), waitOpts);
    expect(h.fake.framesWithOp(6)).toHaveLength(1);
  });
});

describe("discord adapter: gateway loss", () => {
  it("a gateway close it will not reconnect from (4014) leaves it disconnected, with the close reported and in lastError", async () => {
    const fake = await startFake();
    const warnings: Array<{ msg: string; err?: string }> = [];
    const adapter = createDiscordAdapter(discordConfig(fake), {
      kv: memoryKv(),
      log: pino({ level: "warn" }, { write: (line: string) => void warnings.push(JSON.parse(line)) }),
      onInbound: async () => {},
    });
    cleanups.push(() => adapter.stop());
    await adapter.start();
    expect(adapter.health().connected).toBe(true);
    fake.dropConnections(4014, "Disallowed intent(s).");
    // @discordjs/ws reports the close (ShardDisconnect) and then a ShardError for the same close,
    // so lastError ends on the error's text; the close itself is only visible in the log.
    await vi.waitFor(() => expect(warnings.map((w) => w.msg)).toContain("discord: disconnected"), waitOpts);
    expect(warnings.find((w) => w.msg === "discord: disconnected")?.err).toBe("gateway closed with 4014, not reconnecting");
    expect(adapter.health().connected).toBe(false);
    expect(adapter.health().lastError).toMatch(/disallowed intents|4014/);
    expect(adapter.health().lastError).toMatch(/enable Message Content Intent in the Developer Portal/);
  });
});

describe("discord adapter: stop", () => {
  it("stop() hands the messages Discord already delivered to the core before it returns: Discord does not deliver them again", async () => {
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    const h = makeAdapter(await startFake(), { beforeAccept: async (m) => void (m.text === "first" && (await held)) });
    await h.adapter.start();
    h.fake.injectDM({ content: "first" });
    h.fake.injectDM({ content: "second" });
    // Another conversation's message, not held: once it is in, "second" waits in alice's lane behind "first".
    const barrier = h.fake.injectDM({ author: h.fake.ids.bob, content: "barrier" });
    await vi.waitFor(() => expect(h.inbound.map((m) => m.messageId)).toEqual([barrier.id]), waitOpts);
    let stopped = false;
    const stopping = h.adapter.stop().then(() => (stopped = true));
    // The client is gone (its gateway socket closed), yet stop() waits for the queue.
    await vi.waitFor(() => expect(h.fake.openSockets).toBe(0), waitOpts);
    await new Promise((r) => setTimeout(r, 20));
    expect(stopped).toBe(false);
    release();
    await stopping;
    expect(h.inbound.map((m) => m.text)).toEqual(["barrier", "first", "second"]);
  });
});

describe("discord adapter: stop with a queue", () => {
  it("stop() waits for every message queued in a conversation, not only the one being handed over", async () => {
    const gates = new Map<string, () => void>();
    const held = new Set(["first", "second"]);
    const h = makeAdapter(await startFake(), {
      beforeAccept: (m) => (held.has(m.text) ? new Promise<void>((resolve) => gates.set(m.text, resolve)) : Promise.resolve()),
    });
    await h.adapter.start();
    for (const content of ["first", "second", "third"]) h.fake.injectDM({ content });
    // Once another conversation's message is in, all three wait in alice's lane.
    const barrier = h.fake.injectDM({ author: h.fake.ids.bob, content: "barrier" });
    await vi.waitFor(() => expect(h.inbound.map((m) => m.messageId)).toEqual([barrier.id]), waitOpts);
    gates.get("first")!();
    await vi.waitFor(() => expect(gates.has("second")).toBe(true), waitOpts);
    let stopped = false;
    const stopping = h.adapter.stop().then(() => (stopped = true));
    await new Promise((r) => setTimeout(r, 20));
    expect(stopped).toBe(false);
    gates.get("second")!();
    await stopping;
    expect(h.inbound.map((m) => m.text)).toEqual(["barrier", "first", "second", "third"]);
  });

  it("stop() is prompt even while the core never accepts a queued message", async () => {
    let called = false;
    const h = makeAdapter(await startFake(), { beforeAccept: () => ((called = true), new Promise<void>(() => {})) });
    await h.adapter.start();
    h.fake.injectDM({ content: "hangs" });
    await vi.waitFor(() => expect(called).toBe(true), waitOpts);
    // The handler never settles: stop() returns once its grace is over, or the test times out.
    await h.adapter.stop();
    expect(h.adapter.health().connected).toBe(false);
  });
});

describe("discord adapter: a store that cannot write (Discord never delivers a message again)", () => {
  const diskFull = () => Object.assign(new Error("database or disk is full"), { code: "SQLITE_FULL" });

  it("a hand-over still retrying an I/O failure when the adapter stops gives up: the core is not handed the message after stop(), and lastError says it was not accepted", async () => {
    let calls = 0;
    const h = await started({}, {
      beforeAccept: async () => {
        calls++;
        throw diskFull();
      },
    });
    h.fake.injectDM({ content: "while the disk is full" });
    await vi.waitFor(() => expect(h.adapter.health().lastError).toMatch(/not accepted, retrying: database or disk is full$/), waitOpts);
    await h.adapter.stop();
    const handed = calls;
    await vi.waitFor(() => expect(h.adapter.health().lastError).toMatch(/not accepted: database or disk is full$/), waitOpts);
    expect(calls).toBe(handed);
  });

  it("after stop() and start() again, an I/O failure to hand a message over is retried as before", async () => {
    let failNext = false;
    const h = await started({}, {
      beforeAccept: async () => {
        if (failNext) {
          failNext = false;
          throw diskFull();
        }
      },
    });
    await h.adapter.stop();
    await h.adapter.start();
    failNext = true;
    h.fake.injectDM({ content: "after the restart" });
    await vi.waitFor(() => expect(h.inbound.map((m) => m.text)).toEqual(["after the restart"]), waitOpts);
    expect(h.adapter.health().lastError).toMatch(/not accepted, retrying: database or disk is full$/);
  });
});

describe("discord adapter: native slash commands", () => {
  it("/send mode:off in a guild channel reaches onNativeCommand as '/send off' and is answered ephemerally", async () => {
    const h = await started({}, { onNativeCommand: async () => "⚙️ Send policy set to off." });
    const ix = h.fake.injectSlashCommand({ userId: h.fake.ids.alice, channelId: h.fake.ids.general, name: "send", options: { mode: "off" } });
    await vi.waitFor(() => expect(h.fake.visibleReply(ix)).toEqual({ content: "⚙️ Send policy set to off.", ephemeral: true }), waitOpts);
    expect(h.commands).toEqual([
      {
        text: "/send off",
        origin: {
          channel: "discord",
          accountId: "default",
          chatType: "channel",
          peerId: h.fake.ids.general,
          to: h.fake.ids.general,
          groupName: "#general",
          senderId: h.fake.ids.alice,
          senderName: "Alice",
          messageId: ix.id,
          timestamp: expect.any(Number),
        },
      },
    ]);
    // Acknowledged inside Discord's 3 s window; nothing was posted to the channel itself.
    expect(ix.callbacks[0]!.at - ix.createdAt).toBeLessThan(3000);
    expect(h.fake.sent()).toHaveLength(0);
    expect(h.inbound).toHaveLength(0);
  });

  it("slash commands in a DM and in a thread carry the same origin a message there would", async () => {
    const h = await started();
    const dm = h.fake.injectSlashCommand({ userId: h.fake.ids.bob, name: "status" });
    const inThread = h.fake.injectSlashCommand({ userId: h.fake.ids.alice, channelId: h.fake.ids.thread, name: "sid" });
    await vi.waitFor(() => expect(h.commands).toHaveLength(2), waitOpts);
    const byId = new Map(h.commands.map((c) => [c.origin.messageId, c]));
    expect(byId.get(dm.id)).toMatchObject({ text: "/status", origin: { chatType: "direct", peerId: h.fake.ids.bob, to: h.fake.dmChannelId(h.fake.ids.bob), senderId: h.fake.ids.bob } });
    expect(byId.get(inThread.id)).toMatchObject({ text: "/sid", origin: { chatType: "channel", peerId: h.fake.ids.thread, parentPeerId: h.fake.ids.general, senderId: h.fake.ids.alice } });
    await vi.waitFor(() => expect(h.fake.visibleReply(dm)).toEqual({ content: "handled /status", ephemeral: true }), waitOpts);
  });

  it("defers first, so a slow core still answers after Discord's initial response window", async () => {
    const deadlineMs = 200;
    const h = await started({ interactionDeadlineMs: deadlineMs }, { onNativeCommand: () => new Promise((r) => setTimeout(() => r("slow but fine"), deadlineMs * 2)) });
    const ix = h.fake.injectSlashCommand({ userId: h.fake.ids.alice, channelId: h.fake.ids.general, name: "stop" });
    await vi.waitFor(() => expect(h.fake.visibleReply(ix)).toEqual({ content: "slow but fine", ephemeral: true }), waitOpts);
    expect(ix.callbacks.map((c) => c.type)).toEqual([5]);
    expect(ix.callbacks[0]!.at - ix.createdAt).toBeLessThan(deadlineMs);
  });

  it("a slash command this version no longer has, still registered on Discord, is refused ephemerally and never reaches the core", async () => {
    const h = await started();
    // Another deployment (an older version) registered a command set with a /reset we do not serve.
    const res = await fetch(`${h.fake.apiBase}/v10/applications/${h.fake.applicationId}/commands`, {
      method: "PUT",
      headers: { authorization: `Bot ${h.fake.token}`, "content-type": "application/json" },
      body: JSON.stringify([...h.fake.registeredCommands(), { name: "reset", description: "Reset the session", type: 1 }]),
    });
    expect(res.status).toBe(200);
    const ix = h.fake.injectSlashCommand({ userId: h.fake.ids.alice, channelId: h.fake.ids.general, name: "reset" });
    await vi.waitFor(() => expect(h.fake.visibleReply(ix)).toEqual({ content: "This command is not available here.", ephemeral: true }), waitOpts);
    expect(h.commands).toEqual([]);
  });

  it("an answer longer than Discord's 2000 characters is clipped rather than lost, and an empty one reads 'Done.'", async () => {
    const answers = ["x".repeat(2500), "  "];
    const h = await started({}, { onNativeCommand: async () => answers.shift()! });
    const long = h.fake.injectSlashCommand({ userId: h.fake.ids.alice, channelId: h.fake.ids.general, name: "status" });
    await vi.waitFor(() => expect(h.fake.visibleReply(long)?.content).toBe(`${"x".repeat(1999)}…`), waitOpts);
    const empty = h.fake.injectSlashCommand({ userId: h.fake.ids.alice, channelId: h.fake.ids.general, name: "new" });
    await vi.waitFor(() => expect(h.fake.visibleReply(empty)).toEqual({ content: "Done.", ephemeral: true }), waitOpts);
  });

  it("answers 'commands unavailable' when the core has no native command handler, and 'Command failed.' when it throws", async () => {
    const h = await started({}, { onNativeCommand: null });
    const ix = h.fake.injectSlashCommand({ userId: h.fake.ids.alice, channelId: h.fake.ids.general, name: "new" });
    await vi.waitFor(() => expect(h.fake.visibleReply(ix)).toEqual({ content: "commands unavailable", ephemeral: true }), waitOpts);

    const failing = makeAdapter(h.fake, {
      onNativeCommand: async () => {
        throw new Error("boom");
      },
    });
    await h.adapter.stop();
    await failing.adapter.start();
    const ix2 = h.fake.injectSlashCommand({ userId: h.fake.ids.alice, channelId: h.fake.ids.general, name: "new" });
    await vi.waitFor(() => expect(h.fake.visibleReply(ix2)).toEqual({ content: "Command failed.", ephemeral: true }), waitOpts);
  });
});

describe("discord adapter: months of people writing", () => {
  it("discord.js keeps none of their DM channels or messages, and at most CACHED_PEOPLE users and members, however many people write to the bot", async () => {
    // The adapter's client, as discord.js itself holds it.
    const login = vi.spyOn(Client.prototype, "login");
    cleanups.push(async () => login.mockRestore());
    const h = await started();
    const client = login.mock.contexts[0] as Client;
    const people = CACHED_PEOPLE + 500;
    const ids = Array.from({ length: people }, (_, i) => String(1_500_000_000_000_000_000n + BigInt(i)));
    for (const [i, id] of ids.entries()) {
      h.fake.injectDM({ author: { id, username: `user${i}` }, content: `hi ${i}` });
      h.fake.injectMessage({ channelId: h.fake.ids.general, author: id, content: `hello ${i}` });
    }
    await vi.waitFor(() => expect(h.inbound).toHaveLength(2 * people), { timeout: 60_000, interval: 50 });
    // Slash commands in DMs bring their channel along too.
    for (const id of ids.slice(0, 20)) h.fake.injectSlashCommand({ userId: id, name: "status" });
    await vi.waitFor(() => expect(h.commands).toHaveLength(20), waitOpts);

    expect(client.channels.cache.filter((ch) => ch.type === ChannelType.DM).size).toBe(0);
    expect(client.channels.cache.reduce((n, ch) => n + ("messages" in ch ? ch.messages.cache.size : 0), 0)).toBe(0);
    expect(client.users.cache.size).toBeLessThanOrEqual(CACHED_PEOPLE);
    expect(client.users.cache.has(client.user!.id)).toBe(true);
    for (const guild of client.guilds.cache.values()) {
      expect(guild.members.cache.size).toBeLessThanOrEqual(CACHED_PEOPLE);
      expect(guild.members.me).not.toBeNull();
    }
  }, 120_000);
});
