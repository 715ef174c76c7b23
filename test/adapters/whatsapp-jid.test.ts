import { describe, expect, it } from "vitest";
import { chatTypeOfJid, e164FromJid, jidForTarget, jidKind, normalizeJid, resolveIdentity, sameUser } from "../../adapters/whatsapp/jid.js";

describe("whatsapp jid helpers", () => {
  it.each([
    ["15551234567@s.whatsapp.net", "pn"],
    ["15551234567:12@s.whatsapp.net", "pn"],
    ["15551234567@c.us", "pn"],
    ["123456789012345@lid", "lid"],
    ["123456789012345:3@lid", "lid"],
    ["15551234567:99@hosted", "pn"],
    ["123456789012345:99@hosted.lid", "lid"],
    ["120363021234567890@g.us", "group"],
    ["status@broadcast", "status"],
    ["1234567890@broadcast", "broadcast"],
    ["1203630000@newsletter", "newsletter"],
    ["not-a-jid", "other"],
    ["", "other"],
  ] as const)("jidKind(%j) = %s", (jid, kind) => {
    expect(jidKind(jid)).toBe(kind);
  });

  it.each([
    ["15551234567:12@s.whatsapp.net", "15551234567@s.whatsapp.net"],
    ["15551234567@c.us", "15551234567@s.whatsapp.net"],
    ["123456789012345:3@lid", "123456789012345@lid"],
    ["15551234567_1:2@s.whatsapp.net", "15551234567@s.whatsapp.net"],
    ["120363021234567890@g.us", "120363021234567890@g.us"],
  ])("normalizeJid(%j) = %j", (jid, normalized) => {
    expect(normalizeJid(jid)).toBe(normalized);
  });

  it.each([
    ["15551234567@s.whatsapp.net", "+15551234567"],
    ["15551234567:12@s.whatsapp.net", "+15551234567"],
    ["123456789012345@lid", undefined],
    ["120363021234567890@g.us", undefined],
    [undefined, undefined],
  ])("e164FromJid(%j) = %j", (jid, e164) => {
    expect(e164FromJid(jid)).toBe(e164);
  });

  it.each<[string, Array<string | undefined>, string]>([
    ["15551234567:4@s.whatsapp.net", [], "+15551234567"],
    ["123456789012345:2@lid", ["15551234567@s.whatsapp.net"], "+15551234567"],
    ["123456789012345@lid", [undefined, "15551234567:9@s.whatsapp.net"], "+15551234567"],
    ["123456789012345:2@lid", [], "123456789012345@lid"],
    ["123456789012345@lid", ["987654321098765@lid"], "123456789012345@lid"],
  ])("resolveIdentity(%j, %j) = %j", (primary, alts, identity) => {
    expect(resolveIdentity(primary, ...alts)).toBe(identity);
  });

  it("sameUser ignores devices and the c.us spelling, never matches missing ids", () => {
    expect(sameUser("15551234567:3@s.whatsapp.net", "15551234567@c.us")).toBe(true);
    expect(sameUser("123@lid", "123:9@lid")).toBe(true);
    expect(sameUser("123@lid", "123@s.whatsapp.net")).toBe(false);
    expect(sameUser(undefined, undefined)).toBe(false);
  });

  it.each([
    ["15551234567@s.whatsapp.net", "15551234567@s.whatsapp.net"],
    ["15551234567:12@s.whatsapp.net", "15551234567@s.whatsapp.net"],
    ["+15551234567", "15551234567@s.whatsapp.net"],
    ["15551234567", "15551234567@s.whatsapp.net"],
    ["123456789012345@lid", "123456789012345@lid"],
    ["120363021234567890@g.us", "120363021234567890@g.us"],
    ["alice", undefined],
    ["@g.us", undefined],
  ])("jidForTarget(%j) = %j", (to, jid) => {
    expect(jidForTarget(to)).toBe(jid);
  });

  it("D2 an outbound to tells the send policy its chat type: a group JID is a group; a phone JID, LID or E.164 a person", () => {
    expect(["120363021234567890@g.us", "15551234567@s.whatsapp.net", "+15551234567", "123456789012345@lid", "status@broadcast", "hello"].map(chatTypeOfJid)).toEqual(["group", "direct", "direct", "direct", undefined, undefined]);
  });
});
