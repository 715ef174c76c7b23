import { afterEach, describe, expect, it, vi } from "vitest";
import type { ConfigInput } from "../../src/config/schema.js";
import type { AgentTool } from "../../src/tools/types.js";
import { echoLastUser, FakeModelServer, withContextWindow, type ModelRequest } from "../fakes/model-server.js";
import { startHarness, type Harness } from "../helpers/harness.js";
import { messagesOf } from "../helpers/tool-driver.js";

let h: Harness | undefined;
afterEach(async () => {
  await h?.stop();
  h = undefined;
});

const lastUserText = (req: ModelRequest): string => {
  const m = [...req.messages].reverse().find((x) => x?.role === "user");
  return typeof m?.content === "string" ? m.content : JSON.stringify(m?.content);
};

/** A harness whose model holds its answer to each of `texts` until `release(text)` (default: the first of them). */
async function holding(texts: string[], config: ConfigInput = {}): Promise<{ harness: Harness; release: (text?: string) => void }> {
  const opens = new Map<string, () => void>();
  const gates = new Map(texts.map((t) => [t, new Promise<void>((r) => opens.set(t, r))]));
  const harness = await startHarness({
    config,
    responder: async (req, i) => {
      await gates.get(lastUserText(req));
      return echoLastUser(req, i);
    },
  });
  return { harness, release: (text = texts[0]) => opens.get(text)?.() };
}

const holdingFirst = () => holding(["first"]);

const MAIN = "agent:main:main";

describe("agent runtime lanes", () => {
  it("DESIGN one lane per session: a second run of the same key starts only after the first ended; another key runs meanwhile", async () => {
    // The first run's model call is held open until the test releases it, so "meanwhile" is an
    // observable state rather than a race: whatever else ran while it was held ran concurrently with it.
    const held = await holdingFirst();
    h = held.harness;
    const { release } = held;
    const rt = h.app.runtime;
    const first = rt.start({ sessionKey: "agent:main:main", agentId: "main", message: "first" });
    const second = rt.start({ sessionKey: "agent:main:main", agentId: "main", message: "second" });
    const other = rt.start({ sessionKey: "agent:main:telegram:group:-7", agentId: "main", message: "other" });
    try {
      // Two model calls in flight at once (first's is parked): a lane shared across keys would stall here, and waitForRequests says so.
      await h.model.waitForRequests(2);
      // The other key's run completes while the first run is still parked in its model call: lanes are per key, not global.
      expect(await other.done).toMatchObject({ status: "ok", reply: "echo: other" });
      expect(first.info.status).toBe("running");
      // …but the same key's second run has not even started: it waits in the lane behind the first.
      expect(second.info.status).toBe("queued");
      expect(second.info.startedAt).toBeUndefined();
      expect(h.model.requests.map(lastUserText)).not.toContain("second");
    } finally {
      release();
    }
    expect(await first.done).toMatchObject({ status: "ok", reply: "echo: first" });
    expect(await second.done).toMatchObject({ status: "ok", reply: "echo: second" });
    expect(second.info.startedAt).toBeGreaterThanOrEqual(first.info.endedAt!);
    // Run in order, the second run's model call sees the first exchange in its history.
    const secondReq = h.model.requests.find((r) => lastUserText(r) === "second")!;
    expect(secondReq.messages.some((m) => m.role === "assistant" && JSON.stringify(m.content).includes("echo: first"))).toBe(true);
  });

  it("DESIGN one lane per session: a run started while the session's second run is in flight waits for that one too", async () => {
    const held = await holding(["first", "second"]);
    h = held.harness;
    const rt = h.app.runtime;
    const first = rt.start({ sessionKey: MAIN, agentId: "main", message: "first" });
    const second = rt.start({ sessionKey: MAIN, agentId: "main", message: "second" });
    try {
      held.release("first");
      await first.done;
      await h.model.waitForRequests(2);
      // The first run's end must not free the lane the second run now holds.
      const third = rt.start({ sessionKey: MAIN, agentId: "main", message: "third" });
      expect(await rt.start({ sessionKey: "agent:main:telegram:group:-7", agentId: "main", message: "other" }).done).toMatchObject({ status: "ok" });
      expect(third.info.status).toBe("queued");
      expect(h.model.requests.map(lastUserText)).not.toContain("third");
      held.release("second");
      expect(await third.done).toMatchObject({ status: "ok", reply: "echo: third" });
      expect(third.info.startedAt).toBeGreaterThanOrEqual(second.info.endedAt!);
    } finally {
      held.release("second");
    }
  });

  it("/stop (abortSession) aborts the runs of its own session only; another chat's run goes on", async () => {
    const held = await holding(["first", "other"]);
    h = held.harness;
    const rt = h.app.runtime;
    const mine = rt.start({ sessionKey: MAIN, agentId: "main", message: "first" });
    const queued = rt.start({ sessionKey: MAIN, agentId: "main", message: "queued" });
    const theirs = rt.start({ sessionKey: "agent:main:telegram:group:-7", agentId: "main", message: "other" });
    await h.model.waitForRequests(2);
    expect(rt.abortSession(MAIN).sort()).toEqual([mine.runId, queued.runId].sort());
    held.release("first");
    held.release("other");
    expect(await mine.done).toMatchObject({ status: "timeout", error: "run aborted: aborted by /stop" });
    expect(await queued.done).toMatchObject({ status: "timeout" });
    expect(await theirs.done).toMatchObject({ status: "ok", reply: "echo: other" });
    // A finished run is nothing to abort: /stop must not report it as stopped.
    expect(rt.abort(mine.runId)).toBe(false);
  });

  it("R18 agent.wait on a run answers when that run ends, not when another run does", async () => {
    const held = await holdingFirst();
    h = held.harness;
    const rt = h.app.runtime;
    const first = rt.start({ sessionKey: MAIN, agentId: "main", message: "first" });
    const waited = rt.wait(first.runId, 60_000);
    try {
      expect(await rt.start({ sessionKey: "agent:main:telegram:group:-7", agentId: "main", message: "other" }).done).toMatchObject({ status: "ok" });
    } finally {
      held.release();
    }
    expect(await waited).toMatchObject({ runId: first.runId, status: "ok" });
  });

  it("counts() tells the running runs from the queued ones (health, switchboard status)", async () => {
    const held = await holdingFirst();
    h = held.harness;
    const rt = h.app.runtime;
    const runs = ["first", "second", "third"].map((message) => rt.start({ sessionKey: MAIN, agentId: "main", message }));
    try {
      await h.model.waitForRequests(1);
      expect(rt.counts()).toEqual({ running: 1, queued: 2 });
    } finally {
      held.release();
    }
    await Promise.all(runs.map((r) => r.done));
    expect(rt.counts()).toEqual({ running: 0, queued: 0 });
  });
});

