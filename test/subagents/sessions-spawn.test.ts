/**
 * sessions_spawn and the sub-agent announce end to end (R31–R41, /stop): spawned from a Telegram
 * group, the child runs in its own session; its announce lands in that group through the outbox.
 */
import { randomUUID } from "node:crypto";
import { existsSync, readdirSync } from "node:fs";
import path from "node:path";
import { afterEach, describe, expect, it, vi } from "vitest";
import { formatDuration } from "../../src/agents/subagents/announce.js";
import { ANNOUNCE_STEP_TIMEOUT_MS } from "../../src/agents/subagents/registry.js";
import type { ConfigInput } from "../../src/config/schema.js";
import type { AgentTool } from "../../src/tools/types.js";
import { FakeModelServer, type ModelReply, type ModelRequest } from "../fakes/model-server.js";
import { inbound, startHarness, type Harness } from "../helpers/harness.js";
import { RecordingAdapter } from "../helpers/recording-adapter.js";
import { call, callViaGateway, callViaTelegram, crossDeadline, features, lastToolResult, lastUserText, messagesOf, outsideRun, sessionOf, settle, stepOf, systemOf, toolDriver, type Step } from "../helpers/tool-driver.js";

const GROUP_PEER = "-100777";
const REQ = `agent:main:telegram:group:${GROUP_PEER}`;
const OWNER = "1001";

let h: Harness | undefined;
let telegram: RecordingAdapter;
let script: ((req: ModelRequest, step: Step) => ModelReply | undefined | Promise<ModelReply | undefined>) | undefined;
let bigModel: FakeModelServer | undefined;

afterEach(async () => {
  await h?.stop();
  h = undefined;
  script = undefined;
  await bigModel?.stop();
  bigModel = undefined;
});

/**
 * A second provider, "big/m", ten times dearer than fake/m and answering from the same script:
 * which server a request reaches tells which model a run used.
 */
async function bigProvider(): Promise<NonNullable<ConfigInput["models"]>> {
  bigModel = new FakeModelServer(toolDriver((req, step) => script?.(req, step)));
  return { providers: { big: { baseUrl: await bigModel.start(), models: [{ id: "m", cost: { input: 10, output: 20 } }] } } };
}

/** A plain tool from another source: sub-agents keep it (R34). */
const echoTool: AgentTool = {
  name: "echo_tool",
  description: "Echo the text back.",
  parameters: { type: "object", properties: { text: { type: "string" } } },
  async execute(args) {
    return { echoed: (args as { text?: string }).text ?? "" };
  },
};

const AGENTS = {
  list: [
    { id: "main", default: true, name: "Main", subagents: { allowAgents: ["beta"] } },
    { id: "beta", name: "Beta" },
    { id: "gamma" },
    { id: "delta", subagents: { allowAgents: ["*"] } },
  ],
};

async function boot(config: ConfigInput = {}): Promise<Harness> {
  telegram = new RecordingAdapter("telegram");
  h = await startHarness({
    store: "memory",
    config: { agents: AGENTS, commands: { owners: [`telegram:${OWNER}`] }, ...config },
    adapters: [telegram],
    plugins: [(d) => d.app.addTools([echoTool])],
    responder: toolDriver((req, step) => script?.(req, step)),
  });
  return h;
}

async function spawn(args: Record<string, unknown>, chat: { threadId?: string } = {}) {
  return (await callViaTelegram(h!, { peerId: GROUP_PEER, ...chat }, "sessions_spawn", args)).result;
}

const announcesIn = (to: string) => telegram.textsTo(to).filter((t) => t.startsWith("Status:"));
const requestsOf = (step: Step) => h!.model.requests.filter((r) => stepOf(r) === step);

