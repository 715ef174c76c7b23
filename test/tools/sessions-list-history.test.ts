/**
 * sessions_list and sessions_history end to end: a real daemon, real runs against the scripted
 * model, the tools called by the model, their results read back from the transcript.
 */
import { existsSync } from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { inbound, startHarness, type Harness } from "../helpers/harness.js";
import { RecordingAdapter } from "../helpers/recording-adapter.js";
import { call, callViaGateway, messagesOf, settle, toolDriver } from "../helpers/tool-driver.js";

let h: Harness;
const telegram = new RecordingAdapter("telegram");
const GROUP = "agent:main:telegram:group:-100500";

beforeAll(async () => {
  h = await startHarness({ store: "memory", responder: toolDriver(), adapters: [telegram] });
  await h.app.router.accept(inbound({ chatType: "group", peerId: "-100500", to: "-100500", groupName: "Ops room", wasMentioned: true, text: "hello group" }));
  await h.app.router.idle();
  const admin = await h.client();
  for (const key of ["global", "unknown", "cron:job-1", "hook:abc", "node-kitchen"]) await admin.request("sessions.patch", { key });
  // main gets a finished tool round: user, assistant(toolCall), toolResult, assistant.
  await callViaGateway(h, "main", "agents_list");
});
afterAll(async () => {
  await h.stop();
});