describe("agent runtime context", () => {
  it("the model sees the session's last 60 transcript messages (its history window), the new message last", async () => {
    h = await startHarness();
    const entry = await h.app.sessions.upsert("agent:main:main", "main");
    const ref = { path: h.app.sessions.transcriptPath(entry), sessionId: entry.sessionId, key: entry.key };
    for (let i = 0; i < 70; i++) await h.app.transcripts.appendMessage(ref, { role: "user", content: `old ${i}`, timestamp: i });
    expect(await h.app.runtime.start({ sessionKey: "agent:main:main", agentId: "main", message: "new" }).done).toMatchObject({ status: "ok" });
    const [req] = h.model.requests;
    expect(req.messages[0].role).toBe("system");
    expect(req.messages.slice(1).map((m) => m.content)).toEqual([...Array.from({ length: 59 }, (_, i) => `old ${i + 11}`), "new"]);
  });
});

/** A test tool the model can call; `run` decides what it returns (and when). */
const tool = (name: string, run: () => Promise<unknown>): AgentTool => ({ name, description: `test tool ${name}`, parameters: { type: "object", properties: {} }, execute: run });

describe("agent runtime and real servers' answers", () => {
  it("an empty answer from the model does not break the session: later model calls carry it as an empty string, not content null (which OpenAI refuses with a 400)", async () => {
    h = await startHarness({ responder: (req, i) => (lastUserText(req) === "say nothing" ? { content: "" } : echoLastUser(req, i)) });
    expect(await h.app.runtime.start({ sessionKey: MAIN, agentId: "main", message: "say nothing" }).done).toMatchObject({ status: "ok", reply: "" });
    expect(await h.app.runtime.start({ sessionKey: MAIN, agentId: "main", message: "still there?" }).done).toMatchObject({ status: "ok", reply: "echo: still there?" });
    expect(h.model.requests[1].messages.slice(-2)).toEqual([
      { role: "assistant", content: "" },
      { role: "user", content: "still there?" },
    ]);
  });

  it.each([
    { finishReason: "content_filter", says: "the provider's content filter withheld the answer" },
    { finishReason: "length", says: "the model reached its output limit before answering" },
  ])("an answer withheld by the server (no content, finish_reason $finishReason) ends the run as an error saying so, not as a silent empty reply", async ({ finishReason, says }) => {
    h = await startHarness({ responder: () => ({ content: null, finishReason }) });
    const outcome = await h.app.runtime.start({ sessionKey: MAIN, agentId: "main", message: "hi" }).done;
    expect(outcome).toMatchObject({ status: "error" });
    expect(outcome.status === "error" && outcome.error).toBe(`model fake/m returned no answer (finish_reason "${finishReason}": ${says})`);
  });
});

