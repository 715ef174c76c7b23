import type { WAMessage, proto } from "@whiskeysockets/baileys";
import { describe, expect, it } from "vitest";
import { extractContent, mapInbound, type MapContext } from "../../adapters/whatsapp/map-message.js";
import { AlbumGate } from "../../src/channels/album-gate.js";
import { InboundMessageSchema } from "../../src/inbound/router.js";

describe("extractContent", () => {
  it.each<[string, proto.IMessage | undefined, string | undefined, boolean]>([
    ["conversation", { conversation: "hello" }, "hello", false],
    ["extended text", { extendedTextMessage: { text: "see https://x.y" } }, "see https://x.y", false],
    ["image caption", { imageMessage: { caption: "look" } }, "look", false],
    ["video caption", { videoMessage: { caption: "watch" } }, "watch", false],
    ["captioned document", { documentWithCaptionMessage: { message: { documentMessage: { caption: "doc" } } } }, "doc", false],
    ["disappearing message", { ephemeralMessage: { message: { conversation: "poof" } } }, "poof", false],
    ["view-once image", { viewOnceMessageV2: { message: { imageMessage: { caption: "once" } } } }, "once", false],
    ["captioned document in a disappearing chat", { ephemeralMessage: { message: { documentWithCaptionMessage: { message: { documentMessage: { caption: "doc" } } } } } }, "doc", false],
    ["edit", { protocolMessage: { type: 14, editedMessage: { conversation: "fixed" } } }, "fixed", true],
    ["edit inside its editedMessage wrapper", { editedMessage: { message: { protocolMessage: { type: 14, editedMessage: { conversation: "fixed" } } } } }, "fixed", true],
    ["edit of a captioned document", { protocolMessage: { type: 14, editedMessage: { documentWithCaptionMessage: { message: { documentMessage: { caption: "doc v2" } } } } } }, "doc v2", true],
    ["reaction", { reactionMessage: { text: "👍" } }, undefined, false],
    ["revoke", { protocolMessage: { type: 0 } }, undefined, false],
    ["blank text", { conversation: "   " }, undefined, false],
    ["no message", undefined, undefined, false],
  ])("%s", (_name, message, text, edited) => {
    const content = extractContent(message);
    expect(content?.text).toBe(text);
    if (text !== undefined) expect(content?.edited).toBe(edited);
  });
});