describe("sessions_list", () => {
  it("tool definitions: JSON-schema functions, numbers never integer, no top-level anyOf/oneOf", () => {
    const tools = h.model.requests.find((r) => r.tools?.length)?.tools ?? [];
    expect(tools.map((t: any) => t.function.name)).toEqual(expect.arrayContaining(["sessions_list", "sessions_history", "sessions_send", "sessions_spawn", "agents_list"]));
    for (const t of tools) {
      expect(t.type).toBe("function");
      expect(t.function.parameters.type).toBe("object");
      expect(t.function.parameters.anyOf).toBeUndefined();
      expect(t.function.parameters.oneOf).toBeUndefined();
      expect(JSON.stringify(t.function.parameters)).not.toContain("integer");
    }
    const list = tools.find((t: any) => t.function.name === "sessions_list").function.parameters;
    expect(list.properties.limit.type).toBe("number");
    expect(list.properties.messageLimit.type).toBe("number");
  });

  it("R6 global and unknown are never listed; the row shape carries the spec fields (R23 R25 R26)", async () => {
    const result = await callViaGateway(h, "agent:main:ops", "sessions_list");
    const keys = result.sessions.map((r: any) => r.key);
    expect(keys).not.toContain("global");
    expect(keys).not.toContain("unknown");
    expect(keys).not.toContain("main");
    expect(result.count).toBe(result.sessions.length);
    const group = result.sessions.find((r: any) => r.key === GROUP);
    const entry = h.app.sessions.require(GROUP);
    expect(group).toMatchObject({
      kind: "group",
      channel: "telegram",
      displayName: "Ops room",
      sessionId: entry.sessionId,
      updatedAt: entry.updatedAt,
      model: "fake/m",
      lastChannel: "telegram",
      lastTo: "-100500",
      deliveryContext: { channel: "telegram", to: "-100500", accountId: "default" },
      transcriptPath: path.join(h.stateDir, "agents", "main", "sessions", `${entry.sessionId}.jsonl`),
    });
    expect(typeof group.totalTokens).toBe("number");
    expect(existsSync(group.transcriptPath)).toBe(true);
    expect(group.messages).toBeUndefined();
    const kinds = Object.fromEntries(result.sessions.map((r: any) => [r.key, [r.kind, r.channel]]));
    expect(kinds).toMatchObject({ "agent:main:main": ["main", "unknown"], "cron:job-1": ["cron", "internal"], "hook:abc": ["hook", "internal"], "node-kitchen": ["node", "internal"], "agent:main:ops": ["other", "unknown"] });
  });

  it("R7 R8 messageLimit includes each session's last N messages, tool results left out", async () => {
    const result = await callViaGateway(h, "agent:main:ops", "sessions_list", { messageLimit: 3, kinds: ["main"] });
    expect(result.sessions.map((r: any) => r.key)).toEqual(["agent:main:main"]);
    const messages = result.sessions[0].messages;
    expect(messages.map((m: any) => m.role)).toEqual(["user", "assistant", "assistant"]);
    expect(messages[1].content[0]).toMatchObject({ type: "toolCall", name: "agents_list" });
    expect(messages[2].content).toEqual([{ type: "text", text: "done" }]);
    const all = await messagesOf(h.app, "agent:main:main");
    expect(all.some((m) => m.role === "toolResult")).toBe(true);
  });

  it("R7 messageLimit is capped at 20", async () => {
    const entry = await h.app.sessions.upsert("agent:main:chatty", "main");
    const ref = { path: h.app.sessions.transcriptPath(entry), sessionId: entry.sessionId, key: entry.key };
    for (let i = 0; i < 30; i++) await h.app.transcripts.appendMessage(ref, { role: "user", content: `line ${i}`, timestamp: Date.now() });
    const result = await callViaGateway(h, "agent:main:ops", "sessions_list", { messageLimit: 50 });
    const chatty = result.sessions.find((r: any) => r.key === "agent:main:chatty");
    expect(chatty.messages).toHaveLength(20);
    expect(chatty.messages.at(-1).content).toBe("line 29");
  });

  it("R7 R8 messageLimit gives the last N messages other than tool results, however many tool results sit among them", async () => {
    const key = "agent:main:toolish-list";
    const entry = await h.app.sessions.upsert(key, "main");
    const ref = { path: h.app.sessions.transcriptPath(entry), sessionId: entry.sessionId, key };
    await h.app.transcripts.appendMessage(ref, { role: "user", content: "ask", timestamp: 1 });
    // One assistant turn with twelve tool calls answered: twelve tool results before "done".
    await h.app.transcripts.appendMessage(ref, { role: "assistant", content: Array.from({ length: 12 }, (_, i) => ({ type: "toolCall" as const, id: `p${i}`, name: "agents_list", arguments: {} })), timestamp: 2 });
    for (let i = 0; i < 12; i++) await h.app.transcripts.appendMessage(ref, { role: "toolResult", toolCallId: `p${i}`, toolName: "agents_list", content: [{ type: "text", text: "{}" }], isError: false, timestamp: 2 });
    await h.app.transcripts.appendMessage(ref, { role: "assistant", content: [{ type: "text", text: "done" }], timestamp: 3 });
    const result = await callViaGateway(h, "agent:main:ops", "sessions_list", { messageLimit: 2, kinds: ["other"] });
    const row = result.sessions.find((r: any) => r.key === key);
    expect(row.messages.map((m: any) => [m.role, m.content[0].type])).toEqual([["assistant", "toolCall"], ["assistant", "text"]]);
  });

  it("R7 messageLimit messages have long texts cut as sessions_history cuts them: one huge webhook payload does not flood the caller's model context", async () => {
    const entry = await h.app.sessions.upsert("hook:bulky", "main");
    const ref = { path: h.app.sessions.transcriptPath(entry), sessionId: entry.sessionId, key: entry.key };
    // A hook may post up to 256 KiB; its echo is as long.
    await h.app.transcripts.appendMessage(ref, { role: "user", content: `payload ${"p".repeat(200_000)}`, timestamp: Date.now() });
    await h.app.transcripts.appendMessage(ref, { role: "assistant", content: [{ type: "text", text: `echo ${"e".repeat(200_000)}` }], timestamp: Date.now() });
    const result = await callViaGateway(h, "agent:main:ops", "sessions_list", { messageLimit: 2, kinds: ["hook"] });
    const [user, reply] = result.sessions.find((r: any) => r.key === "hook:bulky").messages;
    expect(user.content.startsWith("payload ")).toBe(true);
    expect(user.content.length).toBeLessThan(4100);
    expect(user.content.endsWith("…(truncated)…")).toBe(true);
    expect(reply.content[0].text.startsWith("echo ")).toBe(true);
    expect(reply.content[0].text.length).toBeLessThan(4100);
    // What the caller's model was given next is the cut result, not 400 KB.
    const toolResult = (await messagesOf(h.app, "agent:main:ops")).filter((m) => m.role === "toolResult").at(-1)!;
    expect(JSON.stringify(toolResult).length).toBeLessThan(20_000);
  });

  it("R7 kinds filter; limit defaults to and is clamped at 200, applied after filtering", async () => {
    for (let i = 0; i < 205; i++) await h.app.sessions.upsert(`cron:bulk-${i}`, "main");
    // Newer sessions of another kind: a limit applied before filtering would return fewer crons.
    for (let i = 0; i < 10; i++) await h.app.sessions.upsert(`agent:main:telegram:group:newer-${i}`, "main");
    const five = await callViaGateway(h, "agent:main:ops", "sessions_list", { kinds: ["cron"], limit: 5 });
    expect(five.count).toBe(5);
    expect(five.sessions.every((r: any) => r.kind === "cron")).toBe(true);
    const clamped = await callViaGateway(h, "agent:main:ops", "sessions_list", { kinds: ["cron"], limit: 1000 });
    expect(clamped.count).toBe(200);
    const byDefault = await callViaGateway(h, "agent:main:ops", "sessions_list", { kinds: ["cron"] });
    expect(byDefault.count).toBe(200);
    const groups = await callViaGateway(h, "agent:main:ops", "sessions_list", { kinds: ["group"], limit: 3 });
    expect(groups.sessions.map((r: any) => r.key)).toEqual(["agent:main:telegram:group:newer-9", "agent:main:telegram:group:newer-8", "agent:main:telegram:group:newer-7"]);
  });

  it("activeMinutes keeps only sessions updated recently", async () => {
    const old = await h.app.sessions.upsert("agent:main:stale", "main");
    await vi.waitFor(() => expect(Date.now() - old.updatedAt).toBeGreaterThan(400), { timeout: 3000, interval: 25 });
    await h.app.sessions.upsert("agent:main:fresh", "main");
    const result = await callViaGateway(h, "agent:main:ops", "sessions_list", { activeMinutes: 0.005 });
    const keys = result.sessions.map((r: any) => r.key);
    expect(keys).toContain("agent:main:fresh");
    expect(keys).not.toContain("agent:main:stale");
  });

  it("invalid parameters give a clear error result", async () => {
    expect(await callViaGateway(h, "agent:main:ops", "sessions_list", { kinds: ["weird"] })).toEqual({ status: "error", error: "kinds: use any of main, group, cron, hook, node, other" });
  });
});