describe("agent runtime and the model's context window", () => {
  const textSize = (req: ModelRequest) => req.messages.reduce((n: number, m) => n + (typeof m.content === "string" ? m.content.length : 0), 0);

  it("a chat whose history outgrew the model's context window (400 context_length_exceeded) is answered from its most recent messages, not failed for good", async () => {
    h = await startHarness({ responder: withContextWindow(8_000) });
    const entry = await h.app.sessions.upsert(MAIN, "main");
    const ref = { path: h.app.sessions.transcriptPath(entry), sessionId: entry.sessionId, key: entry.key };
    for (let i = 0; i < 20; i++) await h.app.transcripts.appendMessage(ref, { role: "user", content: `old ${i} ${"x".repeat(1_000)}`, timestamp: i });
    expect(await h.app.runtime.start({ sessionKey: MAIN, agentId: "main", message: "new question" }).done).toMatchObject({ status: "ok", reply: "echo: new question" });
    const answered = h.model.requests.at(-1)!;
    expect(textSize(answered)).toBeLessThanOrEqual(8_000);
    expect(answered.messages.at(-1)).toEqual({ role: "user", content: "new question" });
    // What is dropped is the oldest: the conversation just before the new message is still there.
    expect(JSON.stringify(answered.messages)).toContain("old 19 ");
    expect(JSON.stringify(answered.messages)).not.toContain("old 0 ");
  });

  it("a tool result that overflows the context window mid-run: the model is asked again with less earlier conversation, this run's tool call and result kept", async () => {
    h = await startHarness({
      responder: withContextWindow(8_000, (req) => (req.messages.at(-1)?.role === "user" ? { toolCalls: [{ name: "big", arguments: {} }] } : { content: "summarised" })),
      plugins: [(d) => d.app.addTools([tool("big", async () => ({ status: "ok", text: "z".repeat(4_000) }))])],
    });
    const entry = await h.app.sessions.upsert(MAIN, "main");
    const ref = { path: h.app.sessions.transcriptPath(entry), sessionId: entry.sessionId, key: entry.key };
    for (let i = 0; i < 5; i++) await h.app.transcripts.appendMessage(ref, { role: "user", content: `old ${i} ${"x".repeat(1_000)}`, timestamp: i });
    expect(await h.app.runtime.start({ sessionKey: MAIN, agentId: "main", message: "fetch it" }).done).toMatchObject({ status: "ok", reply: "summarised" });
    const last = h.model.requests.at(-1)!;
    expect(last.messages.slice(-3).map((m) => m.role)).toEqual(["user", "assistant", "tool"]);
    expect(last.messages.at(-3)).toEqual({ role: "user", content: "fetch it" });
    expect(last.messages.at(-2).tool_calls[0].id).toBe(last.messages.at(-1).tool_call_id);
    expect(last.messages.filter((m) => m.role === "system")).toHaveLength(1);
  });

  it("interfaces §2 models[].contextWindow: the history sent is trimmed to fit before the request, so the model never gets one over its window", async () => {
    // A server whose window is 24,000 characters (about 6,000 tokens), declared as such in the config.
    const small = new FakeModelServer(withContextWindow(24_000));
    const baseUrl = await small.start();
    try {
      h = await startHarness({ config: { models: { providers: { small: { baseUrl, models: [{ id: "m", contextWindow: 6_000 }] } } }, agents: { defaults: { model: "small/m" } } } });
      const entry = await h.app.sessions.upsert(MAIN, "main");
      const ref = { path: h.app.sessions.transcriptPath(entry), sessionId: entry.sessionId, key: entry.key };
      for (let i = 0; i < 40; i++) await h.app.transcripts.appendMessage(ref, { role: "user", content: `old ${i} ${"x".repeat(1_000)}`, timestamp: i });
      expect(await h.app.runtime.start({ sessionKey: MAIN, agentId: "main", message: "new question" }).done).toMatchObject({ status: "ok", reply: "echo: new question" });
      expect(small.requests).toHaveLength(1);
      const [sent] = small.requests;
      expect(textSize(sent)).toBeLessThanOrEqual(24_000);
      expect(sent.messages.at(-1)).toEqual({ role: "user", content: "new question" });
      expect(JSON.stringify(sent.messages)).toContain("old 39 ");
      expect(JSON.stringify(sent.messages)).not.toContain("old 0 ");
      // The transcript keeps everything.
      expect(await messagesOf(h.app, MAIN)).toHaveLength(42);
    } finally {
      await h?.stop();
      h = undefined;
      await small.stop();
    }
  });

  it("interfaces §2 models[].contextWindow: the system prompt counts against the window too, so a long one leaves less history and the request still fits", async () => {
    const small = new FakeModelServer(withContextWindow(24_000));
    const baseUrl = await small.start();
    try {
      h = await startHarness({
        config: {
          models: { providers: { small: { baseUrl, models: [{ id: "m", contextWindow: 6_000 }] } } },
          agents: { defaults: { model: "small/m" }, list: [{ id: "main", default: true, systemPrompt: `Be brief. ${"s".repeat(12_000)}` }] },
        },
      });
      const entry = await h.app.sessions.upsert(MAIN, "main");
      const ref = { path: h.app.sessions.transcriptPath(entry), sessionId: entry.sessionId, key: entry.key };
      for (let i = 0; i < 40; i++) await h.app.transcripts.appendMessage(ref, { role: "user", content: `old ${i} ${"x".repeat(1_000)}`, timestamp: i });
      expect(await h.app.runtime.start({ sessionKey: MAIN, agentId: "main", message: "new question" }).done).toMatchObject({ status: "ok", reply: "echo: new question" });
      // Fitted before it was sent: no request over the window, no retry with less.
      expect(small.requests).toHaveLength(1);
      expect(textSize(small.requests[0])).toBeLessThanOrEqual(24_000);
      expect(small.requests[0].messages.at(-1)).toEqual({ role: "user", content: "new question" });
    } finally {
      await h?.stop();
      h = undefined;
      await small.stop();
    }
  });

  it("a single message too long for the context window fails with a reply saying so, and the chat's next message is answered", async () => {
    h = await startHarness({ responder: withContextWindow(8_000) });
    await h.app.runtime.start({ sessionKey: MAIN, agentId: "main", message: "hello" }).done;
    const huge = await h.app.runtime.start({ sessionKey: MAIN, agentId: "main", message: "y".repeat(20_000) }).done;
    expect(huge).toMatchObject({ status: "error", error: expect.stringMatching(/^the message does not fit the model's context window, even without the earlier conversation — model call failed \(fake\/m, HTTP 400\): 400 This model's maximum context length is 2000 tokens/) });
    expect(await h.app.runtime.start({ sessionKey: MAIN, agentId: "main", message: "short one" }).done).toMatchObject({ status: "ok", reply: "echo: short one" });
    // The conversation since the long message still reaches the model.
    expect(await h.app.runtime.start({ sessionKey: MAIN, agentId: "main", message: "and now?" }).done).toMatchObject({ status: "ok", reply: "echo: and now?" });
    expect(JSON.stringify(h.model.requests.at(-1)!.messages)).toContain("echo: short one");
  });
});

