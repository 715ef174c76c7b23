/**
 * sessions_history (R10–R12): one session's transcript messages in their raw format, tool results
 * left out unless asked for. A model's context is small, so long texts are cut and the array is
 * capped by size, newest messages kept; flags say what was cut.
 */
import type { App } from "../app.js";
import { displayKey } from "../sessions/keys.js";
import type { TranscriptMessage } from "../sessions/transcript.js";
import { defineTool, SessionsHistoryParams } from "./schemas.js";
import { resolveTarget } from "./target.js";
import type { AgentTool } from "./types.js";
import type { SessionView } from "./visibility.js";

export const HISTORY_LIMIT_DEFAULT = 200;
export const HISTORY_LIMIT_MAX = 1000;
export const HISTORY_MAX_BYTES = 80 * 1024;
export const HISTORY_MAX_CHARS = 4000;
const CUT_MARK = "\n…(truncated)…";
export const OMITTED_TEXT = "[sessions_history omitted: message too large]";

export interface CappedHistory {
  messages: TranscriptMessage[];
  /** Anything was cut or dropped. */
  truncated: boolean;
  /** Older messages were dropped to fit the byte cap. */
  droppedMessages: boolean;
  /** Some text was shortened to the character cap. */
  contentTruncated: boolean;
  /** Size of `messages` as JSON (UTF-8). */
  bytes: number;
}

export type SessionsHistoryResult =
  | ({ sessionKey: string; sessionId: string } & CappedHistory)
  | { status: "error" | "forbidden"; error: string };

export function createSessionsHistoryTool(app: App, view: SessionView): AgentTool {
  return defineTool({
    name: "sessions_history",
    description: "Fetch a session's transcript (raw messages, oldest first). Tool results are left out unless includeTools is true.",
    params: SessionsHistoryParams,
    invalid: (error): SessionsHistoryResult => ({ status: "error", error }),
    async run(p): Promise<SessionsHistoryResult> {
      const target = resolveTarget(app, view, { sessionKey: p.sessionKey }, "history");
      if (!target.ok) return { status: target.status, error: target.error };
      const limit = Math.min(Math.floor(p.limit ?? HISTORY_LIMIT_DEFAULT), HISTORY_LIMIT_MAX);
      const includeTools = p.includeTools ?? false;
      const file = app.sessions.transcriptPath(target.entry);
      const selected = includeTools ? await app.transcripts.readMessages(file, limit) : await app.transcripts.readMessagesWithoutToolResults(file, limit);
      return { sessionKey: displayKey(target.key), sessionId: target.entry.sessionId, ...capHistory(selected.map(withShownKeys)) };
    },
  });
}

/**
 * The message with the session key it names (an inter-session source) as callers see keys: the
 * transcript keeps the stored key, but a caller must never see `global` (R6). Pure.
 */
export function withShownKeys(m: TranscriptMessage): TranscriptMessage {
  if (m.role !== "user" || !m.provenance?.sourceSessionKey) return m;
  const shown = displayKey(m.provenance.sourceSessionKey);
  return shown === m.provenance.sourceSessionKey ? m : { ...m, provenance: { ...m.provenance, sourceSessionKey: shown } };
}

/** Cuts every text (and oversized tool-call arguments) to `maxChars`, with a visible mark. Pure. */
export function cutLongTexts(messages: readonly TranscriptMessage[], maxChars = HISTORY_MAX_CHARS): { messages: TranscriptMessage[]; contentTruncated: boolean } {
  let contentTruncated = false;
  const cut = (text: string): string => {
    const short = truncateText(text, maxChars);
    if (short !== text) contentTruncated = true;
    return short;
  };
  return { messages: messages.map((m) => shortenMessage(m, cut, maxChars)), contentTruncated };
}

/** Cuts long texts, then drops the oldest messages until the JSON fits `maxBytes`. Pure. */
export function capHistory(messages: readonly TranscriptMessage[], limits: { maxBytes?: number; maxChars?: number } = {}): CappedHistory {
  const maxBytes = limits.maxBytes ?? HISTORY_MAX_BYTES;
  const { messages: shortened, contentTruncated } = cutLongTexts(messages, limits.maxChars ?? HISTORY_MAX_CHARS);
  const sizes = shortened.map((m) => Buffer.byteLength(JSON.stringify(m)));
  // JSON array: "[" + items joined by "," + "]".
  let total = sizes.reduce((a, b) => a + b, 0) + Math.max(shortened.length - 1, 0) + 2;
  let first = 0;
  while (first < shortened.length - 1 && total > maxBytes) {
    total -= sizes[first] + 1;
    first++;
  }
  let kept = shortened.slice(first);
  let hardCapped = false;
  if (kept.length === 1 && total > maxBytes) {
    kept = [{ role: "assistant", content: [{ type: "text", text: OMITTED_TEXT }], timestamp: kept[0].timestamp }];
    hardCapped = true;
  }
  const droppedMessages = first > 0 || hardCapped;
  return {
    messages: kept,
    truncated: droppedMessages || contentTruncated,
    droppedMessages,
    contentTruncated,
    bytes: Buffer.byteLength(JSON.stringify(kept)),
  };
}

/** At most `max` UTF-16 units, never splitting a surrogate pair, with a visible cut mark. */
export function truncateText(text: string, max: number): string {
  if (text.length <= max) return text;
  let end = max;
  const code = text.charCodeAt(end - 1);
  if (code >= 0xd800 && code <= 0xdbff) end--;
  return text.slice(0, end) + CUT_MARK;
}

function shortenMessage(m: TranscriptMessage, cut: (text: string) => string, maxChars: number): TranscriptMessage {
  switch (m.role) {
    case "user":
      return { ...m, content: cut(m.content) };
    case "toolResult":
      return { ...m, content: m.content.map((b) => ({ ...b, text: cut(b.text) })) };
    case "assistant":
      return {
        ...m,
        content: m.content.map((b) => {
          if (b.type === "text") return { ...b, text: cut(b.text) };
          const json = JSON.stringify(b.arguments ?? {});
          // Oversized arguments become a cut JSON string: still readable, no longer parseable.
          return json.length > maxChars ? { ...b, arguments: cut(json) } : b;
        }),
      };
  }
}
