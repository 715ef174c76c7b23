/**
 * Pure WhatsApp JID helpers and identity mapping.
 *
 * Deliberately re-implements the few Baileys jid-utils we need instead of importing them: a value
 * import of Baileys costs ~0.5 s, and this module is loaded even when WhatsApp is disabled.
 * Semantics follow Baileys 7.0.0-rc14 `jidDecode`/`jidNormalizedUser`.
 */

export type JidKind = "pn" | "lid" | "group" | "status" | "broadcast" | "newsletter" | "other";

export const STATUS_BROADCAST_JID = "status@broadcast";

interface DecodedJid {
  user: string;
  server: string;
}

function decodeJid(jid: string): DecodedJid | undefined {
  const at = jid.indexOf("@");
  if (at < 0) return undefined;
  // "user_agent:device@server": the agent and device parts never identify a different person.
  const user = jid.slice(0, at).split(":")[0].split("_")[0];
  return { user, server: jid.slice(at + 1) };
}

export function jidKind(jid: string | null | undefined): JidKind {
  if (!jid) return "other";
  if (jid === STATUS_BROADCAST_JID) return "status";
  const server = decodeJid(jid)?.server;
  switch (server) {
    case "s.whatsapp.net":
    case "c.us":
    case "hosted":
      return "pn";
    case "lid":
    case "hosted.lid":
      return "lid";
    case "g.us":
      return "group";
    case "broadcast":
      return "broadcast";
    case "newsletter":
      return "newsletter";
    default:
      return "other";
  }
}

/** Strips device/agent suffixes and maps the legacy `c.us` server, like Baileys' jidNormalizedUser. */
export function normalizeJid(jid: string): string {
  const d = decodeJid(jid);
  if (!d) return jid;
  return `${d.user}@${d.server === "c.us" ? "s.whatsapp.net" : d.server}`;
}

/** "+<digits>" for a phone-number JID, undefined for anything else. */
export function e164FromJid(jid: string | null | undefined): string | undefined {
  if (jidKind(jid) !== "pn") return undefined;
  const user = decodeJid(jid as string)?.user ?? "";
  return /^\d{5,20}$/.test(user) ? `+${user}` : undefined;
}

/**
 * The one identity we expose for a WhatsApp user: E.164 when any of the JIDs we know for them is a
 * phone-number JID, otherwise the normalised LID (`<digits>@lid`). Phone and LID senders of the
 * same person therefore map to one identity whenever a mapping is known (ecosystem B-6).
 */
export function resolveIdentity(primary: string, ...alternatives: Array<string | null | undefined>): string {
  for (const jid of [primary, ...alternatives]) {
    const e164 = e164FromJid(jid);
    if (e164) return e164;
  }
  return normalizeJid(primary);
}

/** Same account regardless of device suffix or c.us/s.whatsapp.net spelling. */
export function sameUser(a: string | null | undefined, b: string | null | undefined): boolean {
  if (!a || !b) return false;
  return normalizeJid(a) === normalizeJid(b);
}

/**
 * Where `send` should go for an outbound `to`: JIDs pass through (device suffix stripped so the
 * message reaches every device), and an E.164 number (how owners are configured) becomes its
 * phone JID. Returns undefined when `to` is neither.
 */
export function jidForTarget(to: string): string | undefined {
  const trimmed = to.trim();
  if (trimmed.includes("@")) return decodeJid(trimmed)?.user ? normalizeJid(trimmed) : undefined;
  const digits = trimmed.replace(/^\+/, "");
  return /^\d{5,20}$/.test(digits) ? `${digits}@s.whatsapp.net` : undefined;
}

/**
 * What an outbound `to` says of the chat: a group JID, a person (phone JID, LID or E.164), else
 * nothing — for the send policy's `chatType` rules.
 */
export function chatTypeOfJid(to: string): "group" | "direct" | undefined {
  const kind = jidKind(jidForTarget(to));
  return kind === "group" ? "group" : kind === "pn" || kind === "lid" ? "direct" : undefined;
}