describe("agent runtime and malformed tool calls", () => {
  it.each([
    { what: "arguments that are not JSON", args: '{"limit": 2' },
    { what: "empty arguments", args: "" },
  ])("a tool call with $what does not break the run or the session on a server that parses the history's arguments (llama.cpp)", async ({ args }) => {
    const model = new FakeModelServer(
      (req, i) => (lastUserText(req) === "call it" && req.messages.at(-1)?.role === "user" ? { toolCalls: [{ name: "count", arguments: args }] } : req.messages.at(-1)?.role === "tool" ? { content: "tried" } : echoLastUser(req, i)),
      { parsesToolArguments: true },
    );
    try {
      h = await startHarness({ model, plugins: [(d) => d.app.addTools([tool("count", async () => ({ status: "ok" }))])] });
      expect(await h.app.runtime.start({ sessionKey: MAIN, agentId: "main", message: "call it" }).done).toMatchObject({ status: "ok", reply: "tried" });
      expect(await h.app.runtime.start({ sessionKey: MAIN, agentId: "main", message: "next" }).done).toMatchObject({ status: "ok", reply: "echo: next" });
      // The call is still recorded as made, with its error result.
      const results = (await messagesOf(h.app, MAIN)).flatMap((m) => (m.role === "toolResult" ? [m.isError] : []));
      expect(results).toEqual([args === "" ? false : true]);
    } finally {
      await h?.stop();
      h = undefined;
      await model.stop();
    }
  });
});

