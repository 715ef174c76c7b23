import { describe, expect, it } from "vitest";
import { estimateTokens, fitToContextWindow } from "../../src/agents/context-window.js";
import type { TranscriptMessage } from "../../src/sessions/transcript.js";

const user = (text: string): TranscriptMessage => ({ role: "user", content: text, timestamp: 0 });
const said = (text: string): TranscriptMessage => ({ role: "assistant", content: [{ type: "text", text }], timestamp: 0 });
const call = (id: string): TranscriptMessage => ({ role: "assistant", content: [{ type: "toolCall", id, name: "t", arguments: {} }], timestamp: 0 });
const result = (id: string, text: string): TranscriptMessage => ({ role: "toolResult", toolCallId: id, toolName: "t", content: [{ type: "text", text }], isError: false, timestamp: 0 });
const kb = (c: string) => c.repeat(1_200);

describe("fitToContextWindow (interfaces §2 models[].contextWindow)", () => {
  const turns = [user(kb("a")), said(kb("b")), user(kb("c")), call("1"), result("1", kb("d")), user("now?")];

  it.each<[string, readonly TranscriptMessage[], number, number, readonly TranscriptMessage[]]>([
    ["a history that fits is kept whole", turns, 100_000, 0, turns],
    ["the oldest turn goes first; the cut falls before a user message, so no tool result loses its call", turns, 2_000, 0, turns.slice(2)],
    ["the tokens of the system prompt and tools count against the window", turns, 2_400, 1_000, turns.slice(5)],
    ["the message being answered is kept even when it alone is too long", [user(kb("a")), user(kb("z"))], 10, 0, [user(kb("z"))]],
    ["a window that starts mid-turn and fits is left as it is", turns.slice(1), 100_000, 0, turns.slice(1)],
    // A model turn in a tool loop: the user message that began it is kept with its call and result.
    ["a turn that does not fit even alone is kept from its user message, not from its last tool result", [user(kb("a")), user("q"), call("1"), result("1", kb("d"))], 10, 0, [user("q"), call("1"), result("1", kb("d"))]],
    // 200 messages of one token's text each: with the framing of each (role, separators) they do not all fit.
    ["each message's framing counts, not only its text", Array.from({ length: 200 }, () => user("hi")), 400, 0, Array.from({ length: 60 }, () => user("hi"))],
  ])("%s", (_rule, history, contextWindow, fixed, expected) => {
    expect(fitToContextWindow(history, contextWindow, fixed)).toEqual(expected);
  });

  it("estimates generously: about one token per three UTF-8 bytes", () => {
    expect(estimateTokens("abc".repeat(100))).toBe(100);
    expect(estimateTokens("語".repeat(100))).toBe(100);
  });
});