describe("sessions_spawn", () => {
  it("R33 R36 returns {status: accepted, runId, childSessionKey} at once; agent:<id>:subagent:<uuid>, spawnedBy recorded, lane subagent, Subagent context", async () => {
    await boot();
    script = (_req, step) => (step === "subagent" ? { delayMs: 300, content: "child result" } : step === "subagent-announce" ? { content: "Result: child result" } : undefined);
    const result = await spawn({ task: "count the files", label: "counter" });
    expect(result).toEqual({ status: "accepted", runId: expect.any(String), childSessionKey: expect.stringMatching(/^agent:main:subagent:[0-9a-f-]{36}$/) });
    const returnedAt = (await messagesOf(h!.app, REQ)).filter((m) => m.role === "toolResult").at(-1)!.timestamp;
    await vi.waitFor(() => expect(h!.app.runtime.get(result.runId)?.status).toBe("ok"));
    expect(h!.app.runtime.get(result.runId)).toMatchObject({ sessionKey: result.childSessionKey, lane: "subagent" });
    expect(h!.app.runtime.get(result.runId)!.endedAt!).toBeGreaterThan(returnedAt);
    expect(h!.app.sessions.get(result.childSessionKey)).toMatchObject({ spawnedBy: REQ, label: "counter", agentId: "main" });
    const [child] = requestsOf("subagent");
    expect(sessionOf(child)).toBe(result.childSessionKey);
    expect(systemOf(child)).toContain(`\n\nSubagent context:\n`);
    expect(systemOf(child)).toContain("Task: count the files");
    const task = (await messagesOf(h!.app, result.childSessionKey))[0];
    expect(task).toMatchObject({ role: "user", content: "count the files", provenance: { kind: "inter_session", sourceSessionKey: REQ, sourceTool: "sessions_spawn" } });
    await settle(h!);
    // deliver: false — the child's own reply is never sent; only the announce is.
    expect(telegram.sent.map((m) => m.text)).not.toContain("child result");
  });

  it("R34 R35 sub-agents get every tool but the session tools, and cannot spawn", async () => {
    await boot();
    script = (_req, step) => (step === "subagent-announce" ? { content: "ANNOUNCE_SKIP" } : undefined);
    const result = await spawn({ task: call("sessions_spawn", { task: "nested" }) });
    await settle(h!);
    const [child] = requestsOf("subagent");
    expect(child.tools?.map((t: any) => t.function.name)).toEqual(["echo_tool"]);
    const requesterTools = h!.model.requests.find((r) => sessionOf(r) === REQ)?.tools?.map((t: any) => t.function.name);
    expect(requesterTools).toEqual(expect.arrayContaining(["echo_tool", "sessions_list", "sessions_history", "sessions_send", "sessions_spawn", "agents_list"]));
    expect(await lastToolResult(h!.app, result.childSessionKey)).toEqual({ status: "error", error: "unknown tool: sessions_spawn" });
    // The tool's own hard check, whatever the tool set: a sub-agent requester is refused.
    const spawnTool = h!.app.toolsFor({ sessionKey: REQ, agentId: "main" }).find((t) => t.name === "sessions_spawn")!;
    const forbidden = await spawnTool.execute({ task: "nested" }, outsideRun({ sessionKey: result.childSessionKey, agentId: "main", runId: "r" }));
    expect(forbidden).toEqual({ status: "forbidden", error: "sessions_spawn is not allowed from sub-agent sessions" });
    expect(h!.app.sessions.list({ where: (e) => e.spawnedBy === result.childSessionKey })).toEqual([]);
  });

  it("R34 tools.subagents.tools: allow admits a session tool (never sessions_spawn); deny removes any tool", async () => {
    await boot({ tools: { subagents: { tools: { allow: ["sessions_list", "sessions_spawn", "echo_tool"], deny: ["echo_tool"] } } } });
    const names = h!.app.toolsFor({ sessionKey: "agent:main:subagent:0000", agentId: "main" }).map((t) => t.name);
    expect(names).toEqual(["sessions_list"]);
  });

  it("R31 agentId needs the requester's allowAgents (default: only itself); [\"*\"] allows any", async () => {
    await boot();
    script = (_req, step) => (step === "subagent-announce" ? { content: "ANNOUNCE_SKIP" } : undefined);
    const beta = await spawn({ task: "t", agentId: "Beta" });
    expect(beta).toMatchObject({ status: "accepted", childSessionKey: expect.stringMatching(/^agent:beta:subagent:/) });
    expect(await spawn({ task: "t", agentId: "gamma" })).toEqual({ status: "forbidden", error: "agentId is not allowed for sessions_spawn (allowed: beta)" });
    expect(await callViaGateway(h!, "agent:gamma:main", "sessions_spawn", { task: "t", agentId: "main" })).toEqual({ status: "forbidden", error: "agentId is not allowed for sessions_spawn (allowed: none)" });
    expect(await callViaGateway(h!, "agent:gamma:main", "sessions_spawn", { task: "t" })).toMatchObject({ status: "accepted", childSessionKey: expect.stringMatching(/^agent:gamma:subagent:/) });
    expect(await callViaGateway(h!, "agent:delta:main", "sessions_spawn", { task: "t", agentId: "gamma" })).toMatchObject({ status: "accepted", childSessionKey: expect.stringMatching(/^agent:gamma:subagent:/) });
    await settle(h!);
  });

  it("R31 agentId is normalised like every agent id: \"Research Team\" names research-team", async () => {
    await boot({ agents: { list: [{ id: "main", default: true, subagents: { allowAgents: ["research-team"] } }, { id: "research-team" }] } });
    script = (_req, step) => (step === "subagent-announce" ? { content: "ANNOUNCE_SKIP" } : undefined);
    expect(await spawn({ task: "t", agentId: "Research Team" })).toMatchObject({ status: "accepted", childSessionKey: expect.stringMatching(/^agent:research-team:subagent:/) });
    await settle(h!);
  });

  it("R32 agents_list names the allowed agent ids, requester first", async () => {
    await boot();
    expect(await callViaGateway(h!, "main", "agents_list")).toEqual({
      requester: "main",
      allowAny: false,
      agents: [
        { id: "main", name: "Main", configured: true },
        { id: "beta", name: "Beta", configured: true },
      ],
    });
    const any = await callViaGateway(h!, "agent:delta:main", "agents_list");
    expect(any).toMatchObject({ requester: "delta", allowAny: true });
    expect(any.agents.map((a: any) => a.id)).toEqual(["delta", "beta", "gamma", "main"]);
  });

  it("model override: a valid model is used for the child; an invalid one is an error result", async () => {
    await boot();
    script = (_req, step) => (step === "subagent-announce" ? { content: "ANNOUNCE_SKIP" } : undefined);
    expect(await spawn({ task: "t", model: "fake/nope" })).toEqual({ status: "error", error: 'invalid model "fake/nope": provider "fake" lists m' });
    const ok = await spawn({ task: "t", model: "fake/m" });
    expect(ok).toMatchObject({ status: "accepted", model: "fake/m" });
    await settle(h!);
    expect(h!.app.sessions.get(ok.childSessionKey)).toMatchObject({ model: "fake/m" });
  });

  it("model: without a model parameter the target agent's subagents.model is used", async () => {
    await boot({ agents: { ...AGENTS, list: AGENTS.list.map((a) => (a.id === "beta" ? { ...a, subagents: { model: "fake/m" } } : a)) } });
    script = (_req, step) => (step === "subagent-announce" ? { content: "ANNOUNCE_SKIP" } : undefined);
    const result = await spawn({ task: "t", agentId: "beta" });
    expect(result).toMatchObject({ status: "accepted", model: "fake/m" });
    await settle(h!);
    expect(h!.app.sessions.get(result.childSessionKey)).toMatchObject({ model: "fake/m" });
  });

  it("model: the model parameter beats the target agent's subagents.model, which beats agents.defaults.subagents.model", async () => {
    const models = await bigProvider();
    await boot({ models, agents: { defaults: { subagents: { model: "big/m" } }, list: AGENTS.list.map((a) => (a.id === "beta" ? { ...a, subagents: { model: "fake/m" } } : a)) } });
    script = (_req, step) => (step === "subagent-announce" ? { content: "ANNOUNCE_SKIP" } : undefined);
    expect(await spawn({ task: "t" })).toMatchObject({ status: "accepted", model: "big/m" });
    // The agent's own setting is found whatever spelling of its id the model used.
    expect(await spawn({ task: "t", agentId: "Beta" })).toMatchObject({ status: "accepted", model: "fake/m" });
    expect(await spawn({ task: "t", agentId: "beta", model: "big/m" })).toMatchObject({ status: "accepted", model: "big/m" });
    await settle(h!);
  });

  it("runTimeoutSeconds 0 sets no limit of its own: the child stays under agents.defaults.runTimeoutSeconds", async () => {
    await boot({ agents: { ...AGENTS, defaults: { runTimeoutSeconds: 1 } } });
    script = (_req, step) => (step === "subagent" ? { delayMs: 5000, content: "too late" } : step === "subagent-announce" ? { content: "Result: cut off" } : undefined);
    const result = await spawn({ task: "slow", runTimeoutSeconds: 0 });
    await settle(h!);
    expect(h!.app.runtime.get(result.runId)).toMatchObject({ status: "timeout", error: expect.stringContaining("timed out after") });
  });

  it("a runTimeoutSeconds past the timer range (a model's \"no limit\") does not abort the child at once", async () => {
    await boot();
    script = (_req, step) => (step === "subagent" ? { delayMs: 200, content: "finished" } : step === "subagent-announce" ? { content: "ANNOUNCE_SKIP" } : undefined);
    const result = await spawn({ task: "t", runTimeoutSeconds: 99_999_999 });
    await settle(h!);
    expect(h!.app.runtime.get(result.runId)).toMatchObject({ status: "ok", reply: "finished" });
  });

  it("agents.defaults.subagents.maxConcurrent bounds the sub-agent lane: with 1, the second child starts only once the first has ended", async () => {
    await boot({ agents: { ...AGENTS, defaults: { maxConcurrent: 4, subagents: { maxConcurrent: 1 } } } });
    script = (_req, step) => (step === "subagent" ? { delayMs: 300, content: "done" } : step === "subagent-announce" ? { content: "ANNOUNCE_SKIP" } : undefined);
    const first = await spawn({ task: "first" });
    const second = await spawn({ task: "second" });
    await settle(h!);
    const [a, b] = [h!.app.runtime.get(first.runId)!, h!.app.runtime.get(second.runId)!];
    expect(b.startedAt!).toBeGreaterThanOrEqual(a.endedAt!);
  });

  it("a label already taken — even by an archived session — becomes the child's displayName, so a label names one session", async () => {
    await boot();
    script = (_req, step) => (step === "subagent-announce" ? { content: "ANNOUNCE_SKIP" } : undefined);
    await h!.app.sessions.upsert("agent:main:subagent:old", "main", { spawnedBy: REQ, label: "old", archivedAt: Date.now() });
    const first = await spawn({ task: "t", label: "fresh" });
    const second = await spawn({ task: "t", label: "fresh" });
    const third = await spawn({ task: "t", label: "old" });
    await settle(h!);
    expect(h!.app.sessions.get(first.childSessionKey)).toMatchObject({ label: "fresh" });
    for (const [child, name] of [[second, "fresh"], [third, "old"]] as const) {
      expect(h!.app.sessions.get(child.childSessionKey)).toMatchObject({ displayName: name });
      expect(h!.app.sessions.get(child.childSessionKey)?.label).toBeUndefined();
    }
  });

  it("R40 a run the runtime refuses (shutting down) is an error result and leaves no sub-agent record behind to announce later, nor a child session that no archive would ever hide", async () => {
    await boot();
    const spawnTool = h!.app.toolsFor({ sessionKey: REQ, agentId: "main" }).find((t) => t.name === "sessions_spawn")!;
    await h!.app.runtime.drain(0);
    const result = await spawnTool.execute({ task: "late" }, outsideRun({ sessionKey: REQ, agentId: "main", runId: "r" }));
    expect(result).toEqual({ status: "error", error: "daemon is shutting down; run not accepted", childSessionKey: expect.stringMatching(/^agent:main:subagent:/) });
    expect(features(h!).subagents.spawnedBy(REQ)).toEqual([]);
    expect(h!.app.sessions.list({ spawnedBy: REQ, includeArchived: true })).toEqual([]);
  });
});