describe("sessions_history", () => {
  it("R10 includeTools=false (default) filters toolResult messages; true keeps them", async () => {
    const without = await callViaGateway(h, "agent:main:ops", "sessions_history", { sessionKey: "main" });
    expect(without.sessionKey).toBe("agent:main:main");
    expect(without.messages.some((m: any) => m.role === "toolResult")).toBe(false);
    expect(without.messages.length).toBeGreaterThanOrEqual(3);
    const withTools = await callViaGateway(h, "agent:main:ops", "sessions_history", { sessionKey: "main", includeTools: true });
    expect(withTools.messages.filter((m: any) => m.role === "toolResult")).toHaveLength(1);
    expect(withTools.messages.length).toBe(without.messages.length + 1);
  });

  it("R11 messages come in the raw transcript format", async () => {
    const result = await callViaGateway(h, "agent:main:ops", "sessions_history", { sessionKey: GROUP, includeTools: true });
    const raw = await messagesOf(h.app, GROUP);
    expect(result.messages).toEqual(raw);
    expect(result.messages[0]).toMatchObject({ role: "user", content: "hello group", provenance: { kind: "external_user" }, sender: { id: "1001" } });
    expect(result.messages[1]).toMatchObject({ role: "assistant", content: [{ type: "text", text: "echo: hello group" }], model: "m", provider: "fake", stopReason: "stop" });
    expect(result).toMatchObject({ truncated: false, droppedMessages: false, contentTruncated: false });
    expect(result.bytes).toBe(Buffer.byteLength(JSON.stringify(raw)));
  });

  it("limit keeps the newest messages", async () => {
    const result = await callViaGateway(h, "agent:main:ops", "sessions_history", { sessionKey: "agent:main:chatty", limit: 2 });
    expect(result.messages.map((m: any) => m.content)).toEqual(["line 28", "line 29"]);
  });

  it("R10 without tool results, limit still gives the newest `limit` other messages, however many tool results sit among them", async () => {
    const key = "agent:main:toolish";
    const entry = await h.app.sessions.upsert(key, "main");
    const ref = { path: h.app.sessions.transcriptPath(entry), sessionId: entry.sessionId, key };
    await h.app.transcripts.appendMessage(ref, { role: "user", content: "ask", timestamp: 1 });
    for (let i = 0; i < 3; i++) {
      await h.app.transcripts.appendMessage(ref, { role: "assistant", content: [{ type: "toolCall", id: `c${i}`, name: "agents_list", arguments: {} }], timestamp: 2 + i });
      await h.app.transcripts.appendMessage(ref, { role: "toolResult", toolCallId: `c${i}`, toolName: "agents_list", content: [{ type: "text", text: "{}" }], isError: false, timestamp: 2 + i });
    }
    // One assistant turn with twelve tool calls answered: twelve tool results before "done".
    await h.app.transcripts.appendMessage(ref, { role: "assistant", content: Array.from({ length: 12 }, (_, i) => ({ type: "toolCall" as const, id: `p${i}`, name: "agents_list", arguments: {} })), timestamp: 8 });
    for (let i = 0; i < 12; i++) await h.app.transcripts.appendMessage(ref, { role: "toolResult", toolCallId: `p${i}`, toolName: "agents_list", content: [{ type: "text", text: "{}" }], isError: false, timestamp: 8 });
    await h.app.transcripts.appendMessage(ref, { role: "assistant", content: [{ type: "text", text: "done" }], timestamp: 9 });
    const result = await callViaGateway(h, "agent:main:ops", "sessions_history", { sessionKey: key, limit: 2 });
    expect(result.messages.map((m: any) => [m.role, m.content[0].type])).toEqual([["assistant", "toolCall"], ["assistant", "text"]]);
  });

  it("limit defaults to 200 and is clamped at 1000 (the most the tool promises)", async () => {
    const key = "agent:main:long";
    const entry = await h.app.sessions.upsert(key, "main");
    const ref = { path: h.app.sessions.transcriptPath(entry), sessionId: entry.sessionId, key };
    for (let i = 0; i < 1100; i++) await h.app.transcripts.appendMessage(ref, { role: "user", content: `${i}`, timestamp: i });
    const result = await callViaGateway(h, "agent:main:ops", "sessions_history", { sessionKey: key, limit: 5000 });
    expect(result.messages).toHaveLength(1000);
    expect(result.messages.at(-1).content).toBe("1099");
    const byDefault = await callViaGateway(h, "agent:main:ops", "sessions_history", { sessionKey: key });
    expect(byDefault.messages.map((m: any) => m.content)).toEqual(Array.from({ length: 200 }, (_, i) => `${900 + i}`));
  });

  it("R12 a sessionId resolves to its session key", async () => {
    const entry = h.app.sessions.require(GROUP);
    const result = await callViaGateway(h, "agent:main:ops", "sessions_history", { sessionKey: entry.sessionId });
    expect(result.sessionKey).toBe(GROUP);
    expect(result.sessionId).toBe(entry.sessionId);
  });

  it("R12 an unknown sessionId, an unknown key and a missing key are clear errors", async () => {
    const id = "0b6f1f53-7c1e-4a6a-9a43-3d2f1b0c9e11";
    expect(await callViaGateway(h, "agent:main:ops", "sessions_history", { sessionKey: id })).toEqual({ status: "error", error: `Session not found: ${id} (use the full sessionKey from sessions_list)` });
    expect(await callViaGateway(h, "agent:main:ops", "sessions_history", { sessionKey: "agent:main:nope" })).toEqual({ status: "error", error: "unknown session: agent:main:nope" });
    expect(await callViaGateway(h, "agent:main:ops", "sessions_history", {})).toEqual({ status: "error", error: "sessionKey required" });
    expect(await callViaGateway(h, "agent:main:ops", "sessions_history", { sessionKey: "unknown" })).toEqual({ status: "error", error: "unknown session: unknown" });
  });

  it("R6 the reserved sessions global and unknown cannot be reached by their sessionId or a label either (global is not the main bucket under scope per-sender)", async () => {
    const admin = await h.client();
    for (const key of ["global", "unknown"]) {
      await admin.request("sessions.patch", { key, label: `reserved-${key}` });
      const id = h.app.sessions.require(key).sessionId;
      expect(await callViaGateway(h, "agent:main:ops", "sessions_history", { sessionKey: id })).toEqual({ status: "error", error: `unknown session: ${id}` });
      expect(await callViaGateway(h, "agent:main:ops", "sessions_send", { label: `reserved-${key}`, message: "hello?" })).toMatchObject({ status: "error", error: `No session found with label: reserved-${key}` });
      await admin.request("sessions.patch", { key, label: null });
    }
  });

  it("large histories are capped at 80 KiB with flags; long texts are cut near 4000 characters", async () => {
    const entry = await h.app.sessions.upsert("agent:main:big", "main");
    const ref = { path: h.app.sessions.transcriptPath(entry), sessionId: entry.sessionId, key: entry.key };
    for (let i = 0; i < 40; i++) await h.app.transcripts.appendMessage(ref, { role: "assistant", content: [{ type: "text", text: `${i} ${"z".repeat(6000)}` }], timestamp: Date.now() });
    const result = await callViaGateway(h, "agent:main:ops", "sessions_history", { sessionKey: "agent:main:big" });
    expect(result).toMatchObject({ truncated: true, droppedMessages: true, contentTruncated: true });
    expect(result.bytes).toBeLessThanOrEqual(80 * 1024);
    expect(result.messages.length).toBeLessThan(40);
    const lastText = result.messages.at(-1).content[0].text as string;
    expect(lastText.startsWith("39 ")).toBe(true);
    expect(lastText.length).toBeLessThan(4100);
    expect(lastText.endsWith("…(truncated)…")).toBe(true);
  });
});

