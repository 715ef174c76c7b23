/** The conversation as strict chat templates take it (src/agents/models/alternating.ts). */
import { describe, expect, it } from "vitest";
import { alternating } from "../../src/agents/models/alternating.js";
import type { ChatMessage } from "../../src/agents/models/provider.js";

const system: ChatMessage = { role: "system", content: "sys" };
const user = (content: string): ChatMessage => ({ role: "user", content });
const assistant = (content: string): ChatMessage => ({ role: "assistant", content });
const call: ChatMessage = { role: "assistant", content: null, tool_calls: [{ id: "c1", type: "function", function: { name: "sessions_list", arguments: "{}" } }] };
const result: ChatMessage = { role: "tool", tool_call_id: "c1", content: "[]" };

describe("alternating turns for strict chat templates", () => {
  it.each<[string, ChatMessage[], ChatMessage[]]>([
    ["alternating already: unchanged", [system, user("a"), assistant("b"), user("c")], [system, user("a"), assistant("b"), user("c")]],
    ["consecutive user turns are joined", [system, user("a"), user("b"), assistant("c"), user("d"), user("e")], [system, user("a\n\nb"), assistant("c"), user("d\n\ne")]],
    ["a window that begins with an answer starts at the first user turn", [system, assistant("old"), result, user("a")], [system, user("a")]],
    ["tool calls and their results are kept as they are", [system, user("a"), call, result, assistant("done")], [system, user("a"), call, result, assistant("done")]],
    ["no system message", [user("a"), user("b")], [user("a\n\nb")]],
    ["only a system message", [system], [system]],
  ])("%s", (_name, input, expected) => {
    expect(alternating(input)).toEqual(expected);
  });

  it("does not change the messages it is given", () => {
    const input = [system, user("a"), user("b")];
    const copy = structuredClone(input);
    alternating(input);
    expect(input).toEqual(copy);
  });
});
