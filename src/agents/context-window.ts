/**
 * Fits a run's request into its model's context window (`models[].contextWindow`, in tokens)
 * before it is sent: the oldest turns of the earlier conversation are left out (the transcript
 * keeps them), whole turns at a time, and a quarter of the window stays free for the answer.
 *
 * The daemon has no tokenizer for an arbitrary model, so tokens are estimated from UTF-8 bytes,
 * one per three: generous for English (about four characters a token), about right for scripts
 * of three-byte characters. A window the estimate still misjudges ends in the runtime's
 * context-overflow retry, as for a model whose window is not declared.
 */
import type { TranscriptMessage } from "../sessions/transcript.js";

const BYTES_PER_TOKEN = 3;
/** Role and framing of each message in the request. */
const MESSAGE_OVERHEAD_TOKENS = 4;
const ANSWER_SHARE = 1 / 4;

export function estimateTokens(text: string): number {
  return Math.ceil(Buffer.byteLength(text, "utf8") / BYTES_PER_TOKEN);
}

/**
 * The most recent part of `history` that fits beside `fixedTokens` (system prompt, tool
 * definitions), starting at a user message so that no tool result loses its call. The last turn
 * (the message being answered) is always kept, even when it alone is too long.
 */
export function fitToContextWindow(history: readonly TranscriptMessage[], contextWindow: number, fixedTokens: number): readonly TranscriptMessage[] {
  const budget = Math.floor(contextWindow * (1 - ANSWER_SHARE)) - fixedTokens;
  let used = 0;
  let cut = -1;
  for (let i = history.length - 1; i >= 0; i--) {
    used += messageTokens(history[i]);
    if (used > budget) break;
    if (i === 0 || history[i].role === "user") cut = i;
  }
  if (cut === 0) return history;
  if (cut < 0) cut = Math.max(0, history.findLastIndex((m) => m.role === "user"));
  return history.slice(cut);
}

function messageTokens(m: TranscriptMessage): number {
  return estimateTokens(typeof m.content === "string" ? m.content : JSON.stringify(m.content)) + MESSAGE_OVERHEAD_TOKENS;
}
