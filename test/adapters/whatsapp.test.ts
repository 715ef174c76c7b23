import { pino } from "pino";
import { afterEach, describe, expect, it } from "vitest";
import { createWhatsAppAdapter, type WhatsAppAdapterOptions } from "../../adapters/whatsapp/index.js";
import { PlatformError, type AdapterContext, type ChannelAdapter, type InboundMessage, type OutboundTarget } from "../../src/channels/types.js";
import { ConfigSchema, type WhatsAppConfig } from "../../src/config/schema.js";
import { FakeWhatsApp, iqError, memoryKv, type FakeWhatsAppOptions } from "../fakes/whatsapp-socket.js";

const SELF_PN = "15550000001:7@s.whatsapp.net";
const SELF_LID = "90000000000001:7@lid";
const ALICE_PN = "15551234567@s.whatsapp.net";
const ALICE_LID = "123456789012345@lid";
const GROUP = "120363021234567890@g.us";

function whatsappConfig(over: Partial<WhatsAppConfig> = {}): WhatsAppConfig {
  const cfg = ConfigSchema.parse({ channels: { whatsapp: { enabled: true } } }).channels.whatsapp!;
  return { ...cfg, ...over };
}

async function waitFor(cond: () => boolean, what: string, timeoutMs = 2_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

/** Lets already-scheduled work run; used only before asserting that something did NOT happen. */
const settle = () => new Promise((r) => setTimeout(r, 25));

const running: ChannelAdapter[] = [];
afterEach(async () => {
  await Promise.all(running.splice(0).map((a) => a.stop()));
});

/** A logger whose lines (warn and above) a test can read. */
function capturingLog(): { log: AdapterContext["log"]; lines: Array<{ level: number; msg: string }> } {
  const lines: Array<{ level: number; msg: string }> = [];
  return { log: pino({ level: "warn" }, { write: (line: string) => void lines.push(JSON.parse(line)) }), lines };
}

function setup(
  opts: {
    fake?: FakeWhatsAppOptions;
    adapter?: WhatsAppAdapterOptions;
    config?: Partial<WhatsAppConfig>;
    onInbound?: AdapterContext["onInbound"];
    log?: AdapterContext["log"];
  } = {},
) {
  const wa = new FakeWhatsApp({ self: { id: SELF_PN, lid: SELF_LID, name: "Switchboard" }, ...opts.fake });
  const inbound: InboundMessage[] = [];
  const sleeps: number[] = [];
  const kv = memoryKv();
  const ctx: AdapterContext = { onInbound: opts.onInbound ?? (async (m) => void inbound.push(m)), kv, log: opts.log ?? pino({ level: "silent" }) };
  const adapter = createWhatsAppAdapter(whatsappConfig(opts.config), ctx, {
    socketFactory: wa.factory,
    sleep: async (ms) => void sleeps.push(ms),
    printQr: () => {},
    ...opts.adapter,
  });
  running.push(adapter);
  return { wa, inbound, sleeps, kv, adapter };
}

async function connected(opts: Parameters<typeof setup>[0] = {}) {
  const s = setup(opts);
  await s.adapter.start();
  await waitFor(() => s.adapter.health().connected, "connected");
  return s;
}

const target = (to: string): OutboundTarget => ({ channel: "whatsapp", accountId: "default", to });

async function sendError(p: Promise<unknown>): Promise<PlatformError> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(PlatformError);
  return err as PlatformError;
}