describe("sub-agent announce", () => {
  it("R37 R39 R41 the announce lands in the requester's chat (thread included): Status from the outcome, Result, Notes, stats line", async () => {
    await boot();
    script = (_req, step) =>
      step === "subagent" ? { content: "42 files", usage: { prompt_tokens: 1000, completion_tokens: 234 } } : step === "subagent-announce" ? { content: "Status: failed (I think)\nResult: There are 42 files.\nNotes: none" } : undefined;
    const result = await spawn({ task: "count the files" }, { threadId: "9" });
    await settle(h!);
    const announces = telegram.sent.filter((m) => m.text.startsWith("Status:"));
    expect(announces).toHaveLength(1);
    expect(announces[0].target).toEqual({ channel: "telegram", accountId: "default", to: GROUP_PEER, threadId: "9" });
    const child = h!.app.sessions.require(result.childSessionKey);
    const lines = announces[0].text.split("\n");
    expect(lines.slice(0, 3)).toEqual(["Status: ok", "Result: There are 42 files.", "Notes: none"]);
    expect(lines[3]).toMatch(/^Stats: runtime \d+ms • tokens 1\.2k \(in 1k \/ out 234\) • est \$0\.0015 • sessionKey agent:main:subagent:[0-9a-f-]+ • sessionId \S+ • transcript \S+$/);
    expect(lines[3]).toContain(`sessionKey ${result.childSessionKey} • sessionId ${child.sessionId} • transcript ${h!.app.sessions.transcriptPath(child)}`);
    expect(h!.app.outbox.get(`subagent-announce:${result.runId}`)).toMatchObject({ sessionKey: `${REQ}:topic:9`, kind: "announce", state: "sent" });
    const [step] = requestsOf("subagent-announce");
    expect(sessionOf(step)).toBe(result.childSessionKey);
    expect(h!.app.runtime.get(`${result.runId}:announce`)).toMatchObject({ sessionKey: result.childSessionKey, lane: "nested" });
    expect(systemOf(step)).toContain("Subagent announce step:\nYour task run has ended: completed.");
  });

  it("R37 spawned by a run with no chat origin (gateway agent call), the announce goes to the requester session's own chat route", async () => {
    await boot();
    script = (_req, step) => (step === "subagent-announce" ? { content: "Result: via the gateway" } : undefined);
    // A message in the group gives the requester session its chat route.
    await h!.app.router.accept(inbound({ chatType: "group", peerId: GROUP_PEER, to: GROUP_PEER, wasMentioned: true, text: "hello" }));
    await h!.app.router.idle();
    const result = await callViaGateway(h!, REQ, "sessions_spawn", { task: "t" });
    await settle(h!);
    expect(announcesIn(GROUP_PEER).map((t) => t.split("\n")[1])).toEqual(["Result: via the gateway"]);
    expect(h!.app.outbox.get(`subagent-announce:${result.runId}`)).toMatchObject({ sessionKey: REQ, state: "sent" });
  });

  it("R37 spawned from the web chat into a Telegram group's session, the announce goes to the web chat, not to the group", async () => {
    await boot();
    script = (_req, step) => (step === "subagent-announce" ? { content: "Result: for the operator" } : undefined);
    await h!.app.router.accept(inbound({ chatType: "group", peerId: GROUP_PEER, to: GROUP_PEER, wasMentioned: true, text: "hello" }));
    await h!.app.router.idle();
    const admin = await h!.client();
    const { runId } = await admin.request("chat.send", { sessionKey: REQ, message: call("sessions_spawn", { task: "t" }), idempotencyKey: randomUUID() });
    await vi.waitFor(() => expect(h!.app.runtime.get(runId)?.status).toBe("ok"));
    const result = await lastToolResult(h!.app, REQ);
    await settle(h!);
    expect(h!.app.outbox.get(`subagent-announce:${result.runId}`)).toMatchObject({ sessionKey: REQ, target: { channel: "webchat" }, text: expect.stringContaining("Result: for the operator") });
    expect(announcesIn(GROUP_PEER)).toEqual([]);
  });

  it("R37 a requester with no chat route gets no announce: nothing is queued, and the run still counts as announced so no restart retries it", async () => {
    await boot();
    script = (_req, step) => (step === "subagent-announce" ? { content: "Result: nobody to tell" } : undefined);
    const result = await callViaGateway(h!, "agent:main:ops", "sessions_spawn", { task: "t" });
    await settle(h!);
    expect(requestsOf("subagent-announce")).toHaveLength(1);
    expect(h!.app.outbox.get(`subagent-announce:${result.runId}`)).toBeUndefined();
    expect(features(h!).subagents.get(result.runId)).toMatchObject({ announcedAt: expect.any(Number) });
    expect(telegram.sent).toEqual([]);
  });

  it("R37 D4 spawned by a webhook run that delivers to a chat, the announce goes to that chat (the requester's chat at spawn time)", async () => {
    const token = "hook-secret-0123456789";
    await boot({ hooks: { enabled: true, token } });
    script = (_req, step) => (step === "subagent-announce" ? { content: "Result: the build is green" } : undefined);
    const res = await fetch(`${h!.url.replace("ws://", "http://")}hooks/agent`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${token}` },
      body: JSON.stringify({ message: call("sessions_spawn", { task: "check the build" }), deliver: true, channel: "telegram", to: GROUP_PEER }),
    });
    expect(res.status).toBe(202);
    const { sessionKey } = (await res.json()) as { sessionKey: string };
    await settle(h!);
    const spawned = await lastToolResult(h!.app, sessionKey);
    expect(spawned).toMatchObject({ status: "accepted" });
    expect(h!.app.outbox.get(`subagent-announce:${spawned.runId}`)).toMatchObject({ sessionKey, target: { channel: "telegram", to: GROUP_PEER } });
    expect(announcesIn(GROUP_PEER).map((t) => t.split("\n")[1])).toEqual(["Result: the build is green"]);
  });

  it("R37 D4 spawned by a gateway agent call that delivers to an explicit chat, the announce goes to that chat", async () => {
    await boot();
    script = (_req, step) => (step === "subagent-announce" ? { content: "Result: for the chat" } : undefined);
    const client = await h!.client();
    await client.request("agent", { sessionKey: "agent:main:ops", message: call("sessions_spawn", { task: "t" }), deliver: true, channel: "telegram", to: GROUP_PEER, idempotencyKey: randomUUID() }, { expectFinal: true });
    await settle(h!);
    const spawned = await lastToolResult(h!.app, "agent:main:ops");
    expect(h!.app.outbox.get(`subagent-announce:${spawned.runId}`)).toMatchObject({ sessionKey: "agent:main:ops", target: { channel: "telegram", to: GROUP_PEER } });
    expect(announcesIn(GROUP_PEER).map((t) => t.split("\n")[1])).toEqual(["Result: for the chat"]);
  });

  it("R37 a finished child is announced while other children still hold every sub-agent slot", async () => {
    await boot({ agents: { ...AGENTS, defaults: { subagents: { maxConcurrent: 1 } } } });
    const gate = () => {
      let open!: () => void;
      const opened = new Promise<void>((resolve) => (open = resolve));
      return { open, opened };
    };
    const first = gate();
    const second = gate();
    script = async (req, step) => {
      if (step !== "subagent") return step === "subagent-announce" ? { content: "Result: done" } : undefined;
      await (lastUserText(req) === "first" ? first : second).opened;
      return { content: `${lastUserText(req)} done` };
    };
    try {
      const a = await spawn({ task: "first" });
      const b = await spawn({ task: "second" });
      await vi.waitFor(() => expect(h!.app.runtime.get(a.runId)?.status).toBe("running"));
      expect(h!.app.runtime.get(b.runId)?.status).toBe("queued");
      // The first child ends; the second takes the only slot and works on.
      first.open();
      await vi.waitFor(() => expect(h!.app.runtime.get(b.runId)?.status).toBe("running"));
      await vi.waitFor(() => expect(h!.app.outbox.get(`subagent-announce:${a.runId}`)?.state).toBe("sent"), { timeout: 5000, interval: 20 });
      expect(h!.app.runtime.get(b.runId)?.status).toBe("running");
    } finally {
      first.open();
      second.open();
    }
    await settle(h!);
    expect(announcesIn(GROUP_PEER)).toHaveLength(2);
  });

  it("R41 the stats runtime counts from the run's start: time queued for a sub-agent slot is not runtime", async () => {
    await boot({ agents: { ...AGENTS, defaults: { subagents: { maxConcurrent: 1 } } } });
    script = (_req, step) => (step === "subagent" ? { delayMs: 500, content: "done" } : step === "subagent-announce" ? { content: "Result: done" } : undefined);
    await spawn({ task: "first" });
    const second = await spawn({ task: "second" });
    await settle(h!);
    const info = h!.app.runtime.get(second.runId)!;
    const text = announcesIn(GROUP_PEER).find((t) => t.includes(second.childSessionKey))!;
    expect(text).toContain(`Stats: runtime ${formatDuration(info.endedAt! - info.startedAt!)} •`);
  });

  it("R41 with a model override the announce step runs on that model too, and the stats cost is at that model's prices", async () => {
    const models = await bigProvider();
    await boot({ models });
    script = (_req, step) => (step === "subagent" ? { content: "42", usage: { prompt_tokens: 1000, completion_tokens: 500 } } : step === "subagent-announce" ? { content: "Result: 42" } : undefined);
    await spawn({ task: "t", model: "big/m" });
    await settle(h!);
    expect(bigModel!.requests.map(stepOf)).toEqual(["subagent", "subagent-announce"]);
    expect(h!.model.requests.map(stepOf)).toEqual(["plain", "plain"]);
    // 1000 in × $10 + 500 out × $20 per million tokens; at fake/m's prices it would be $0.0020.
    expect(announcesIn(GROUP_PEER)[0].split("\n")[3]).toContain(" • est $0.02 • ");
  });

  it("R40 archiveAfterMinutes 0 never archives: the child stays listed and its record is dropped after the announce", async () => {
    await boot({ agents: { ...AGENTS, defaults: { subagents: { archiveAfterMinutes: 0 } } } });
    script = (_req, step) => (step === "subagent-announce" ? { content: "Result: done" } : undefined);
    const result = await spawn({ task: "t" });
    await settle(h!);
    expect(announcesIn(GROUP_PEER)).toHaveLength(1);
    expect(features(h!).subagents.get(result.runId)).toBeUndefined();
    expect(h!.app.sessions.require(result.childSessionKey).archivedAt).toBeUndefined();
  });

  it("R40 a child is not archived while its announce step is still running, even once its archive time has come", async () => {
    await boot({ agents: { ...AGENTS, defaults: { subagents: { archiveAfterMinutes: 0.002 } } } }); // 120 ms
    let release!: () => void;
    const released = new Promise<void>((resolve) => (release = resolve));
    script = (req, step) => (step !== "subagent-announce" ? undefined : systemOf(req).includes("Task: slow announce") ? released.then(() => ({ content: "Result: late" })) : { content: "Result: quick" });
    // The slow one ends first, so its archive time is due by the time the quick one's sweep runs.
    const slow = await spawn({ task: "slow announce" });
    await vi.waitFor(() => expect(h!.app.runtime.get(slow.runId)?.status).toBe("ok"));
    const quick = await spawn({ task: "quick announce" });
    await vi.waitFor(() => expect(h!.app.sessions.require(quick.childSessionKey).archivedAt).toBeDefined(), { timeout: 5000 });
    expect(h!.app.sessions.require(slow.childSessionKey).archivedAt).toBeUndefined();
    expect(features(h!).subagents.get(slow.runId)).toMatchObject({ outcome: { status: "ok" } });
    release();
    await settle(h!);
    expect(announcesIn(GROUP_PEER).map((t) => t.split("\n")[1])).toEqual(["Result: quick", "Result: late"]);
    await vi.waitFor(() => expect(h!.app.sessions.require(slow.childSessionKey).archivedAt).toBeDefined());
  });

  it("R39 a failed run announces Status: error whatever the model says", async () => {
    await boot();
    script = (_req, step) => (step === "subagent" ? { status: 400, error: "model refused" } : step === "subagent-announce" ? { content: "Status: ok\nResult: all good\nNotes: nothing to add" } : undefined);
    await spawn({ task: "fail please" });
    await settle(h!);
    const [text] = announcesIn(GROUP_PEER);
    expect(text.split("\n").slice(0, 3)).toEqual(["Status: error", "Result: all good", expect.stringMatching(/^Notes: model call failed .*HTTP 400.*model refused; nothing to add$/)]);
  });

  it("R39 runTimeoutSeconds aborts the child: Status: timeout", async () => {
    await boot();
    script = (_req, step) => (step === "subagent" ? { delayMs: 3000, content: "too late" } : step === "subagent-announce" ? { content: "Result: I ran out of time." } : undefined);
    const result = await spawn({ task: "slow", runTimeoutSeconds: 0.2 });
    await settle(h!);
    expect(h!.app.runtime.get(result.runId)?.status).toBe("timeout");
    const [text] = announcesIn(GROUP_PEER);
    expect(text.split("\n").slice(0, 3)).toEqual(["Status: timeout", "Result: I ran out of time.", expect.stringMatching(/^Notes: run timed out after/)]);
  });

  it("R39 a runTimeoutSeconds below a millisecond is still a limit: the child times out instead of running unbounded", async () => {
    await boot();
    script = (_req, step) => (step === "subagent" ? { delayMs: 3000, content: "too late" } : step === "subagent-announce" ? { content: "Result: no time at all." } : undefined);
    const result = await spawn({ task: "slow", runTimeoutSeconds: 0.0001 });
    await settle(h!);
    expect(h!.app.runtime.get(result.runId)?.status).toBe("timeout");
    expect(announcesIn(GROUP_PEER)[0].split("\n")[0]).toBe("Status: timeout");
  });

  it("R38 replying exactly ANNOUNCE_SKIP stays silent", async () => {
    await boot();
    script = (_req, step) => (step === "subagent-announce" ? { content: " ANNOUNCE_SKIP\n" } : undefined);
    const result = await spawn({ task: "quiet work" });
    await settle(h!);
    expect(requestsOf("subagent-announce")).toHaveLength(1);
    expect(announcesIn(GROUP_PEER)).toEqual([]);
    expect(h!.app.outbox.get(`subagent-announce:${result.runId}`)).toBeUndefined();
  });

  // Models dress a bare token (a full stop, quotes, code or bold markup): posted, the chat would read "Result: ANNOUNCE_SKIP.".
  it.each(["ANNOUNCE_SKIP.", "`ANNOUNCE_SKIP`", "**ANNOUNCE_SKIP**", '"ANNOUNCE_SKIP"'])("R38 an ANNOUNCE_SKIP dressed in punctuation or markup (%j) stays silent too", async (reply) => {
    await boot();
    script = (_req, step) => (step === "subagent-announce" ? { content: reply } : undefined);
    const result = await spawn({ task: "quiet work" });
    await settle(h!);
    expect(requestsOf("subagent-announce")).toHaveLength(1);
    expect(announcesIn(GROUP_PEER)).toEqual([]);
    expect(h!.app.outbox.get(`subagent-announce:${result.runId}`)).toBeUndefined();
  });

  // Only the exact token is the opt-out: a reply that merely mentions it, or a different case, is an announce.
  it.each(["Result: done (no need for ANNOUNCE_SKIP)", "announce_skip", "ANNOUNCE_SKIP is not right here: Result: found it"])("R38 a reply that is not exactly ANNOUNCE_SKIP is posted: %j", async (reply) => {
    await boot();
    script = (_req, step) => (step === "subagent-announce" ? { content: reply } : undefined);
    const result = await spawn({ task: "loud work" });
    await settle(h!);
    expect(announcesIn(GROUP_PEER)).toHaveLength(1);
    expect(h!.app.outbox.get(`subagent-announce:${result.runId}`)).toMatchObject({ state: "sent", kind: "announce" });
  });

  it("R37 D2 the requester session's send policy applies: a denied chat gets no announce", async () => {
    await boot();
    script = (_req, step) => (step === "subagent" ? { delayMs: 300, content: "secret" } : step === "subagent-announce" ? { content: "Result: secret" } : undefined);
    const result = await spawn({ task: "t" });
    const admin = await h!.client();
    await admin.request("sessions.patch", { key: REQ, sendPolicy: "deny" });
    await settle(h!);
    expect(announcesIn(GROUP_PEER)).toEqual([]);
    expect(h!.app.outbox.get(`subagent-announce:${result.runId}`)).toMatchObject({ state: "suppressed", sessionKey: REQ });
  });

  it("cleanup delete removes the child session after the announce and renames its transcript", async () => {
    await boot();
    script = (_req, step) => (step === "subagent-announce" ? { content: "Result: done" } : undefined);
    const result = await spawn({ task: "t", cleanup: "delete" });
    const child = await vi.waitFor(() => h!.app.sessions.require(result.childSessionKey));
    const file = h!.app.sessions.transcriptPath(child);
    await settle(h!);
    expect(announcesIn(GROUP_PEER)).toHaveLength(1);
    expect(h!.app.sessions.get(result.childSessionKey)).toBeUndefined();
    expect(existsSync(file)).toBe(false);
    expect(readdirSync(path.dirname(file)).some((f) => f.startsWith(`${path.basename(file)}.deleted.`))).toBe(true);
    expect(features(h!).subagents.get(result.runId)).toBeUndefined();
  });

  it("R40 sessions are archived archiveAfterMinutes after the run ENDS (not after spawn), then hidden from lists", async () => {
    await boot({ agents: { ...AGENTS, defaults: { subagents: { archiveAfterMinutes: 0.004 } } } }); // 240 ms
    script = (_req, step) => (step === "subagent" ? { delayMs: 400, content: "done" } : step === "subagent-announce" ? { content: "Result: done" } : undefined);
    const result = await spawn({ task: "t" });
    await vi.waitFor(() => expect(h!.app.runtime.get(result.runId)?.status).toBe("ok"));
    const endedAt = h!.app.runtime.get(result.runId)!.endedAt!;
    // A spawn-time clock would have archived it while it was still running.
    expect(h!.app.sessions.require(result.childSessionKey).archivedAt).toBeUndefined();
    await vi.waitFor(() => expect(h!.app.sessions.require(result.childSessionKey).archivedAt).toBeDefined(), { timeout: 3000 });
    expect(h!.app.sessions.require(result.childSessionKey).archivedAt!).toBeGreaterThanOrEqual(endedAt + 240);
    const rows = await callViaGateway(h!, "main", "sessions_list");
    expect(rows.sessions.map((r: any) => r.key)).not.toContain(result.childSessionKey);
    const admin = await h!.client();
    const listed = await admin.request("sessions.list", {});
    expect(listed.sessions.map((r: any) => r.key)).not.toContain(result.childSessionKey);
    expect(announcesIn(GROUP_PEER)).toHaveLength(1);
    // Archived means done: nothing is left to sweep again.
    await vi.waitFor(() => expect(features(h!).subagents.get(result.runId)).toBeUndefined());
  });

  it("deleting a running child (sessions.delete) stops it; the announce still comes, without recreating the session", async () => {
    await boot();
    script = (_req, step) => (step === "subagent" ? { delayMs: 10_000, content: "never" } : step === "subagent-announce" ? { content: "Result: should not be asked" } : undefined);
    const result = await spawn({ task: "long job" });
    await vi.waitFor(() => expect(requestsOf("subagent")).toHaveLength(1));
    const admin = await h!.client();
    await admin.request("sessions.delete", { key: result.childSessionKey });
    await settle(h!);
    expect(requestsOf("subagent-announce")).toHaveLength(0);
    expect(h!.app.sessions.get(result.childSessionKey)).toBeUndefined();
    const [text] = announcesIn(GROUP_PEER);
    expect(text.split("\n").slice(0, 3)).toEqual(["Status: timeout", "Result: (no output)", "Notes: run aborted: session deleted"]);
  });

  it("cleanup delete of a child already deleted by sessions.delete: the announce comes and the record is dropped", async () => {
    await boot();
    script = (_req, step) => (step === "subagent" ? { delayMs: 10_000, content: "never" } : undefined);
    const result = await spawn({ task: "long job", cleanup: "delete" });
    await vi.waitFor(() => expect(requestsOf("subagent")).toHaveLength(1));
    const admin = await h!.client();
    await admin.request("sessions.delete", { key: result.childSessionKey });
    await settle(h!);
    expect(announcesIn(GROUP_PEER)).toHaveLength(1);
    expect(features(h!).subagents.get(result.runId)).toBeUndefined();
    expect(h!.app.sessions.get(result.childSessionKey)).toBeUndefined();
  });

  it("/stop in the requester chat aborts its run and the sub-agents it spawned", async () => {
    await boot();
    script = (_req, step) => (step === "subagent" ? { delayMs: 10_000, content: "never" } : step === "subagent-announce" ? { content: "Result: stopped early" } : undefined);
    const result = await spawn({ task: "long job" });
    await vi.waitFor(() => expect(requestsOf("subagent")).toHaveLength(1));
    await h!.app.router.accept(inbound({ chatType: "group", peerId: GROUP_PEER, to: GROUP_PEER, senderId: OWNER, wasMentioned: true, text: "/stop" }));
    await vi.waitFor(() => expect(telegram.textsTo(GROUP_PEER)).toContain("⚙️ Stopped 0 run(s) and 1 sub-agent run(s)."));
    await settle(h!);
    expect(h!.app.runtime.get(result.runId)).toMatchObject({ status: "timeout", error: expect.stringContaining("stopped by /stop") });
    const [text] = announcesIn(GROUP_PEER);
    expect(text.split("\n")[0]).toBe("Status: timeout");
  });

  it("/stop stops only the sub-agents its own session spawned: children of a forum topic of the same group keep running", async () => {
    await boot();
    script = (_req, step) => (step === "subagent" ? { delayMs: 10_000, content: "never" } : step === "subagent-announce" ? { content: "Result: stopped early" } : undefined);
    const inTopic = await spawn({ task: "long job" }, { threadId: "9" });
    await vi.waitFor(() => expect(requestsOf("subagent")).toHaveLength(1));
    const stop = (threadId?: string) => h!.app.router.accept(inbound({ chatType: "group", peerId: GROUP_PEER, to: GROUP_PEER, senderId: OWNER, wasMentioned: true, text: "/stop", ...(threadId ? { threadId } : {}) }));
    await stop();
    await vi.waitFor(() => expect(telegram.textsTo(GROUP_PEER)).toContain("⚙️ Stopped 0 run(s)."));
    expect(h!.app.runtime.get(inTopic.runId)?.status).toBe("running");
    await stop("9");
    await vi.waitFor(() => expect(telegram.textsTo(GROUP_PEER)).toContain("⚙️ Stopped 0 run(s) and 1 sub-agent run(s)."));
    await settle(h!);
    expect(h!.app.runtime.get(inTopic.runId)).toMatchObject({ status: "timeout", error: expect.stringContaining("stopped by /stop") });
  });

  it("/stop counts only sub-agents still running: a finished child, its record kept until the archive, is not reported stopped", async () => {
    await boot();
    script = (_req, step) => (step === "subagent-announce" ? { content: "ANNOUNCE_SKIP" } : undefined);
    const result = await spawn({ task: "quick job" });
    await settle(h!);
    expect(features(h!).subagents.get(result.runId)).toMatchObject({ outcome: { status: "ok" } });
    await h!.app.router.accept(inbound({ chatType: "group", peerId: GROUP_PEER, to: GROUP_PEER, senderId: OWNER, wasMentioned: true, text: "/stop" }));
    await vi.waitFor(() => expect(telegram.textsTo(GROUP_PEER)).toContain("⚙️ Stopped 0 run(s)."));
  });

  it(`R38 an announce step that never answers is aborted after ${ANNOUNCE_STEP_TIMEOUT_MS / 1000} s; the announce is posted from the child's own outcome`, async () => {
    await boot();
    let release!: () => void;
    const released = new Promise<void>((resolve) => (release = resolve));
    script = (_req, step) => (step === "subagent" ? { content: "the child's answer" } : step === "subagent-announce" ? released.then(() => ({ content: "too late" })) : undefined);
    // Only the timers created from here on are fake: the announce step's own deadline among them.
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout"], shouldAdvanceTime: true });
    try {
      const result = await spawn({ task: "answer" });
      await crossDeadline(h!, `${result.runId}:announce`, ANNOUNCE_STEP_TIMEOUT_MS);
      await vi.waitFor(() => expect(announcesIn(GROUP_PEER)).toHaveLength(1));
      expect(announcesIn(GROUP_PEER)[0].split("\n").slice(0, 2)).toEqual(["Status: ok", "Result: the child's answer"]);
    } finally {
      vi.useRealTimers();
      release();
    }
    await settle(h!);
  });

  it("deleting the requester session (sessions.delete) stops the sub-agents it spawned", async () => {
    await boot();
    script = (_req, step) => (step === "subagent" ? { delayMs: 10_000, content: "never" } : step === "subagent-announce" ? { content: "Result: stopped early" } : undefined);
    const result = await spawn({ task: "long job" });
    await vi.waitFor(() => expect(requestsOf("subagent")).toHaveLength(1));
    const admin = await h!.client();
    await admin.request("sessions.delete", { key: REQ });
    await settle(h!);
    expect(h!.app.runtime.get(result.runId)).toMatchObject({ status: "timeout", error: expect.stringContaining("stopped") });
  });
});