describe("agent runtime and reasoning models", () => {
  it.each([
    { server: "Ollama / LM Studio (DeepSeek-R1, Qwen3): a <think> block in content", content: "<think>\nThe user greets me. secret plan\n</think>\n\nHello there!" },
    { server: "vLLM without a reasoning parser (the template opened <think>): only </think> in content", content: "The user greets me. secret plan\n</think>\n\nHello there!" },
    { server: "DeepSeek / llama.cpp: reasoning_content beside content", content: "Hello there!", messageExtra: { reasoning_content: "The user greets me. secret plan" } },
  ])("the model's reasoning never reaches the chat or the next call's history — $server", async ({ content, messageExtra }) => {
    h = await startHarness({ responder: (req, i) => (lastUserText(req) === "hi" ? { content, messageExtra } : echoLastUser(req, i)) });
    expect(await h.app.runtime.start({ sessionKey: MAIN, agentId: "main", message: "hi" }).done).toMatchObject({ status: "ok", reply: "Hello there!" });
    await h.app.runtime.start({ sessionKey: MAIN, agentId: "main", message: "again" }).done;
    expect(JSON.stringify(h.model.requests[1].messages)).not.toContain("secret plan");
    expect(JSON.stringify(await messagesOf(h.app, MAIN))).not.toContain("secret plan");
  });

  it("content as an array of parts (Mistral's Magistral: a thinking part, then text parts) is answered with its text parts", async () => {
    const content = [{ type: "thinking", thinking: [{ type: "text", text: "secret plan" }] }, { type: "text", text: "Hello " }, { type: "text", text: "there!" }];
    h = await startHarness({ responder: (req, i) => (lastUserText(req) === "hi" ? { content: "", messageExtra: { content } } : echoLastUser(req, i)) });
    expect(await h.app.runtime.start({ sessionKey: MAIN, agentId: "main", message: "hi" }).done).toMatchObject({ status: "ok", reply: "Hello there!" });
    await h.app.runtime.start({ sessionKey: MAIN, agentId: "main", message: "again" }).done;
    expect(h.model.requests[1].messages.slice(-2)).toEqual([{ role: "assistant", content: "Hello there!" }, { role: "user", content: "again" }]);
  });

  it("a reply cut off while the model was still thinking (an unclosed <think>, finish_reason length) is an error saying so, not its thoughts", async () => {
    h = await startHarness({ responder: () => ({ content: "<think>\nLet me weigh secret plan", finishReason: "length" }) });
    const outcome = await h.app.runtime.start({ sessionKey: MAIN, agentId: "main", message: "hi" }).done;
    expect(outcome).toMatchObject({ status: "error", error: expect.stringContaining('finish_reason "length"') });
    expect(JSON.stringify(outcome)).not.toContain("secret plan");
  });
});

