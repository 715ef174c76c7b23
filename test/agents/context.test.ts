/**
 * The model's view of a session (src/agents/context.ts): what the provider would reject (tool
 * results without their call, calls without their results) never reaches it, and inter-session
 * turns carry their provenance prefix once (R20).
 */
import { describe, expect, it } from "vitest";
import { buildModelMessages } from "../../src/agents/context.js";
import type { TranscriptMessage } from "../../src/sessions/transcript.js";

const t = 1;
const user = (content: string, provenance?: Extract<TranscriptMessage, { role: "user" }>["provenance"]): TranscriptMessage => ({ role: "user", content, timestamp: t, ...(provenance ? { provenance } : {}) });
const call = (...ids: string[]): TranscriptMessage => ({ role: "assistant", content: [{ type: "text", text: "checking" }, ...ids.map((id) => ({ type: "toolCall" as const, id, name: "sessions_list", arguments: {} }))], timestamp: t } as TranscriptMessage);
const result = (id: string): TranscriptMessage => ({ role: "toolResult", toolCallId: id, toolName: "sessions_list", content: [{ type: "text", text: `result ${id}` }], isError: false, timestamp: t });
const build = (history: TranscriptMessage[], extra: Partial<Parameters<typeof buildModelMessages>[0]> = {}) => buildModelMessages({ agentName: "Main", sessionKey: "agent:main:main", history, ...extra });

describe("model context", () => {
  it("a tool result whose call fell outside the window is left out; the newest user message stays last", () => {
    const out = build([result("old"), user("next question")]);
    expect(out.map((m) => m.role)).toEqual(["system", "user"]);
    expect(out.at(-1)).toEqual({ role: "user", content: "next question" });
  });

  it("calls of a run cut short are dropped: the answered call is kept, an unanswered turn becomes plain text", () => {
    const out = build([user("q"), call("a", "b"), result("a"), call("c"), user("again")]);
    expect(out.slice(1)).toEqual([
      { role: "user", content: "q" },
      { role: "assistant", content: "checking", tool_calls: [{ id: "a", type: "function", function: { name: "sessions_list", arguments: "{}" } }] },
      { role: "tool", tool_call_id: "a", content: "result a" },
      { role: "assistant", content: "checking" },
      { role: "user", content: "again" },
    ]);
  });

  it("a run cut short before any tool result (the process died mid-call): its calls become plain text, since the provider refuses calls without results", () => {
    const out = build([user("q"), call("c"), user("again")]);
    expect(out.slice(1)).toEqual([
      { role: "user", content: "q" },
      { role: "assistant", content: "checking" },
      { role: "user", content: "again" },
    ]);
  });

  it("a call whose results never came (a run cut short) does not take the next run's turn with it: that run's results still follow right after their own call", () => {
    const out = build([user("q"), call("a"), user("next"), call("b"), user("during b"), result("b"), user("end")]);
    expect(out.slice(1).map((m) => (m.role === "tool" ? `tool ${m.tool_call_id}` : m.role === "assistant" ? (m.tool_calls?.length ? `call ${m.tool_calls.map((c) => c.id).join(",")}` : "text") : m.content))).toEqual([
      "q",
      "text",
      "next",
      "call b",
      "tool b",
      "during b",
      "end",
    ]);
  });

  it("messages recorded while a run waited on its tools (between a call and its results) come after the results: the provider takes results only right after their call", () => {
    const out = build([user("q"), call("a", "b"), user("said meanwhile"), result("a"), user("and more"), result("b"), call("c"), user("during c"), result("c"), user("next")]);
    expect(out.slice(1).map((m) => (m.role === "tool" ? `tool ${m.tool_call_id}` : m.role === "assistant" ? `call ${m.tool_calls?.map((c) => c.id).join(",")}` : m.content))).toEqual([
      "q",
      "call a,b",
      "tool a",
      "tool b",
      "said meanwhile",
      "and more",
      "call c",
      "tool c",
      "during c",
      "next",
    ]);
  });

  it("an assistant turn made only of tool calls is sent with content null, not an empty string", () => {
    const callOnly: TranscriptMessage = { role: "assistant", content: [{ type: "toolCall", id: "a", name: "sessions_list", arguments: { limit: 2 } }], timestamp: t };
    expect(build([user("q"), callOnly, result("a")])[2]).toEqual({
      role: "assistant",
      content: null,
      tool_calls: [{ id: "a", type: "function", function: { name: "sessions_list", arguments: '{"limit":2}' } }],
    });
  });

  it("R20 an inter-session turn gets its provenance prefix once, with every source field", () => {
    const provenance = { kind: "inter_session" as const, sourceSessionKey: "agent:main:telegram:group:-7", sourceChannel: "telegram", sourceTool: "sessions_send" };
    const prefix = "[Inter-session message] sourceSession=agent:main:telegram:group:-7 sourceChannel=telegram sourceTool=sessions_send";
    const out = build([user("status?", provenance), user(`${prefix}\nalready prefixed`, provenance), user("from the user")]);
    expect(out.slice(1).map((m) => m.content)).toEqual([`${prefix}\nstatus?`, `${prefix}\nalready prefixed`, "from the user"]);
  });

  it("R20 only inter-session turns are marked: system input (cron) and external user input reach the model as written", () => {
    const out = build([user("weekly report", { kind: "internal_system" }), user("from a hook", { kind: "external_user" })]);
    expect(out.slice(1).map((m) => m.content)).toEqual(["weekly report", "from a hook"]);
  });

  it("R6 under session.scope global the model sees the bucket as main: in the system prompt and as an inter-session source", () => {
    const provenance = { kind: "inter_session" as const, sourceSessionKey: "global", sourceChannel: "webchat", sourceTool: "sessions_send" };
    const out = build([user("from the bucket", provenance)], { sessionKey: "global" });
    expect(out[0].content).toMatch(/\n\nCurrent session: main\.$/);
    expect(out[1].content).toBe("[Inter-session message] sourceSession=main sourceChannel=webchat sourceTool=sessions_send\nfrom the bucket");
    expect(JSON.stringify(out)).not.toContain("global");
  });

  it("a message the caller still holds unfrozen is converted afresh each time: a change to it shows in the next build", () => {
    const message = { role: "user" as const, content: "before", timestamp: t };
    expect(build([message])[1].content).toBe("before");
    message.content = "after";
    expect(build([message])[1].content).toBe("after");
  });

  it("the system prompt is the agent's own (or the default naming the agent), then the session, then the extra prompt", () => {
    expect(build([], { systemPrompt: "You are terse.", extraSystemPrompt: "Subagent context:\nDo X." })[0].content).toBe("You are terse.\n\nCurrent session: agent:main:main.\n\nSubagent context:\nDo X.");
    expect(build([])[0].content).toMatch(/^You are Main, .*\n\nCurrent session: agent:main:main\.$/s);
  });
});