describe("whatsapp adapter: inbound", () => {
  it("maps a phone-JID DM to a direct chat keyed by E.164", async () => {
    const { wa, inbound, adapter } = await connected();
    const msg = wa.injectText({ chatJid: "15551234567:3@s.whatsapp.net", text: "hello", pushName: "Alice", timestampSec: 1_700_000_000 });
    await waitFor(() => inbound.length === 1, "inbound");
    expect(inbound[0]).toMatchObject({
      channel: "whatsapp",
      accountId: "default",
      chatType: "direct",
      peerId: "+15551234567",
      senderId: "+15551234567",
      senderName: "Alice",
      text: "hello",
      messageId: msg.key.id,
      to: ALICE_PN,
      timestamp: 1_700_000_000_000,
      wasMentioned: false,
    });
    expect(adapter.health().lastInboundAt).toEqual(expect.any(Number));
  });

  it("maps a LID DM carrying remoteJidAlt to the same identity as the phone JID, replying to the LID", async () => {
    const { wa, inbound } = await connected();
    wa.injectText({ chatJid: ALICE_PN, text: "from phone" });
    wa.injectText({ chatJid: "123456789012345:2@lid", remoteJidAlt: ALICE_PN, text: "from lid" });
    await waitFor(() => inbound.length === 2, "two inbound");
    expect(inbound.map((m) => [m.peerId, m.senderId])).toEqual([
      ["+15551234567", "+15551234567"],
      ["+15551234567", "+15551234567"],
    ]);
    expect(inbound[1].to).toBe(ALICE_LID);
  });

  it("resolves LIDs without an Alt JID through learned pairs or Baileys' lidMapping, else keeps the LID", async () => {
    const { wa, inbound } = await connected();
    const bob = "222222222222222@lid";
    const carol = "333333333333333@lid";
    wa.setLidMapping(carol, "15557654321:0@s.whatsapp.net");
    wa.injectText({ chatJid: ALICE_LID, remoteJidAlt: ALICE_PN, text: "teaches the pair" });
    wa.injectText({ chatJid: ALICE_LID, text: "no alt this time" });
    wa.injectText({ chatJid: carol, text: "mapped by signalRepository" });
    wa.injectText({ chatJid: bob, text: "unknown lid" });
    await waitFor(() => inbound.length === 4, "four inbound");
    expect(inbound.map((m) => m.senderId)).toEqual(["+15551234567", "+15551234567", "+15557654321", bob]);
    expect(inbound[3]).toMatchObject({ chatType: "direct", peerId: bob, to: bob });
  });

  it("maps a group message from a LID participant with participantAlt to the group peer and an E.164 sender", async () => {
    const { wa, inbound } = await connected();
    wa.injectText({ chatJid: GROUP, participant: "123456789012345:4@lid", participantAlt: ALICE_PN, text: "hi all" });
    await waitFor(() => inbound.length === 1, "inbound");
    expect(inbound[0]).toMatchObject({ chatType: "group", peerId: GROUP, senderId: "+15551234567", to: GROUP, wasMentioned: false });
  });

  it("detects mentions of our PN or LID and replies to our messages, not mentions of others", async () => {
    const { wa, inbound, adapter } = await connected();
    const ours = await adapter.send(target(GROUP), "I am the bot");
    const from = { chatJid: GROUP, participant: ALICE_PN };
    wa.injectText({ ...from, text: "@bot (lid)", mentionedJids: [SELF_LID] });
    wa.injectText({ ...from, text: "@bot (pn)", mentionedJids: ["15550000001@s.whatsapp.net"] });
    wa.injectText({ ...from, text: "reply to bot", quoted: { id: ours.messageId, participant: "15550000001@s.whatsapp.net" } });
    wa.injectText({ ...from, text: "reply by id only", quoted: { id: ours.messageId } });
    wa.injectText({ ...from, text: "@someone else", mentionedJids: ["15559999999@s.whatsapp.net"] });
    wa.injectText({ ...from, text: "reply to someone else", quoted: { id: "OTHER", participant: "15559999999@s.whatsapp.net" } });
    await waitFor(() => inbound.length === 6, "six inbound");
    expect(inbound.map((m) => [m.text, m.wasMentioned])).toEqual([
      ["@bot (lid)", true],
      ["@bot (pn)", true],
      ["reply to bot", true],
      ["reply by id only", true],
      ["@someone else", false],
      ["reply to someone else", false],
    ]);
  });

  it("ignores own echoes, fromMe messages and status broadcasts, also when they come as append", async () => {
    const { wa, inbound, adapter } = await connected();
    await adapter.send(target(ALICE_PN), "our reply"); // the fake echoes it as append + fromMe
    wa.injectText({ chatJid: ALICE_PN, text: "typed on the linked phone", fromMe: true });
    wa.injectText({ chatJid: ALICE_PN, text: "typed on the phone while we were offline", fromMe: true, type: "append" });
    wa.injectText({ chatJid: "status@broadcast", participant: ALICE_PN, text: "my status" });
    wa.injectText({ chatJid: "status@broadcast", participant: ALICE_PN, text: "my status, replayed", type: "append" });
    wa.injectText({ chatJid: ALICE_PN, text: "marker" });
    await waitFor(() => inbound.length >= 1, "marker");
    await settle();
    expect(inbound.map((m) => m.text)).toEqual(["marker"]);
  });

  it("messages sent while we were offline, which Baileys replays as upsert type append after the reconnect, reach the core", async () => {
    // Baileys 7 (messages-recv: `node.attrs.offline ? 'append' : 'notify'`) tags WhatsApp's replay
    // of what it queued for this device during an outage `append`, and acknowledges it: dropping
    // it loses the message for good. History sync comes on messaging-history.set, never here.
    const { wa, inbound, adapter } = await connected();
    wa.drop(408, "Connection was lost");
    await waitFor(() => wa.factoryCallCount === 2 && adapter.health().connected, "reconnected");
    wa.injectText({ chatJid: ALICE_PN, text: "sent during the outage", type: "append" });
    wa.injectText({ chatJid: GROUP, participant: ALICE_PN, text: "@bot also during the outage", mentionedJids: [SELF_LID], type: "append" });
    wa.injectText({ chatJid: ALICE_PN, text: "live again" });
    await waitFor(() => inbound.length === 3, "three inbound");
    expect(inbound.map((m) => [m.text, m.chatType, m.wasMentioned])).toEqual([
      ["sent during the outage", "direct", false],
      ["@bot also during the outage", "group", true],
      ["live again", "direct", false],
    ]);
  });

  it("goes through Baileys' real event buffer: buffered upserts arrive once flushed", async () => {
    const { wa, inbound } = await connected();
    wa.current.ev.buffer();
    wa.injectText({ chatJid: ALICE_PN, text: "held back" });
    await settle();
    expect(inbound).toHaveLength(0);
    wa.current.ev.flush();
    await waitFor(() => inbound.length === 1, "flushed inbound");
    expect(inbound[0].text).toBe("held back");
  });

  it("learns group subjects in the background and reports them once known", async () => {
    const { wa, inbound } = await connected();
    wa.setGroupSubject(GROUP, "Family");
    wa.injectText({ chatJid: GROUP, participant: ALICE_PN, text: "first" });
    await waitFor(() => inbound.length === 1, "first");
    await settle();
    wa.injectText({ chatJid: GROUP, participant: ALICE_PN, text: "second" });
    await waitFor(() => inbound.length === 2, "second");
    expect(inbound[0].groupName).toBeUndefined();
    expect(inbound[1].groupName).toBe("Family");
  });

  it("asks for a group's subject again after a lookup failed", async () => {
    const { wa, inbound } = await connected();
    wa.injectText({ chatJid: GROUP, participant: ALICE_PN, text: "subject unknown to the server yet" });
    await waitFor(() => inbound.length === 1, "first");
    await settle();
    wa.setGroupSubject(GROUP, "Family");
    wa.injectText({ chatJid: GROUP, participant: ALICE_PN, text: "second" });
    await waitFor(() => inbound.length === 2, "second");
    await settle();
    wa.injectText({ chatJid: GROUP, participant: ALICE_PN, text: "third" });
    await waitFor(() => inbound.length === 3, "third");
    expect(inbound.map((m) => m.groupName)).toEqual([undefined, undefined, "Family"]);
  });

  it("takes a group's subject from groups.update without asking the server", async () => {
    const { wa, inbound } = await connected();
    wa.current.ev.emit("groups.update", [{ id: GROUP, subject: "Renamed" }]);
    wa.injectText({ chatJid: GROUP, participant: ALICE_PN, text: "hi" });
    await waitFor(() => inbound.length === 1, "inbound");
    expect(inbound[0].groupName).toBe("Renamed");
  });

  it("learns LID→phone pairs from Baileys' lid-mapping.update, so a LID sender keeps their E.164 identity", async () => {
    const { wa, inbound } = await connected();
    wa.current.ev.emit("lid-mapping.update", { lid: "123456789012345:2@lid", pn: "15551234567:0@s.whatsapp.net" });
    wa.injectText({ chatJid: ALICE_LID, text: "no alt JID, no signal mapping" });
    await waitFor(() => inbound.length === 1, "inbound");
    expect(inbound[0]).toMatchObject({ senderId: "+15551234567", peerId: "+15551234567", to: ALICE_LID });
  });

  it("media without a caption reaches the core as a placeholder; an album (its own message, then its items) is one message", async () => {
    const { wa, inbound } = await connected();
    wa.injectContent({ chatJid: ALICE_PN }, { audioMessage: { ptt: true, seconds: 4 } });
    const album = wa.injectContent({ chatJid: ALICE_PN }, { albumMessage: { expectedImageCount: 3 } });
    const item = { imageMessage: { mimetype: "image/jpeg" }, messageContextInfo: { messageAssociation: { associationType: 1, parentMessageKey: album.key } } };
    for (let i = 0; i < 3; i++) wa.injectContent({ chatJid: ALICE_PN }, item);
    wa.injectText({ chatJid: ALICE_PN, text: "marker" });
    await waitFor(() => inbound.some((m) => m.text === "marker"), "marker");
    expect(inbound.map((m) => m.text)).toEqual(["[voice message]", "[photo]", "marker"]);
  });

  it("hands messages to the core one at a time, in the order WhatsApp delivered them", async () => {
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    const started: string[] = [];
    const inbound: InboundMessage[] = [];
    const { wa } = await connected({
      onInbound: async (m) => {
        started.push(m.text);
        if (m.text === "first") await held;
        inbound.push(m);
      },
    });
    wa.injectText({ chatJid: ALICE_PN, text: "first" });
    wa.injectText({ chatJid: ALICE_PN, text: "second" });
    await waitFor(() => started.length === 1, "first handed over");
    await settle();
    expect(started).toEqual(["first"]);
    release();
    await waitFor(() => inbound.length === 2, "both");
    expect(inbound.map((m) => m.text)).toEqual(["first", "second"]);
  });

  it("stop() hands the messages WhatsApp already delivered to the core before it returns: WhatsApp does not deliver them again", async () => {
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    const inbound: InboundMessage[] = [];
    const { wa, adapter } = await connected({
      onInbound: async (m) => {
        if (m.text === "first") await held;
        inbound.push(m);
      },
    });
    wa.injectText({ chatJid: ALICE_PN, text: "first" });
    wa.injectText({ chatJid: ALICE_PN, text: "second" });
    let stopped = false;
    const stopping = adapter.stop().then(() => (stopped = true));
    await settle();
    expect(stopped).toBe(false);
    release();
    await stopping;
    expect(inbound.map((m) => m.text)).toEqual(["first", "second"]);
  });

  it("a message the core failed to accept does not stop the messages after it", async () => {
    const inbound: InboundMessage[] = [];
    let calls = 0;
    const { wa } = await connected({
      onInbound: async (m) => {
        if (++calls === 1) throw new Error("store unavailable");
        inbound.push(m);
      },
    });
    wa.injectText({ chatJid: ALICE_PN, text: "hit the failure" });
    wa.injectText({ chatJid: ALICE_PN, text: "next one" });
    await waitFor(() => inbound.length === 1, "the message after the failure");
    expect(inbound[0].text).toBe("next one");
  });
});