describe("agent runtime limits", () => {
  it("agents.defaults.runTimeoutSeconds ends a run whose model never answers, and the session remembers the aborted run", async () => {
    h = await startHarness({ config: { agents: { defaults: { runTimeoutSeconds: 0.2 } } }, responder: () => ({ content: "late", delayMs: 60_000 }) });
    const run = h.app.runtime.start({ sessionKey: MAIN, agentId: "main", message: "hi" });
    expect(await run.done).toMatchObject({ status: "timeout", error: "run timed out after 200 ms" });
    expect(h.app.sessions.get(MAIN)?.abortedLastRun).toBe(true);
  });

  it("runTimeoutSeconds: 0 means no time limit, not a run timed out at once", async () => {
    h = await startHarness({ config: { agents: { defaults: { runTimeoutSeconds: 0 } } } });
    expect(await h.app.runtime.start({ sessionKey: MAIN, agentId: "main", message: "unhurried" }).done).toMatchObject({ status: "ok", reply: "echo: unhurried" });
  });

  it("R18 maxToolRounds stops a model that keeps calling tools after exactly that many model calls; the run ends as an error (also for agent.wait) with the tokens it spent", async () => {
    let executed = 0;
    h = await startHarness({
      config: { agents: { defaults: { maxToolRounds: 3 } } },
      responder: () => ({ toolCalls: [{ name: "count", arguments: {} }], usage: { prompt_tokens: 5, completion_tokens: 1 } }),
      plugins: [(d) => d.app.addTools([tool("count", async () => ({ status: "ok", n: ++executed }))])],
    });
    const run = h.app.runtime.start({ sessionKey: MAIN, agentId: "main", message: "loop" });
    expect(await run.done).toMatchObject({ status: "error", error: "run stopped after 3 tool rounds (agents.defaults.maxToolRounds)", usage: { input: 15, output: 3 } });
    // agent.wait must tell a failed run from one that ran out of time.
    expect(await h.app.runtime.wait(run.runId, 0)).toMatchObject({ status: "error", error: "run stopped after 3 tool rounds (agents.defaults.maxToolRounds)" });
    expect(h.model.requests).toHaveLength(3);
    expect(executed).toBe(3);
  });

  it("an abort during a tool call runs none of the round's remaining tools", async () => {
    let release!: () => void;
    const held = new Promise<void>((r) => (release = r));
    let entered!: () => void;
    const inFirstTool = new Promise<void>((r) => (entered = r));
    const ran: string[] = [];
    h = await startHarness({
      responder: (_req, i) => (i === 0 ? { toolCalls: [{ name: "hold", arguments: {} }, { name: "count", arguments: {} }] } : { content: "done" }),
      plugins: [
        (d) =>
          d.app.addTools([
            // Ignores the run's signal, like a tool that cannot be interrupted.
            tool("hold", async () => (ran.push("hold"), entered(), await held, { status: "ok" })),
            tool("count", async () => (ran.push("count"), { status: "ok" })),
          ]),
      ],
    });
    const run = h.app.runtime.start({ sessionKey: MAIN, agentId: "main", message: "two tools" });
    await inFirstTool;
    expect(h.app.runtime.abort(run.runId, "stopped by /stop")).toBe(true);
    release();
    expect(await run.done).toMatchObject({ status: "timeout", error: "run aborted: stopped by /stop" });
    expect(ran).toEqual(["hold"]);
    expect(h.model.requests).toHaveLength(1);
  });

  it("a queued run aborted before its turn leaves no trace in the session for the next run's model", async () => {
    const held = await holdingFirst();
    h = held.harness;
    const { release } = held;
    const rt = h.app.runtime;
    const first = rt.start({ sessionKey: MAIN, agentId: "main", message: "first" });
    const second = rt.start({ sessionKey: MAIN, agentId: "main", message: "cancelled" });
    await h.model.waitForRequests(1);
    rt.abort(second.runId, "stopped by /stop");
    release();
    expect(await first.done).toMatchObject({ status: "ok" });
    expect(await second.done).toMatchObject({ status: "timeout", error: "run aborted: stopped by /stop" });
    await rt.start({ sessionKey: MAIN, agentId: "main", message: "third" }).done;
    expect(JSON.stringify(h.model.requests)).not.toContain("cancelled");
  });

  it("starting a run again with the runId of a run in flight returns that run instead of a second model call", async () => {
    h = await startHarness();
    const a = h.app.runtime.start({ sessionKey: MAIN, agentId: "main", message: "once", runId: "run-1" });
    const b = h.app.runtime.start({ sessionKey: MAIN, agentId: "main", message: "once", runId: "run-1" });
    expect(b.done).toBe(a.done);
    expect(await a.done).toMatchObject({ status: "ok", reply: "echo: once" });
    expect(h.model.requests).toHaveLength(1);
  });

  it("token usage adds up over a run's model calls and over the session's runs; a good run clears abortedLastRun", async () => {
    h = await startHarness({
      responder: (req) => (req.messages.at(-1)?.role === "user" ? { toolCalls: [{ name: "count", arguments: {} }], usage: { prompt_tokens: 10, completion_tokens: 1 } } : { content: "ok", usage: { prompt_tokens: 20, completion_tokens: 2 } }),
      plugins: [(d) => d.app.addTools([tool("count", async () => ({ status: "ok" }))])],
    });
    await h.app.sessions.upsert(MAIN, "main", { abortedLastRun: true });
    const first = await h.app.runtime.start({ sessionKey: MAIN, agentId: "main", message: "one" }).done;
    expect(first.usage).toEqual({ input: 30, output: 3 });
    await h.app.runtime.start({ sessionKey: MAIN, agentId: "main", message: "two" }).done;
    expect(h.app.sessions.get(MAIN)).toMatchObject({ inputTokens: 60, outputTokens: 6, totalTokens: 66, contextTokens: 20, lastModel: "fake/m", systemSent: true, abortedLastRun: false });
  });

  it("drain aborts the runs still in flight when its wait runs out", async () => {
    h = await startHarness({ responder: () => ({ content: "late", delayMs: 60_000 }) });
    const run = h.app.runtime.start({ sessionKey: MAIN, agentId: "main", message: "slow" });
    await h.model.waitForRequests(1);
    await h.app.runtime.drain(0);
    expect(await run.done).toMatchObject({ status: "timeout", error: "run aborted: daemon shutting down" });
    expect(() => h!.app.runtime.start({ sessionKey: MAIN, agentId: "main", message: "too late" })).toThrow("daemon is shutting down; run not accepted");
    expect(h.model.requests).toHaveLength(1);
  });

  it("tool answers with status forbidden or error, and a tool that throws, are recorded as error results; the run goes on", async () => {
    const names = ["deny", "fail", "throws", "fine"];
    h = await startHarness({
      responder: (req) => (req.messages.at(-1)?.role === "user" ? { toolCalls: names.map((name) => ({ name, arguments: {} })) } : { content: "  all done \n" }),
      plugins: [
        (d) =>
          d.app.addTools([
            tool("deny", async () => ({ status: "forbidden" })),
            tool("fail", async () => ({ status: "error", error: "x" })),
            tool("throws", async () => {
              throw new Error("disk full");
            }),
            tool("fine", async () => ({ status: "ok" })),
          ]),
      ],
    });
    // The reply is trimmed: a model's trailing newline must not become an empty chat line.
    expect(await h.app.runtime.start({ sessionKey: MAIN, agentId: "main", message: "four tools" }).done).toMatchObject({ status: "ok", reply: "all done" });
    const results = (await messagesOf(h.app, MAIN)).flatMap((m) => (m.role === "toolResult" ? [[m.toolName, m.isError, m.content[0].text]] : []));
    expect(results).toEqual([
      ["deny", true, '{"status":"forbidden"}'],
      ["fail", true, '{"status":"error","error":"x"}'],
      ["throws", true, '{"status":"error","error":"throws failed: disk full"}'],
      ["fine", false, '{"status":"ok"}'],
    ]);
  });

  it("R18 a run that just ended stays answerable by agent.wait after the minute's sweep of old completions", async () => {
    // Only setInterval is faked (the sweep's clock); sockets and timeouts run for real.
    vi.useFakeTimers({ toFake: ["setInterval", "clearInterval"] });
    try {
      h = await startHarness();
      const run = h.app.runtime.start({ sessionKey: MAIN, agentId: "main", message: "remember me" });
      await run.done;
      vi.advanceTimersByTime(60_000);
      expect(await h.app.runtime.wait(run.runId, 0)).toMatchObject({ runId: run.runId, status: "ok" });
    } finally {
      vi.useRealTimers();
    }
  });

  it("R18 a run that ended longer ago than completions are kept (15 minutes, on the monotonic clock) is forgotten: agent.wait says unknown", async () => {
    // The sweep's interval and the monotonic clock it measures with, faked; sockets run for real.
    vi.useFakeTimers({ toFake: ["setInterval", "clearInterval", "performance"] });
    try {
      h = await startHarness();
      const run = h.app.runtime.start({ sessionKey: MAIN, agentId: "main", message: "forget me" });
      await run.done;
      vi.advanceTimersByTime(14 * 60_000);
      expect(await h.app.runtime.wait(run.runId, 0)).toMatchObject({ runId: run.runId, status: "ok" });
      vi.advanceTimersByTime(2 * 60_000);
      expect(await h.app.runtime.wait(run.runId, 0)).toEqual({ runId: run.runId, status: "timeout", unknown: true });
    } finally {
      vi.useRealTimers();
    }
  });

  it("a wait whose waiter is already gone (its gateway connection closed before the wait began) ends at once, holding no listener", async () => {
    h = await startHarness();
    const { events } = h.app.runtime;
    const before = events.listenerCount("run");
    const gone = new AbortController();
    gone.abort();
    const waiting = h.app.runtime.wait("never-started", 24 * 3600_000, gone.signal);
    expect(events.listenerCount("run")).toBe(before);
    expect(await waiting).toEqual({ runId: "never-started", status: "timeout", unknown: true });
  });

  it("R18 a run that just ended stays known after the wall clock jumps forward by hours: agent.wait answers, and a repeated agent call with its idempotencyKey does not run it again", async () => {
    // Only setInterval is faked (the sweep's clock); the wall clock is moved by hand.
    vi.useFakeTimers({ toFake: ["setInterval", "clearInterval"] });
    const realNow = Date.now.bind(Date);
    const jumped = vi.spyOn(Date, "now");
    try {
      h = await startHarness();
      const c = await h.client();
      const first = await c.request("agent", { message: "once", idempotencyKey: "before-the-jump" }, { expectFinal: true });
      expect(first).toMatchObject({ status: "ok", result: { reply: "echo: once" } });
      jumped.mockImplementation(() => realNow() + 3 * 3600_000);
      vi.advanceTimersByTime(60_000);
      expect(await h.app.runtime.wait("before-the-jump", 0)).toMatchObject({ runId: "before-the-jump", status: "ok" });
      const repeat = await c.request("agent", { message: "once", idempotencyKey: "before-the-jump" }, { expectFinal: true });
      expect(repeat).toMatchObject({ status: "ok", result: { reply: "echo: once" } });
      expect(h.model.requests).toHaveLength(1);
    } finally {
      jumped.mockRestore();
      vi.useRealTimers();
    }
  });

  it("the model is offered the tools, and its next call sees its tool calls followed by their results", async () => {
    h = await startHarness({
      responder: (req) => (req.messages.at(-1)?.role === "user" ? { toolCalls: [{ name: "count", arguments: { n: 1 } }] } : { content: "counted" }),
      plugins: [(d) => d.app.addTools([tool("count", async () => ({ status: "ok", n: 1 }))])],
    });
    expect(await h.app.runtime.start({ sessionKey: MAIN, agentId: "main", message: "count once" }).done).toMatchObject({ status: "ok", reply: "counted" });
    const [first, second] = h.model.requests;
    expect(first.tools?.map((t) => t.function.name)).toContain("count");
    expect(first.tool_choice).toBe("auto");
    // OpenAI refuses a tool message whose call is not in the assistant turn right before it.
    expect(second.messages.slice(-2)).toEqual([
      { role: "assistant", content: null, tool_calls: [{ id: "call_0_0", type: "function", function: { name: "count", arguments: '{"n":1}' } }] },
      { role: "tool", tool_call_id: "call_0_0", content: '{"status":"ok","n":1}' },
    ]);
  });

  it("a call to an unknown tool, or with arguments that are not JSON, runs nothing and is recorded as an error result", async () => {
    let ran = 0;
    h = await startHarness({
      responder: (req) => (req.messages.at(-1)?.role === "user" ? { toolCalls: [{ name: "nosuch", arguments: {} }, { name: "count", arguments: "{not json" }] } : { content: "done" }),
      plugins: [(d) => d.app.addTools([tool("count", async () => (ran++, { status: "ok" }))])],
    });
    expect(await h.app.runtime.start({ sessionKey: MAIN, agentId: "main", message: "bad calls" }).done).toMatchObject({ status: "ok", reply: "done" });
    expect(ran).toBe(0);
    const results = (await messagesOf(h.app, MAIN)).flatMap((m) => (m.role === "toolResult" ? [[m.toolName, m.isError, m.content[0].text]] : []));
    expect(results).toEqual([
      ["nosuch", true, '{"status":"error","error":"unknown tool: nosuch"}'],
      ["count", true, '{"status":"error","error":"invalid JSON arguments for count"}'],
    ]);
  });

  it("a run's own model reference wins over the session's model", async () => {
    const model = new FakeModelServer();
    const baseUrl = await model.start();
    try {
      h = await startHarness({ model, config: { models: { providers: { alt: { baseUrl, models: [{ id: "other" }] } } } } });
      await h.app.sessions.upsert(MAIN, "main", { model: "alt/other" });
      expect(await h.app.runtime.start({ sessionKey: MAIN, agentId: "main", message: "hi", model: "fake/m" }).done).toMatchObject({ status: "ok", model: "fake/m" });
      expect(await h.app.runtime.start({ sessionKey: MAIN, agentId: "main", message: "hi again" }).done).toMatchObject({ status: "ok", model: "alt/other" });
      expect(model.requests.map((r) => r.model)).toEqual(["m", "other"]);
    } finally {
      await h?.stop();
      h = undefined;
      await model.stop();
    }
  });

  it.each([
    { lane: "main" as const, defaults: { maxConcurrent: 1 } },
    { lane: "subagent" as const, defaults: { maxConcurrent: 4, subagents: { maxConcurrent: 1 } } },
  ])("the $lane lane's concurrency bound holds across sessions: another session's run waits for a free slot", async ({ lane, defaults }) => {
    const held = await holding(["first"], { agents: { defaults } });
    h = held.harness;
    const first = h.app.runtime.start({ sessionKey: MAIN, agentId: "main", message: "first", lane });
    const other = h.app.runtime.start({ sessionKey: "agent:main:telegram:group:-7", agentId: "main", message: "other", lane });
    try {
      // A free slot would have started the other run within microtasks of start(), long before the first run's request crossed the socket.
      await h.model.waitForRequests(1);
      expect(other.info.status).toBe("queued");
    } finally {
      held.release();
    }
    expect(await other.done).toMatchObject({ status: "ok", reply: "echo: other" });
    expect(other.info.startedAt).toBeGreaterThanOrEqual(first.info.endedAt!);
  });

  it("/stop on a run waiting for a free slot (another session's run holds the only one) ends it at once, not once the slot frees", async () => {
    const held = await holding(["first"], { agents: { defaults: { maxConcurrent: 1 } } });
    h = held.harness;
    const first = h.app.runtime.start({ sessionKey: MAIN, agentId: "main", message: "first" });
    const waiting = h.app.runtime.start({ sessionKey: "agent:main:telegram:group:-7", agentId: "main", message: "waiting" });
    try {
      await h.model.waitForRequests(1);
      h.app.runtime.abortSession("agent:main:telegram:group:-7");
      expect(await waiting.done).toMatchObject({ status: "timeout", error: "run aborted: aborted by /stop" });
      expect(first.info.status).toBe("running");
    } finally {
      held.release();
    }
    expect(await first.done).toMatchObject({ status: "ok", reply: "echo: first" });
    expect(h.model.requests.map(lastUserText)).toEqual(["first"]);
  });
});
