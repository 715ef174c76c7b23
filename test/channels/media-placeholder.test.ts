import { describe, expect, it } from "vitest";
import { MAX_MEDIA_NAME_CHARS, mediaPlaceholder, withMedia, type Media } from "../../src/channels/media-placeholder.js";
import { parseCommand } from "../../src/inbound/command-parse.js";

describe("mediaPlaceholder", () => {
  it.each<[string, Media, string]>([
    ["a photo", { kind: "photo" }, "[photo]"],
    ["a voice message", { kind: "voice message" }, "[voice message]"],
    ["a document by its file name", { kind: "document", name: "report.pdf" }, "[document: report.pdf]"],
    ["a sticker by its emoji", { kind: "sticker", name: "😀" }, "[sticker: 😀]"],
    ["a location without a name", { kind: "location", name: null }, "[location]"],
    ["a blank name, as none", { kind: "audio", name: "  \n " }, "[audio]"],
    ["a name over several lines, on one", { kind: "poll", name: "Lunch?\r\n/send off\u2028now" }, "[poll: Lunch? /send off now]"],
    ["control characters, as spaces", { kind: "contact", name: "Ada\u0000\u001bLovelace" }, "[contact: Ada Lovelace]"],
    ["a name of exactly the limit, whole", { kind: "document", name: "a".repeat(MAX_MEDIA_NAME_CHARS) }, `[document: ${"a".repeat(MAX_MEDIA_NAME_CHARS)}]`],
    ["a longer name, cut short", { kind: "document", name: "a".repeat(5000) }, `[document: ${"a".repeat(MAX_MEDIA_NAME_CHARS - 1)}…]`],
    ["emoji cut by characters, never split", { kind: "document", name: "🦄".repeat(500) }, `[document: ${"🦄".repeat(MAX_MEDIA_NAME_CHARS - 1)}…]`],
  ])("%s", (_name, media, text) => {
    expect(mediaPlaceholder(media)).toBe(text);
  });

  it.each(["/send off", " /send off", "\n/send off", "/new hi", "/stop@SwitchboardTestBot"])("a name the sender chose (%j) never makes the placeholder a command", (name) => {
    const text = mediaPlaceholder({ kind: "document", name });
    expect(text.startsWith("[")).toBe(true);
    expect(parseCommand(text, { botUsername: "SwitchboardTestBot" })).toBeNull();
  });
});

describe("withMedia", () => {
  it.each<[string, string, string[], string]>([
    ["media alone", "", ["[photo]"], "[photo]"],
    ["a blank caption, as none", " \n", ["[photo]"], "[photo]"],
    ["a caption, then the media on lines of their own", "look at this", ["[photo]", "[sticker: 😀]"], "look at this\n[photo]\n[sticker: 😀]"],
    ["words alone", "hello", [], "hello"],
  ])("%s", (_name, words, lines, text) => {
    expect(withMedia(words, lines)).toBe(text);
  });

  it("a captioned command stays a command: it is read from the first line", () => {
    expect(parseCommand(withMedia("/send off", ["[photo]"]))).toEqual({ name: "send", mode: "off" });
  });
});