describe("whatsapp adapter: a store that cannot write (WhatsApp never delivers a message again)", () => {
  const diskFull = () => Object.assign(new Error("database or disk is full"), { code: "SQLITE_FULL" });

  it("a hand-over still retrying an I/O failure when the adapter stops gives up: the core is not handed the message after stop(), and the loss is logged", async () => {
    const { log, lines } = capturingLog();
    let calls = 0;
    const { wa, adapter } = await connected({ log, onInbound: async () => {
        calls++;
        throw diskFull();
      },
    });
    wa.injectText({ chatJid: ALICE_PN, text: "while the disk is full" });
    await waitFor(() => /^inbound message not accepted, retrying: database or disk is full$/.test(adapter.health().lastError ?? ""), "a retried hand-over");
    await adapter.stop();
    running.splice(running.indexOf(adapter), 1);
    const handed = calls;
    await waitFor(() => lines.some((l) => l.msg === "whatsapp inbound failed"), "the hand-over given up");
    expect(calls).toBe(handed);
  });

  it("after stop() and start() again, an I/O failure to hand a message over is retried as before", async () => {
    const inbound: InboundMessage[] = [];
    let failNext = false;
    const { wa, adapter } = await connected({
      onInbound: async (m) => {
        if (failNext) {
          failNext = false;
          throw diskFull();
        }
        inbound.push(m);
      },
    });
    await adapter.stop();
    await adapter.start();
    await waitFor(() => adapter.health().connected, "connected again");
    failNext = true;
    wa.injectText({ chatJid: ALICE_PN, text: "after the restart" });
    await waitFor(() => inbound.length === 1, "the message, handed over again", 5_000);
    expect(inbound[0].text).toBe("after the restart");
  });
});