describe("mapInbound: media", () => {
  const ctx = (): MapContext => ({ accountId: "default", self: { pn: "15550000001:7@s.whatsapp.net" }, isOwnMessageId: () => false, lookupPn: async () => undefined, albums: new AlbumGate() });
  const dm = (message: proto.IMessage, id = "M1"): WAMessage => ({ key: { remoteJid: "15551234567@s.whatsapp.net", id, fromMe: false }, message, messageTimestamp: 1_700_000_000 });

  it.each<[string, proto.IMessage, string]>([
    ["a photo without a caption", { imageMessage: {} }, "[photo]"],
    ["a voice message", { audioMessage: { ptt: true } }, "[voice message]"],
    ["an audio file", { audioMessage: {} }, "[audio]"],
    ["a document by its file name", { documentMessage: { fileName: "report.pdf" } }, "[document: report.pdf]"],
    ["a document named like a command, no command", { documentMessage: { fileName: "/send off" } }, "[document: /send off]"],
    ["a sticker", { stickerMessage: {} }, "[sticker]"],
    ["a video", { videoMessage: {} }, "[video]"],
    ["a GIF (a video played as one)", { videoMessage: { gifPlayback: true } }, "[GIF]"],
    ["a round video message", { ptvMessage: {} }, "[video message]"],
    ["a place by its name", { locationMessage: { degreesLatitude: 1, degreesLongitude: 2, name: "Café Nord" } }, "[location: Café Nord]"],
    ["a live location", { liveLocationMessage: { degreesLatitude: 1, degreesLongitude: 2 } }, "[live location]"],
    ["a contact", { contactMessage: { displayName: "Ada Lovelace" } }, "[contact: Ada Lovelace]"],
    ["a poll by its question", { pollCreationMessageV3: { name: "Lunch?" } }, "[poll: Lunch?]"],
    ["a view-once photo in a disappearing chat", { ephemeralMessage: { message: { viewOnceMessageV2: { message: { imageMessage: {} } } } } }, "[photo]"],
    ["a captioned photo: the caption, then the placeholder", { imageMessage: { caption: "look" } }, "look\n[photo]"],
    ["a captioned document", { documentWithCaptionMessage: { message: { documentMessage: { caption: "the plan", fileName: "plan.pdf" } } } }, "the plan\n[document: plan.pdf]"],
    ["a captioned command stays on the first line, where commands are read", { imageMessage: { caption: "/status" } }, "/status\n[photo]"],
  ])("%s", async (_name, message, text) => {
    expect((await mapInbound(dm(message), ctx()))?.text).toBe(text);
  });

  it.each<[string, proto.IMessage]>([
    ["a reaction", { reactionMessage: { text: "👍" } }],
    ["a deletion (revoke)", { protocolMessage: { type: 0 } }],
    ["an album's own message (it only says how many items follow)", { albumMessage: { expectedImageCount: 3 } }],
  ])("%s is no message", async (_name, message) => {
    expect(await mapInbound(dm(message), ctx())).toBeNull();
  });

  it("a sticker replying to our message in a group is a mention, as a text reply is; an unaddressed photo is not", async () => {
    const group = (message: proto.IMessage): WAMessage => ({ ...dm(message), key: { remoteJid: "120363000000000001@g.us", id: "G1", fromMe: false, participant: "15551234567@s.whatsapp.net" } });
    expect(await mapInbound(group({ stickerMessage: { contextInfo: { stanzaId: "X", participant: "15550000001@s.whatsapp.net" } } }), ctx())).toMatchObject({ text: "[sticker]", wasMentioned: true });
    expect(await mapInbound(group({ imageMessage: {} }), ctx())).toMatchObject({ text: "[photo]", wasMentioned: false });
  });

  it("an album is one message: its first item and its captioned ones, however WhatsApp wraps them; another album is its own", async () => {
    const item = (album: string, extra: proto.Message.IImageMessage = {}): proto.IMessage => ({
      imageMessage: extra,
      messageContextInfo: { messageAssociation: { associationType: 1, parentMessageKey: { remoteJid: "15551234567@s.whatsapp.net", id: album } } },
    });
    const c = ctx();
    const texts: Array<string | null> = [];
    for (const [id, message] of [
      ["I1", { associatedChildMessage: { message: item("ALBUM1") } }],
      ["I2", item("ALBUM1")],
      ["I3", item("ALBUM1", { caption: "and this one" })],
      ["I4", { ephemeralMessage: { message: item("ALBUM1") } }],
      ["I5", item("ALBUM2")],
    ] as const) {
      texts.push((await mapInbound(dm(message, id), c))?.text ?? null);
    }
    expect(texts).toEqual(["[photo]", null, "and this one\n[photo]", null, "[photo]"]);
  });
});

