/**
 * What a chat message carried besides words, as the agent reads it. The model sees no media, so a
 * photo, voice note or file reaches it as a short placeholder ("[photo]", "[document: report.pdf]")
 * that lets it say it cannot see it, instead of the sender getting no answer at all. Every adapter
 * names the same thing the same way through this one module.
 */

/** What was sent, in the words the agent reads. */
export type MediaKind =
  | "photo"
  | "video"
  | "video message"
  | "GIF"
  | "voice message"
  | "audio"
  | "document"
  | "sticker"
  | "location"
  | "live location"
  | "contact"
  | "poll";

export interface Media {
  kind: MediaKind;
  /** Set by the sender (or their client): a file name, a sticker's emoji, a place, a contact's name, a poll's question. */
  name?: string | null;
}

/** The longest name a placeholder keeps, in characters (code points): a file name may run to hundreds. */
export const MAX_MEDIA_NAME_CHARS = 100;

/**
 * `[kind]` or `[kind: name]`. It always starts with "[", so no name can make it read as a command
 * (a document named "/send off" gives "[document: /send off]"), and a name is kept on one line and
 * cut short, so it cannot pose as lines of its own either.
 */
export function mediaPlaceholder(media: Media): string {
  const name = oneLine(media.name ?? "");
  return name ? `[${media.kind}: ${name}]` : `[${media.kind}]`;
}

/**
 * The text of a message: the sender's words (text or caption), then one line per medium. The
 * words come first, so a captioned command ("/status" on a photo) still reads as one: commands
 * are read from the first line.
 */
export function withMedia(words: string, mediaLines: readonly string[]): string {
  return [words, ...mediaLines].filter((line) => line.trim() !== "").join("\n");
}

function oneLine(name: string): string {
  // Control characters (newlines among them) and Unicode line breaks become spaces.
  const flat = name.replace(/[\p{Cc}\p{Zl}\p{Zp}\s]+/gu, " ").trim();
  const chars = Array.from(flat);
  return chars.length <= MAX_MEDIA_NAME_CHARS ? flat : `${chars.slice(0, MAX_MEDIA_NAME_CHARS - 1).join("")}…`;
}