describe("whatsapp adapter: outbound", () => {
  it("sends text, returns the WhatsApp message id and quotes the message it replies to", async () => {
    const { wa, inbound, adapter } = await connected();
    const incoming = wa.injectText({ chatJid: ALICE_PN, text: "question" });
    await waitFor(() => inbound.length === 1, "inbound");
    const receipt = await adapter.send({ ...target(inbound[0].to), replyToMessageId: incoming.key.id! }, "answer");
    expect(wa.sent).toHaveLength(1);
    expect(wa.sent[0]).toMatchObject({ jid: ALICE_PN, text: "answer", quotedId: incoming.key.id });
    expect(receipt.messageId).toBe(wa.sent[0].message.key.id);
  });

  it("a send repeated with the same idempotency key keeps its message id, so the recipient is shown one message; another key is a new message", async () => {
    const { wa, adapter } = await connected();
    const first = await adapter.send(target(ALICE_PN), "once", { idempotencyKey: "reply:k#0" });
    const again = await adapter.send(target(ALICE_PN), "once", { idempotencyKey: "reply:k#0" });
    const next = await adapter.send(target(ALICE_PN), "twice", { idempotencyKey: "reply:k#1" });
    expect(again.messageId).toBe(first.messageId);
    expect(next.messageId).not.toBe(first.messageId);
    // Shaped like Baileys' own ids, which WhatsApp's clients accept.
    expect(first.messageId).toMatch(/^3EB0[0-9A-F]{36}$/);
    expect(wa.shownIn(ALICE_PN)).toEqual(["once", "twice"]);
    expect(adapter.idempotentSends).toBe(true);
  });

  it("sends to an E.164 target (how owners are configured) as a phone JID", async () => {
    const { wa, adapter } = await connected();
    await adapter.send(target("+15551234567"), "hi owner");
    expect(wa.sent[0].jid).toBe(ALICE_PN);
    expect((await sendError(adapter.send(target("alice"), "x"))).code).toBe("invalid");
  });

  it.each([
    [429, "rate_limited", true],
    [401, "auth", false],
    [403, "forbidden", false],
    [404, "not_found", false],
    [400, "invalid", false],
    [500, "transport", true],
    [408, "transport", true],
  ] as const)("maps a send failure with status %i to %s", async (status, code, retryable) => {
    const { wa, adapter } = await connected();
    wa.failNextSends(1, status);
    const err = await sendError(adapter.send(target(ALICE_PN), "x"));
    expect(err.code).toBe(code);
    expect(err.retryable).toBe(retryable);
    expect(err.channel).toBe("whatsapp");
    await expect(adapter.send(target(ALICE_PN), "again")).resolves.toMatchObject({ messageId: expect.any(String) });
  });

  it("a send to a group we were removed from fails for good: Baileys' IQ error 403 (a Boom 500 with the code in data) is not a transport error", async () => {
    const { wa, adapter } = await connected();
    wa.leaveGroup(GROUP);
    const err = await sendError(adapter.send(target(GROUP), "to a group we left"));
    expect(err).toMatchObject({ code: "forbidden", retryable: false });
    expect(err.message).toContain("forbidden");
    expect(wa.sent).toHaveLength(0);
  });

  it.each([
    [404, "item-not-found", "not_found", false],
    [400, "bad-request", "invalid", false],
    [401, "not-authorized", "auth", false],
    [429, "rate-overlimit", "rate_limited", true],
    [500, "internal-server-error", "transport", true],
    [503, "service-unavailable", "transport", true],
  ] as const)("maps a send that failed on a query's IQ error %i %s to %s", async (code, text, mapped, retryable) => {
    const fake = new FakeWhatsApp();
    const { adapter } = await connected({
      adapter: {
        socketFactory: async () => {
          const sock = await fake.factory();
          sock.sendMessage = (async () => {
            throw iqError(code, text);
          }) as typeof sock.sendMessage;
          return sock;
        },
      },
    });
    const err = await sendError(adapter.send(target(GROUP), "x"));
    expect(err).toMatchObject({ code: mapped, retryable });
  });

  it("a send WhatsApp answers without a message id fails as retryable instead of counting as delivered", async () => {
    const wa = new FakeWhatsApp();
    const { adapter } = await connected({
      adapter: {
        socketFactory: async () => {
          const sock = await wa.factory();
          sock.sendMessage = async () => undefined;
          return sock;
        },
      },
    });
    const err = await sendError(adapter.send(target(ALICE_PN), "into the void"));
    expect(err.code).toBe("transport");
    expect(err.retryable).toBe(true);
  });

  it("refuses to send while disconnected with a retryable transport error", async () => {
    const { wa, adapter } = setup({ fake: { autoOpen: false } });
    await adapter.start();
    const err = await sendError(adapter.send(target(ALICE_PN), "too early"));
    expect(err.code).toBe("transport");
    expect(err.message).toContain("not connected");
    expect(err.retryable).toBe(true);
    expect(wa.sent).toHaveLength(0);
    await adapter.typing!(target(ALICE_PN));
    expect(wa.presence).toEqual([]);
    wa.current.ev.emit("connection.update", { connection: "connecting" });
    expect(adapter.health().connected).toBe(false);
    expect((await sendError(adapter.send(target(ALICE_PN), "still connecting"))).message).toContain("not connected");
    wa.open();
    await expect(adapter.send(target(ALICE_PN), "now")).resolves.toMatchObject({ messageId: expect.any(String) });
  });

  it("shows typing as a composing presence", async () => {
    const { wa, adapter } = await connected();
    await adapter.typing!(target(ALICE_LID));
    expect(wa.presence).toEqual([{ type: "composing", jid: ALICE_LID }]);
  });

  it("paces sends per chat and globally, honouring configured limits", () => {
    const { adapter } = setup();
    expect(adapter.rateLimitsFor!(target("+15551234567"))).toEqual([
      { key: `chat:${ALICE_PN}`, count: 1, intervalMs: 1_000 },
      { key: "global", count: 20, intervalMs: 1_000 },
    ]);
    const strict = setup({ config: { rateLimit: { perChatPerSecond: 0.5, perChatPerMinute: 10, globalPerSecond: 5 } } }).adapter;
    expect(strict.rateLimitsFor!(target(GROUP))).toEqual([
      { key: `chat:${GROUP}`, count: 1, intervalMs: 2_000 },
      { key: "global", count: 5, intervalMs: 1_000 },
      { key: `chat:${GROUP}:minute`, count: 10, intervalMs: 60_000 },
    ]);
  });
});