describe("R6 session.scope global", () => {
  it("R6 the global bucket is aliased to main for every tool; callers never see global", async () => {
    const g = await startHarness({ store: "memory", responder: toolDriver(), config: { session: { scope: "global" } } });
    try {
      await g.app.router.accept(inbound({ chatType: "direct", peerId: "1001", to: "1001", text: "dm" }));
      await g.app.router.idle();
      expect(g.app.sessions.get("global")).toBeDefined();
      const list = await callViaGateway(g, "agent:main:ops", "sessions_list");
      expect(list.sessions.map((r: any) => [r.key, r.kind])).toContainEqual(["main", "main"]);
      expect(JSON.stringify(list)).not.toContain('"global"');
      const history = await callViaGateway(g, "agent:main:ops", "sessions_history", { sessionKey: "main" });
      expect(history).toMatchObject({ sessionKey: "main", messages: [{ role: "user", content: "dm" }, { role: "assistant" }] });
      expect(await callViaGateway(g, "agent:main:ops", "sessions_history", { sessionKey: "global" })).toEqual({ status: "error", error: "unknown session: global" });
    } finally {
      await g.stop();
    }
  });

  it("R6 the main bucket chatted with from the web page lists its web chat route as main, never global", async () => {
    const g = await startHarness({ store: "memory", responder: toolDriver(), config: { session: { scope: "global" } } });
    try {
      const client = await g.client();
      await client.request("chat.send", { sessionKey: "main", message: "from the page", idempotencyKey: "page-1" });
      await vi.waitFor(() => expect(g.app.runtime.get("page-1")?.status).toBe("ok"));
      const list = await callViaGateway(g, "agent:main:ops", "sessions_list", { kinds: ["main"] });
      expect(list.sessions).toEqual([expect.objectContaining({ key: "main", channel: "webchat", lastChannel: "webchat", lastTo: "main", deliveryContext: { channel: "webchat", to: "main", accountId: "default" } })]);
      expect(JSON.stringify(list)).not.toContain('"global"');
    } finally {
      await g.stop();
    }
  });

  it("R6 sessions the main bucket spawned or messaged never show global: not as a row's spawnedBy, not as a message's provenance source", async () => {
    const skip = toolDriver((_req, step) => (step === "a2a-reply" ? { content: "REPLY_SKIP" } : step === "a2a-announce" || step === "subagent-announce" ? { content: "ANNOUNCE_SKIP" } : undefined));
    const g = await startHarness({ store: "memory", responder: skip, config: { session: { scope: "global" } } });
    try {
      const ROOM = "agent:main:telegram:group:-100room";
      await g.app.router.accept(inbound({ chatType: "group", peerId: "-100room", to: "-100room", wasMentioned: true, text: "hi room" }));
      await g.app.router.idle();
      const dm = (args: string) => g.app.router.accept(inbound({ chatType: "direct", peerId: "1001", to: "1001", text: args }));
      await dm(call("sessions_spawn", { task: "look around" }));
      await dm(call("sessions_send", { sessionKey: ROOM, message: "from the bucket", timeoutSeconds: 5 }));
      await g.app.router.idle();
      await settle(g);
      const child = g.app.sessions.list({ kinds: ["other"] }).find((e) => e.key.includes(":subagent:"));
      expect(child?.spawnedBy).toBe("global");
      const list = await callViaGateway(g, "agent:main:ops", "sessions_list", { messageLimit: 5 });
      expect(list.sessions.find((r: any) => r.key === child!.key)).toMatchObject({ spawnedBy: "main" });
      expect(list.sessions.find((r: any) => r.key === ROOM).messages).toContainEqual(expect.objectContaining({ content: "from the bucket", provenance: expect.objectContaining({ kind: "inter_session", sourceSessionKey: "main" }) }));
      expect(JSON.stringify(list)).not.toContain('"global"');
      const history = await callViaGateway(g, "agent:main:ops", "sessions_history", { sessionKey: ROOM });
      expect(history.messages).toContainEqual(expect.objectContaining({ content: "from the bucket", provenance: expect.objectContaining({ sourceSessionKey: "main" }) }));
      expect(JSON.stringify(history)).not.toContain('"global"');
    } finally {
      await g.stop();
    }
  });
});