describe("mapInbound edge cases", () => {
  const ctx: MapContext = {
    accountId: "default",
    self: { pn: "15550000001:7@s.whatsapp.net", lid: "90000000000001:7@lid" },
    isOwnMessageId: (id) => id === "OURS",
    lookupPn: async () => undefined,
    albums: new AlbumGate(),
  };
  const dm = (over: Partial<WAMessage> = {}): WAMessage => ({
    key: { remoteJid: "15551234567@s.whatsapp.net", id: "M1", fromMe: false },
    message: { conversation: "hi" },
    messageTimestamp: 1_700_000_000,
    ...over,
  });

  it("converts Long-like timestamps to milliseconds", async () => {
    const long = { toString: () => "1700000000" } as unknown as WAMessage["messageTimestamp"];
    expect((await mapInbound(dm({ messageTimestamp: long }), ctx))?.timestamp).toBe(1_700_000_000_000);
  });

  it.each([
    { label: "zero", ts: 0 },
    { label: "a uint64 past any Date (Long)", ts: { toString: () => "18446744073709551615" } },
    { label: "seconds whose milliseconds pass 8.64e15", ts: 8_640_000_000_001 },
  ])("a timestamp no Date can hold ($label) becomes the time of receipt, so the router does not reject the message", async ({ ts }) => {
    const before = Date.now();
    const mapped = await mapInbound(dm({ messageTimestamp: ts as WAMessage["messageTimestamp"] }), ctx);
    expect(mapped?.timestamp).toBeGreaterThanOrEqual(before);
    expect(mapped?.timestamp).toBeLessThanOrEqual(Date.now());
  });

  it.each([
    { label: "a short name", pushName: "Ada 🦄", senderName: "Ada 🦄" },
    { label: "2,000 letters", pushName: "a".repeat(2000), senderName: "a".repeat(1024) },
    { label: "2,000 emoji (two UTF-16 units each)", pushName: "🦄".repeat(2000), senderName: "🦄".repeat(1024) },
  ])("bad input: a push name of $label (the sender's client sets it) is cut to what the router takes, never splitting a character, and the message passes the router's schema", async ({ pushName, senderName }) => {
    const mapped = await mapInbound(dm({ pushName }), ctx);
    expect(mapped?.senderName).toBe(senderName);
    expect(InboundMessageSchema.safeParse(mapped).success).toBe(true);
  });

  it("bad input: a group subject of 2,000 characters (an admin's client sets it) is cut to what the router takes", async () => {
    const subject = "ü".repeat(2000);
    const group: WAMessage = { ...dm(), key: { remoteJid: "120363000000000001@g.us", id: "G1", fromMe: false, participant: "15551234567@s.whatsapp.net" } };
    const mapped = await mapInbound(group, { ...ctx, groupName: () => subject });
    expect(mapped?.groupName).toBe("ü".repeat(1024));
    expect(InboundMessageSchema.safeParse(mapped).success).toBe(true);
  });

  it("flags forwarded and edited messages so the core never runs them as commands", async () => {
    const fwd = await mapInbound(dm({ message: { extendedTextMessage: { text: "/send off", contextInfo: { isForwarded: true } } } }), ctx);
    expect(fwd?.forwarded).toBe(true);
    const edit = await mapInbound(dm({ message: { protocolMessage: { type: 14, editedMessage: { conversation: "/new" } } } }), ctx);
    expect(edit?.edited).toBe(true);
    expect(edit?.text).toBe("/new");
  });

  it("drops group messages without a participant, newsletters and broadcast lists", async () => {
    expect(await mapInbound(dm({ key: { remoteJid: "1203630@g.us", id: "G" } }), ctx)).toBeNull();
    expect(await mapInbound(dm({ key: { remoteJid: "1203630@newsletter", id: "N" } }), ctx)).toBeNull();
    expect(await mapInbound(dm({ key: { remoteJid: "1234@broadcast", id: "B", participant: "15551234567@s.whatsapp.net" } }), ctx)).toBeNull();
  });

  it("a group message quoting the bot counts as a mention even when the quoted id is not one we remember sending (e.g. sent before a restart)", async () => {
    const quoting = (participant: string): WAMessage =>
      dm({
        key: { remoteJid: "120363000000000001@g.us", id: "G2", fromMe: false, participant: "15551234567@s.whatsapp.net" },
        message: { extendedTextMessage: { text: "and then?", contextInfo: { stanzaId: "SENT-BEFORE-RESTART", participant } } },
      });
    // The quote names its author; that it is us is what counts, not our (lost) list of sent ids.
    expect((await mapInbound(quoting("15550000001@s.whatsapp.net"), ctx))?.wasMentioned).toBe(true);
    expect((await mapInbound(quoting("90000000000001@lid"), ctx))?.wasMentioned).toBe(true);
    expect((await mapInbound(quoting("15559999999@s.whatsapp.net"), ctx))?.wasMentioned).toBe(false);
  });

  it("takes the phone JID from the legacy senderPn / participantPn fields when a LID sender has no *Alt JID", async () => {
    const lidDm = dm({ key: { remoteJid: "123456789012345@lid", id: "L1", fromMe: false, senderPn: "15551234567@s.whatsapp.net" } as WAMessage["key"] });
    expect(await mapInbound(lidDm, ctx)).toMatchObject({ senderId: "+15551234567", peerId: "+15551234567", to: "123456789012345@lid" });
    const lidGroup = dm({
      key: { remoteJid: "120363000000000001@g.us", id: "L2", fromMe: false, participant: "123456789012345@lid", participantPn: "15551234567@s.whatsapp.net" } as WAMessage["key"],
    });
    expect((await mapInbound(lidGroup, ctx))?.senderId).toBe("+15551234567");
  });

  it("a group message whose sender is named on the message rather than its key keeps that sender", async () => {
    const group = dm({ key: { remoteJid: "120363000000000001@g.us", id: "G3", fromMe: false }, participant: "15551234567@s.whatsapp.net" });
    expect(await mapInbound(group, ctx)).toMatchObject({ chatType: "group", peerId: "120363000000000001@g.us", senderId: "+15551234567" });
  });

  it.each<[string, proto.IMessage]>([
    ["an image caption quoting our message", { imageMessage: { caption: "this one?", contextInfo: { stanzaId: "OURS" } } }],
    ["a video caption mentioning us", { videoMessage: { caption: "@bot watch", contextInfo: { mentionedJid: ["15550000001@s.whatsapp.net"] } } }],
    ["a document caption mentioning our LID", { documentMessage: { caption: "@bot read", contextInfo: { mentionedJid: ["90000000000001@lid"] } } }],
  ])("%s counts as a mention, like the same in a text message", async (_name, message) => {
    const group = dm({ key: { remoteJid: "120363000000000001@g.us", id: "G4", fromMe: false, participant: "15551234567@s.whatsapp.net" }, message });
    expect((await mapInbound(group, ctx))?.wasMentioned).toBe(true);
  });

  it.each<[string, proto.IContextInfo]>([
    ["mentioning us", { mentionedJid: ["15550000001@s.whatsapp.net"] }],
    ["quoting our message", { stanzaId: "OURS" }],
  ])("a forwarded group message %s is not a mention: whoever forwards it has not addressed us", async (_name, contextInfo) => {
    const message = { extendedTextMessage: { text: "@bot look", contextInfo: { ...contextInfo, isForwarded: true } } };
    const group = dm({ key: { remoteJid: "120363000000000001@g.us", id: "G5", fromMe: false, participant: "15551234567@s.whatsapp.net" }, message });
    expect(await mapInbound(group, ctx)).toMatchObject({ forwarded: true, wasMentioned: false });
  });

  it.each<[string, string, string[], string]>([
    ["our number before a command", "@15550000001 /send off", ["15550000001@s.whatsapp.net"], "/send off"],
    ["our LID before a command", "@90000000000001: /status", ["90000000000001@lid"], "/status"],
    ["someone else before a command", "@15559999999 /send off", ["15559999999@s.whatsapp.net"], "@15559999999 /send off"],
    ["our number as plain text, not a mention", "@15550000001 /send off", [], "@15550000001 /send off"],
    ["our number before words", "@15550000001 hello /send off", ["15550000001@s.whatsapp.net"], "hello /send off"],
  ])("D3 a leading mention: %s", async (_name, text, mentionedJid, out) => {
    const group = dm({ key: { remoteJid: "120363000000000001@g.us", id: "G6", fromMe: false, participant: "15551234567@s.whatsapp.net" }, message: { extendedTextMessage: { text, contextInfo: { mentionedJid } } } });
    expect((await mapInbound(group, ctx))?.text).toBe(out);
  });

  it.each<[string, string, boolean, string]>([
    ["a message that is only our mention keeps it", "@15550000001", false, "@15550000001"],
    ["our mention later in the text is content", "hello @15550000001 /status", false, "hello @15550000001 /status"],
    ["a forward that starts with our mention relays it as typed", "@15550000001 /send off", true, "@15550000001 /send off"],
  ])("D3 only a leading mention of us is addressing: %s", async (_name, text, isForwarded, out) => {
    const contextInfo = { mentionedJid: ["15550000001@s.whatsapp.net"], ...(isForwarded ? { isForwarded } : {}) };
    const group = dm({ key: { remoteJid: "120363000000000001@g.us", id: "G7", fromMe: false, participant: "15551234567@s.whatsapp.net" }, message: { extendedTextMessage: { text, contextInfo } } });
    expect((await mapInbound(group, ctx))?.text).toBe(out);
  });

  it("a DM quoting one of our message ids counts as a mention", async () => {
    const reply = await mapInbound(dm({ message: { extendedTextMessage: { text: "yes", contextInfo: { stanzaId: "OURS" } } } }), ctx);
    expect(reply?.wasMentioned).toBe(true);
  });
});