describe("whatsapp adapter: connection lifecycle", () => {
  it("hands the linking QR to the printer", async () => {
    const qrs: string[] = [];
    const { wa, adapter } = setup({ fake: { autoOpen: false }, adapter: { printQr: (qr) => void qrs.push(qr) } });
    await adapter.start();
    wa.showQr("2@QRDATA");
    expect(qrs).toEqual(["2@QRDATA"]);
  });

  it("515 restartRequired: reconnects at once through the factory and messages keep flowing", async () => {
    const { wa, inbound, sleeps, adapter } = await connected();
    wa.drop(515, "Stream Errored (restart required)");
    await waitFor(() => wa.factoryCallCount === 2 && adapter.health().connected, "reconnected");
    expect(sleeps).toEqual([]);
    expect(adapter.health().lastError).toContain("515");
    wa.injectText({ chatJid: ALICE_PN, text: "after restart" });
    await waitFor(() => inbound.length === 1, "inbound after restart");
    expect(inbound[0].text).toBe("after restart");
    await expect(adapter.send(target(ALICE_PN), "still here")).resolves.toMatchObject({ messageId: wa.sent[0].message.key.id });
  });

  it("401 loggedOut: stops for good, says so in health, fails sends permanently and forgets the dead login", async () => {
    const { wa, sleeps, kv, adapter } = await connected();
    wa.drop(401, "Connection Failure");
    await waitFor(() => adapter.health().lastError !== null, "lastError");
    await settle();
    expect(wa.factoryCallCount).toBe(1);
    expect(sleeps).toEqual([]);
    expect(adapter.health()).toMatchObject({ connected: false, lastError: expect.stringContaining("logged out") });
    const err = await sendError(adapter.send(target(ALICE_PN), "x"));
    expect(err.code).toBe("auth");
    expect(err.retryable).toBe(false);
    await waitFor(() => kv.data.get("auth:generation") === "1", "auth state reset");
  });

  it("can be started again after a fatal disconnect", async () => {
    const { wa, adapter } = await connected();
    wa.drop(440);
    await waitFor(() => adapter.health().lastError !== null, "halted");
    await adapter.start();
    await waitFor(() => wa.factoryCallCount === 2 && adapter.health().connected, "restarted");
    await expect(adapter.send(target(ALICE_PN), "back")).resolves.toMatchObject({ messageId: expect.any(String) });
  });

  it("440 connectionReplaced: does not fight the other client", async () => {
    const { wa, sleeps, adapter } = await connected();
    wa.drop(440, "Stream Errored (conflict)");
    await waitFor(() => adapter.health().lastError !== null, "lastError");
    await settle();
    expect(wa.factoryCallCount).toBe(1);
    expect(sleeps).toEqual([]);
    expect(adapter.health().lastError).toContain("replaced");
    // Retryable: the outbox keeps the reply until the operator has closed the other client and restarted.
    const err = await sendError(adapter.send(target(ALICE_PN), "x"));
    expect(err).toMatchObject({ code: "transport", retryable: true });
    expect(err.message).toContain("replaced");
  });

  it("408 and friends: reconnects with growing backoff, reset after a healthy connection", async () => {
    let clock = 1_000_000;
    const { wa, sleeps, adapter } = await connected({ adapter: { now: () => clock, random: () => 0 } });
    wa.drop(408, "Connection was lost");
    await waitFor(() => wa.factoryCallCount === 2 && adapter.health().connected, "reconnect 1");
    expect(adapter.health().lastError).toContain("408");
    wa.drop(428, "Connection Terminated");
    await waitFor(() => wa.factoryCallCount === 3 && adapter.health().connected, "reconnect 2");
    expect(sleeps).toEqual([2_000, 3_600]);
    clock += 61_000; // this connection counts as healthy
    wa.drop(503);
    await waitFor(() => wa.factoryCallCount === 4 && adapter.health().connected, "reconnect 3");
    expect(sleeps).toEqual([2_000, 3_600, 2_000]);
  });

  it("keeps retrying with backoff when the factory itself fails during a reconnect", async () => {
    const { wa, sleeps, adapter } = await connected({ adapter: { random: () => 0 } });
    wa.failNextFactoryCalls(2);
    wa.drop(500);
    await waitFor(() => adapter.health().connected && wa.sockets.length === 2, "reconnected");
    expect(wa.factoryCallCount).toBe(4);
    expect(sleeps).toEqual([2_000, 3_600, 6_480]);
    expect(adapter.health().lastError).toBe("reconnect failed: fake factory failure");
  });

  it("after a healthy connection, sockets that close before opening back off ever longer instead of every 2 s", async () => {
    let clock = 1_000_000;
    const { wa, sleeps, adapter } = setup({ fake: { autoOpen: false }, adapter: { now: () => clock, random: () => 0 } });
    await adapter.start();
    wa.open();
    await waitFor(() => adapter.health().connected, "connected");
    clock += 61_000;
    for (let n = 2; n <= 4; n++) {
      wa.drop(408);
      await waitFor(() => wa.factoryCallCount === n, `dial ${n - 1}`);
    }
    expect(sleeps).toEqual([2_000, 3_600, 6_480]);
  });

  it("start() after stop() begins the reconnect schedule afresh: immediate restarts and backoff", async () => {
    const { wa, sleeps, adapter } = await connected({ adapter: { random: () => 0 } });
    for (let n = 2; n <= 5; n++) {
      wa.drop(515);
      await waitFor(() => wa.factoryCallCount === n && adapter.health().connected, `restart ${n - 1}`);
    }
    wa.drop(408);
    await waitFor(() => wa.factoryCallCount === 6 && adapter.health().connected, "reconnect");
    expect(sleeps).toEqual([2_000, 3_600]);
    await adapter.stop();
    await adapter.start();
    await waitFor(() => adapter.health().connected, "started again");
    wa.drop(515);
    await waitFor(() => wa.factoryCallCount === 8 && adapter.health().connected, "immediate restart");
    wa.drop(408);
    await waitFor(() => wa.factoryCallCount === 9 && adapter.health().connected, "reconnect after the restart");
    expect(sleeps).toEqual([2_000, 3_600, 2_000]);
  });

  it("a replaced socket whose close arrives late does not tear down the socket that replaced it", async () => {
    const wa = new FakeWhatsApp();
    const lateCloses: Array<() => void> = [];
    const { adapter } = await connected({
      adapter: {
        socketFactory: async () => {
          const sock = await wa.factory();
          const end = sock.end.bind(sock);
          // Baileys' end() waits for the websocket: its close event can come after stop() returned.
          sock.end = async (err) => void lateCloses.push(() => void end(err));
          return sock;
        },
      },
    });
    await adapter.stop();
    await adapter.start();
    await waitFor(() => adapter.health().connected, "started again");
    expect(lateCloses).toHaveLength(1);
    lateCloses[0]();
    await settle();
    expect(adapter.health().connected).toBe(true);
    expect(wa.factoryCallCount).toBe(2);
    await expect(adapter.send(target(ALICE_PN), "still up")).resolves.toMatchObject({ messageId: expect.any(String) });
  });

  it("a QR code that cannot be rendered is logged, and the adapter keeps waiting for the scan", async () => {
    const { log, lines } = capturingLog();
    const { wa, adapter } = setup({ fake: { autoOpen: false }, log, adapter: { printQr: async () => Promise.reject(new Error("no terminal")) } });
    await adapter.start();
    wa.showQr("2@QRDATA");
    await waitFor(() => lines.some((l) => l.msg === "whatsapp: could not render the QR code"), "the render failure logged");
    wa.open();
    await waitFor(() => adapter.health().connected, "connected after the scan");
  });

  it("stop() is prompt even while the core never accepts a delivered message, and says the message was not handed over", async () => {
    const { log, lines } = capturingLog();
    let called = false;
    const { wa, adapter } = await connected({ log, onInbound: () => ((called = true), new Promise<void>(() => {})) });
    wa.injectText({ chatJid: ALICE_PN, text: "hangs" });
    await waitFor(() => called, "handed to the core");
    // The handler never settles: stop() returns once its grace is over, or the test times out.
    await adapter.stop();
    running.splice(running.indexOf(adapter), 1); // a second stop() would wait out the grace again
    expect(adapter.health().connected).toBe(false);
    expect(lines.map((l) => l.msg)).toContain("whatsapp stopped with inbound messages not yet handed to the core: WhatsApp will not deliver them again");
  });

  it("stop() cancels a pending reconnect promptly and ends the socket", async () => {
    const never = () => new Promise<void>(() => {});
    const { wa, adapter } = await connected({ adapter: { sleep: never } });
    const first = wa.current;
    wa.drop(408);
    await waitFor(() => !adapter.health().connected, "disconnected");
    // The reconnect's sleep never ends: stop() returns only if it cancels the reconnect.
    await adapter.stop();
    await settle();
    expect(wa.factoryCallCount).toBe(1);
    expect(first.ended).toBe(true);
  });

  it("stop() then start() during a pending reconnect dials exactly once", async () => {
    const never = () => new Promise<void>(() => {});
    const { wa, adapter } = await connected({ adapter: { sleep: never } });
    wa.drop(408);
    await waitFor(() => !adapter.health().connected, "disconnected");
    await adapter.stop();
    await adapter.start();
    await waitFor(() => adapter.health().connected, "connected again");
    await settle();
    expect(wa.factoryCallCount).toBe(2);
    expect(wa.sockets.filter((s) => !s.ended)).toHaveLength(1);
  });

  it("stop() on a live connection ends the socket without scheduling a reconnect", async () => {
    const { wa, sleeps, adapter } = await connected();
    await adapter.stop();
    await settle();
    expect(wa.current.ended).toBe(true);
    expect(wa.factoryCallCount).toBe(1);
    expect(sleeps).toEqual([]);
    expect(adapter.health().connected).toBe(false);
  });

  it("repeated 515s: three immediate restarts, then backoff, so a server that never settles is not hammered", async () => {
    const { wa, sleeps, adapter } = await connected({ adapter: { random: () => 0 } });
    for (let n = 2; n <= 5; n++) {
      wa.drop(515, "Stream Errored (restart required)");
      await waitFor(() => wa.factoryCallCount === n && adapter.health().connected, `restart ${n - 1}`);
      expect(sleeps).toEqual(n <= 4 ? [] : [2_000]);
    }
  });

  it.each([
    [403, "forbidden"],
    [411, "auth"],
  ] as const)("%i: stops for good and fails sends permanently, so the outbox does not retry into a refused session", async (status, code) => {
    const { wa, sleeps, adapter } = await connected();
    wa.drop(status);
    await waitFor(() => adapter.health().lastError !== null, "halted");
    await settle();
    expect(wa.factoryCallCount).toBe(1);
    expect(sleeps).toEqual([]);
    const err = await sendError(adapter.send(target(ALICE_PN), "x"));
    expect(err.code).toBe(code);
    expect(err.retryable).toBe(false);
  });

  it("start() on a running adapter opens no second socket, so no message is delivered twice", async () => {
    const { wa, inbound, adapter } = await connected();
    await adapter.start();
    await settle();
    expect(wa.factoryCallCount).toBe(1);
    wa.injectText({ chatJid: ALICE_PN, text: "once" });
    await waitFor(() => inbound.length === 1, "inbound");
    await settle();
    expect(inbound.map((m) => m.text)).toEqual(["once"]);
  });

  it("a start() that failed can be retried", async () => {
    const { wa, adapter } = setup();
    wa.failNextFactoryCalls(1);
    await expect(adapter.start()).rejects.toThrow("fake factory failure");
    expect(adapter.health().lastError).toContain("start failed");
    await adapter.start();
    await waitFor(() => adapter.health().connected, "connected on the second start");
    expect(wa.factoryCallCount).toBe(2);
  });

  it("stop() then start() during a pending reconnect: a later drop still reconnects", async () => {
    const never = new Promise<void>(() => {});
    const sleeps: number[] = [];
    // The first backoff never ends by itself; later ones end at once.
    const { wa, adapter } = await connected({ adapter: { sleep: (ms) => (sleeps.push(ms), sleeps.length === 1 ? never : Promise.resolve()) } });
    wa.drop(408);
    await waitFor(() => sleeps.length === 1, "first reconnect pending");
    await adapter.stop();
    await adapter.start();
    await waitFor(() => adapter.health().connected, "started again");
    wa.drop(408);
    await waitFor(() => wa.factoryCallCount === 3 && adapter.health().connected, "reconnected after the second drop");
  });

  it("a socket the factory delivers after stop() is ended, never adopted", async () => {
    const { wa, adapter } = await connected();
    const release = wa.holdNextFactoryCall();
    wa.drop(408);
    await waitFor(() => wa.factoryCallCount === 2, "reconnect dialling");
    await adapter.stop();
    release();
    await waitFor(() => wa.sockets.length === 2, "late socket");
    await settle();
    expect(wa.current.ended).toBe(true);
    expect(adapter.health().connected).toBe(false);
  });

  it("stop() then start() while a reconnect is still dialling leaves exactly one live socket", async () => {
    const { wa, adapter } = await connected();
    const release = wa.holdNextFactoryCall();
    wa.drop(408);
    await waitFor(() => wa.factoryCallCount === 2, "reconnect dialling");
    await adapter.stop();
    await adapter.start();
    await waitFor(() => adapter.health().connected, "started again");
    const live = wa.current;
    release();
    await waitFor(() => wa.sockets.length === 3, "the stale reconnect's socket");
    await settle();
    // Two live sockets on one login: WhatsApp closes one with 440, which halts the adapter for good.
    const alive = wa.sockets.filter((s) => !s.ended);
    expect(alive).toHaveLength(1);
    expect(alive[0]).toBe(live);
    expect(adapter.health().connected).toBe(true);
  });
});
