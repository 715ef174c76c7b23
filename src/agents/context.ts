/**
 * Builds the model's view of a session from its transcript: the system prompt, then the recent
 * messages in Chat Completions form. Inter-session user turns get an in-memory provenance prefix
 * so the model can tell routed agent instructions from its user (R20); the transcript keeps them raw.
 * Session keys are shown as callers see them: the global bucket as `main` (R6).
 *
 * Every model call of a session converts the same window of messages again, so each transcript
 * message (frozen in the transcript store's cache) maps to one frozen ChatMessage, built once
 * with its JSON, which the request body joins as it is (models/request-body.ts).
 */
import type { ChatMessage } from "./models/provider.js";
import { displayKey } from "../sessions/keys.js";
import type { TranscriptMessage } from "../sessions/transcript.js";
import { withJson } from "./models/request-body.js";

export interface ContextInput {
  agentName: string;
  systemPrompt?: string;
  extraSystemPrompt?: string;
  sessionKey: string;
  history: readonly TranscriptMessage[];
}

export function buildModelMessages(input: ContextInput): ChatMessage[] {
  const out: ChatMessage[] = [{ role: "system", content: systemPromptOf(input) }];
  const pendingCalls = new Set<string>();
  let withTools = false;
  for (const m of input.history) {
    if (m.role === "toolResult") {
      // A result whose call fell outside the window would be rejected by the provider.
      if (!pendingCalls.has(m.toolCallId)) continue;
      withTools = true;
    } else if (m.role === "assistant") {
      for (const b of m.content) if (b.type === "toolCall") pendingCalls.add(b.id);
    }
    out.push(chatMessageOf(m));
  }
  return withTools || pendingCalls.size ? dropDanglingToolCalls(resultsRightAfterTheirCall(out)) : out;
}

/** The system message of a run's requests. */
export function systemPromptOf(input: Omit<ContextInput, "history">): string {
  return [
    input.systemPrompt ??
      `You are ${input.agentName}, an AI agent reachable through chat platforms (Discord, Telegram, WhatsApp, web chat) via Switchboard. Reply concisely.`,
    `Current session: ${displayKey(input.sessionKey)}.`,
    input.extraSystemPrompt,
  ]
    .filter(Boolean)
    .join("\n\n");
}

const converted = new WeakMap<TranscriptMessage, ChatMessage>();

/** A transcript message in Chat Completions form; built once per frozen (cached) message. */
function chatMessageOf(m: TranscriptMessage): ChatMessage {
  const cached = converted.get(m);
  if (cached) return cached;
  const chat = withJson(toChatMessage(m));
  if (Object.isFrozen(m)) converted.set(m, chat);
  return chat;
}

function toChatMessage(m: TranscriptMessage): ChatMessage {
  if (m.role === "user") return { role: "user", content: userContent(m) };
  if (m.role === "toolResult") return { role: "tool", tool_call_id: m.toolCallId, content: m.content.map((b) => b.text).join("") };
  const text = m.content.filter((b) => b.type === "text").map((b) => (b as { text: string }).text).join("");
  const calls = m.content.flatMap((b) => (b.type === "toolCall" ? [b] : []));
  return {
    role: "assistant",
    // null only beside tool calls: OpenAI refuses an assistant turn with neither ("expected a
    // string, got null"), and an empty answer would then fail every later call of the session.
    content: text || (calls.length ? null : ""),
    ...(calls.length ? { tool_calls: calls.map((c) => ({ id: c.id, type: "function" as const, function: { name: c.name, arguments: argumentsJson(c.arguments) } })) } : {}),
  };
}

/**
 * A recorded call's arguments as JSON of an object. Arguments the model gave as bad JSON are
 * recorded as their raw text; sent back as such a string, servers that parse the history's
 * arguments into an object (llama.cpp) refuse every later call of the session.
 */
export function argumentsJson(args: unknown): string {
  return typeof args === "object" && args !== null && !Array.isArray(args) ? JSON.stringify(args) : "{}";
}

function userContent(m: Extract<TranscriptMessage, { role: "user" }>): string {
  const p = m.provenance;
  if (p?.kind !== "inter_session") return m.content;
  const prefix = [
    "[Inter-session message]",
    p.sourceSessionKey ? `sourceSession=${displayKey(p.sourceSessionKey)}` : "",
    p.sourceChannel ? `sourceChannel=${p.sourceChannel}` : "",
    p.sourceTool ? `sourceTool=${p.sourceTool}` : "",
  ]
    .filter(Boolean)
    .join(" ");
  return m.content.startsWith("[Inter-session message]") ? m.content : `${prefix}\n${m.content}`;
}

/**
 * A message recorded while a run of the session waited on a tool (a group member talking, an
 * operator's web chat message) is in the transcript between the call and its result. Providers
 * take a call's results only right after it (OpenAI refuses the whole request, so every later run
 * of the session would fail): such messages are shown after the results, as said during that round.
 */
function resultsRightAfterTheirCall(messages: ChatMessage[]): ChatMessage[] {
  const out: ChatMessage[] = [];
  for (let i = 0; i < messages.length; i++) {
    const m = messages[i];
    out.push(m);
    if (m.role !== "assistant" || !m.tool_calls?.length) continue;
    const waiting = new Set(m.tool_calls.map((c) => c.id));
    const saidMeanwhile: ChatMessage[] = [];
    // Up to the run's next model turn: results missing by then never came (dropDanglingToolCalls).
    while (waiting.size && i + 1 < messages.length && messages[i + 1].role !== "assistant") {
      const next = messages[++i];
      if (next.role === "tool" && waiting.delete(next.tool_call_id ?? "")) out.push(next);
      else saidMeanwhile.push(next);
    }
    out.push(...saidMeanwhile);
  }
  return out;
}

/** Assistant tool calls without every result (a run cut short) are turned into plain text. */
function dropDanglingToolCalls(messages: ChatMessage[]): ChatMessage[] {
  const answered = new Set(messages.filter((m) => m.role === "tool").map((m) => m.tool_call_id));
  const cleaned = messages.map((m): ChatMessage => {
    if (m.role !== "assistant" || !m.tool_calls?.length) return m;
    if (m.tool_calls.every((c) => answered.has(c.id))) return m;
    const kept = m.tool_calls.filter((c) => answered.has(c.id));
    return kept.length ? { ...m, tool_calls: kept } : { role: "assistant", content: m.content ?? "" };
  });
  const asked = new Set(cleaned.flatMap((m) => (m.role === "assistant" ? (m.tool_calls ?? []).map((c) => c.id) : [])));
  return cleaned.filter((m) => m.role !== "tool" || asked.has(m.tool_call_id ?? ""));
}
