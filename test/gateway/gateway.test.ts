import { existsSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import { mkdir, rmdir } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import WebSocket from "ws";
import { afterEach, describe, expect, it, vi } from "vitest";
import { GatewayCallError, type GatewayClient } from "../../src/gateway/client.js";
import { Params } from "../../src/gateway/protocol.js";
import { closeReason } from "../../src/gateway/server.js";
import { echoLastUser } from "../fakes/model-server.js";
import { inbound, startHarness, type Harness } from "../helpers/harness.js";
import { connectFrame as operatorConnect, rawSocket, type FrameSocket } from "../helpers/frame-socket.js";
import { RecordingAdapter } from "../helpers/recording-adapter.js";

let h: Harness | undefined;
afterEach(async () => {
  await h?.stop();
  h = undefined;
});

const TOKEN = "test-gateway-token-123";

/** A raw socket past the handshake (the harness runs without a token), with the connect's answer. */
async function connectedSocket(url: string): Promise<FrameSocket & { hello: any }> {
  const s = await rawSocket(url);
  await s.next();
  s.ws.send(connectFrame({ auth: {} }));
  return { ...s, hello: await s.next() };
}

/** A `connect` with the test token unless `over` gives another `auth`. */
const connectFrame = (over: Record<string, unknown> = {}) => operatorConnect({ auth: { token: TOKEN }, ...over });

describe("gateway handshake and auth", () => {
  it("sends connect.challenge, then hello-ok with features and session defaults", async () => {
    h = await startHarness({ config: { gateway: { auth: { token: TOKEN } } } });
    const s = await rawSocket(h.url);
    const challenge = await s.next();
    expect(challenge).toMatchObject({ type: "event", event: "connect.challenge", payload: { nonce: expect.any(String), ts: expect.any(Number) } });
    expect(challenge.seq).toBeUndefined();
    s.ws.send(connectFrame());
    const hello = await s.next();
    expect(hello).toMatchObject({ type: "res", id: "c", ok: true, payload: { type: "hello-ok", protocol: 4, snapshot: { sessionDefaults: { defaultAgentId: "main", mainKey: "main", mainSessionKey: "agent:main:main", scope: "per-sender" } }, auth: { method: "token", role: "operator" } } });
    // Exactly the methods served: a client picks what to call from this list.
    expect([...hello.payload.features.methods].sort()).toEqual(["agent", "agent.wait", "chat.history", "chat.send", "health", "node.event", "send", "sessions.delete", "sessions.list", "sessions.patch", "sessions.reset", "sessions.resolve", "status"]);
    s.ws.close();
  });

  it.each([
    ["a wrong token", { auth: { token: "nope" } }, "UNAUTHORIZED"],
    ["no token", { auth: {} }, "UNAUTHORIZED"],
    ["an unsupported protocol range", { minProtocol: 5, maxProtocol: 6 }, "INVALID_REQUEST"],
  ])("refuses %s with an error and closes", async (_n, over, code) => {
    h = await startHarness({ config: { gateway: { auth: { token: TOKEN } } } });
    const s = await rawSocket(h.url);
    await s.next();
    s.ws.send(connectFrame(over));
    expect((await s.next()).error.code).toBe(code);
    await new Promise((r) => s.ws.once("close", r));
  });

  it("a first frame that is not connect is refused", async () => {
    h = await startHarness();
    const s = await rawSocket(h.url);
    await s.next();
    s.ws.send(JSON.stringify({ type: "req", id: "x", method: "health", params: {} }));
    expect((await s.next()).error.message).toMatch(/first frame must be a "connect" request/);
  });

  it("a method without its scope is FORBIDDEN with details.missingScope", async () => {
    h = await startHarness();
    const reader = await h.client({ scopes: ["operator.read"] });
    await expect(reader.request("sessions.patch", { key: "main", sendPolicy: "deny" })).rejects.toMatchObject({ code: "FORBIDDEN", details: { missingScope: "operator.admin" } });
    await expect(reader.request("chat.send", { sessionKey: "main", message: "x", idempotencyKey: "k" })).rejects.toMatchObject({ code: "FORBIDDEN" });
    expect((await reader.request("sessions.list", {})).count).toBe(0);
  });
});

describe("gateway robustness", () => {
  it("bad JSON, unknown methods, bad params and oversized frames get errors; the connection stays open", async () => {
    h = await startHarness({ config: { gateway: { maxPayload: 2048 } } });
    const s = await connectedSocket(h.url);
    s.ws.send("{not json");
    expect((await s.next()).error).toMatchObject({ code: "INVALID_REQUEST", message: expect.stringMatching(/invalid JSON/) });
    s.ws.send(JSON.stringify({ type: "req", id: "1", method: "nope.method", params: {} }));
    expect(await s.next()).toMatchObject({ id: "1", ok: false, error: { message: "unknown method: nope.method" } });
    s.ws.send(JSON.stringify({ type: "req", id: "2", method: "sessions.list", params: { limit: -1, bogus: true } }));
    const bad = await s.next();
    expect(bad.id).toBe("2");
    expect(bad.error.message).toMatch(/limit/);
    expect(bad.error.message).toMatch(/bogus/);
    s.ws.send(JSON.stringify({ type: "req", id: "3", method: "chat.send", params: { sessionKey: "main", message: "x".repeat(5000), idempotencyKey: "k" } }));
    expect(await s.next()).toMatchObject({ id: "3", ok: false, error: { message: expect.stringMatching(/frame too large/) } });
    s.ws.send(JSON.stringify({ type: "req", id: "4", method: "health", params: {} }));
    expect(await s.next()).toMatchObject({ id: "4", ok: true });
    s.ws.close();
  });
});

describe("gateway close reasons", () => {
  it.each([
    ["short ASCII, kept", "bad token", "bad token"],
    ["long ASCII, cut to 123 bytes", "a".repeat(300), "a".repeat(123)],
    ["3-byte characters, whole ones within 123 bytes", "€".repeat(100), "€".repeat(41)],
    ["a 4-byte character never split", `${"a".repeat(121)}😀b`, "a".repeat(121)],
    ["a lone surrogate counts as its 3-byte replacement", `${"a".repeat(120)}\ud800z`, `${"a".repeat(120)}\ud800`],
  ])("%s", (_what, text, reason) => {
    expect(closeReason(text)).toBe(reason);
    expect(Buffer.byteLength(closeReason(text))).toBeLessThanOrEqual(123);
  });

  it("a refused first frame with a long non-ASCII method closes the socket with 1008 (its reason fits the limit)", async () => {
    h = await startHarness();
    const s = await rawSocket(h.url);
    await s.next();
    const closed = new Promise<{ code: number; reason: string }>((resolve) => s.ws.once("close", (code, reason) => resolve({ code, reason: reason.toString() })));
    s.ws.send(JSON.stringify({ type: "req", id: "x", method: "мет".repeat(40), params: {} }));
    expect(await s.next()).toMatchObject({ id: "x", ok: false });
    const { code, reason } = await closed;
    expect(code).toBe(1008);
    expect(reason.length).toBeGreaterThan(0);
    expect(Buffer.byteLength(reason)).toBeLessThanOrEqual(123);
  });
});

describe("gateway session references", () => {
  it.each([
    ["sessions.patch", { key: "   ", sendPolicy: "deny" }, /key: must not be blank/],
    ["sessions.reset", { key: "\t" }, /key: must not be blank/],
    ["sessions.delete", { key: " " }, /key: must not be blank/],
    ["chat.history", { sessionKey: "  " }, /sessionKey: must not be blank/],
    ["agent", { sessionKey: " ", message: "hi", idempotencyKey: "blank-key" }, /sessionKey: must not be blank/],
    ["sessions.patch", { key: "main", label: "   " }, /label: must not be blank/],
    ["agent", { message: "hi", idempotencyKey: "blank-label", label: " \n " }, /label: must not be blank/],
    ["sessions.patch", { key: "main", label: "x".repeat(65) }, /label/],
  ])("%s with a blank key or label is INVALID_REQUEST naming it, and stores nothing (%j)", async (method, params, message) => {
    h = await startHarness();
    const c = await h.client();
    const before = h.app.sessions.size;
    await expect(c.request(method, params)).rejects.toMatchObject({ code: "INVALID_REQUEST", message: expect.stringMatching(message) });
    expect(h.app.sessions.size).toBe(before);
    expect(h.app.sessions.get("")).toBeUndefined();
    expect(h.model.requests).toHaveLength(0);
  });

  it("R1 sessions.patch with a key padded by whitespace patches main itself, not a stray entry", async () => {
    h = await startHarness();
    const c = await h.client();
    // The protocol only refuses blank keys; padding reaches the key codec, which must trim it.
    expect(await c.request("sessions.patch", { key: " main\t", sendPolicy: "deny" })).toMatchObject({ ok: true, key: "agent:main:main", entry: { sendPolicy: "deny" } });
    expect(h.app.sessions.list({}).map((e) => e.key)).toEqual(["agent:main:main"]);
    await expect(c.request("agent", { sessionKey: "main", message: "hi", idempotencyKey: "padded" })).rejects.toMatchObject({ message: "send blocked by session policy" });
    expect(h.model.requests).toHaveLength(0);
  });

  it("a key typed with a path in its agent part (agent:../../x:chat, agent:a/b:chat) keeps its transcript under <stateDir>/agents: nothing is written outside the state directory", async () => {
    const root = mkdtempSync(path.join(os.tmpdir(), "sb-keypath-"));
    try {
      h = await startHarness({ stateDir: path.join(root, "state") });
      const c = await h.client();
      for (const [i, sessionKey] of ["agent:../../escaped:chat", "agent:team/ops:chat", "agent:..:chat"].entries()) {
        await c.request("chat.send", { sessionKey, message: `hi ${i}`, idempotencyKey: `path-${i}` });
        expect(await c.request("agent.wait", { runId: `path-${i}`, timeoutMs: 5000 })).toMatchObject({ status: "ok" });
        const entry = h.app.sessions.require(sessionKey);
        const file = h.app.sessions.transcriptPath(entry);
        expect(path.relative(path.join(h.stateDir, "agents"), file)).toMatch(/^[a-z0-9][a-z0-9_-]*\/sessions\/[0-9a-f-]{36}\.jsonl$/);
        expect((await c.request("chat.history", { sessionKey })).messages.map((m: any) => m.role)).toEqual(["user", "assistant"]);
      }
      await h.app.transcripts.flush();
      // Only the state directory was written to.
      expect(readdirSync(root)).toEqual(["state"]);
      expect(readdirSync(path.join(h.stateDir, "agents")).every((d) => /^[a-z0-9][a-z0-9_-]*$/.test(d))).toBe(true);
    } finally {
      await h?.stop();
      h = undefined;
      rmSync(root, { recursive: true, force: true });
    }
  });

  it("a label is stored trimmed, as the session tools store it", async () => {
    h = await startHarness();
    const c = await h.client();
    await c.request("sessions.patch", { key: "main", label: "  research  " });
    expect(h.app.sessions.require("agent:main:main").label).toBe("research");
  });
});

describe("gateway methods", () => {
  it("R29 chat.send and agent into a denied session fail with 'send blocked by session policy'", async () => {
    h = await startHarness();
    const c = await h.client();
    await c.request("sessions.patch", { key: "main", sendPolicy: "deny" });
    await expect(c.request("chat.send", { sessionKey: "main", message: "hi", idempotencyKey: "a" })).rejects.toMatchObject({ code: "INVALID_REQUEST", message: "send blocked by session policy" });
    await expect(c.request("agent", { sessionKey: "main", message: "hi", idempotencyKey: "b" })).rejects.toMatchObject({ code: "INVALID_REQUEST", message: "send blocked by session policy" });
    expect(h.model.requests).toHaveLength(0);
    await c.request("sessions.patch", { key: "main", sendPolicy: null });
    const final = await c.request("agent", { sessionKey: "main", message: "hi", idempotencyKey: "c" }, { expectFinal: true });
    expect(final).toMatchObject({ runId: "c", status: "ok", result: { reply: "echo: hi" } });
  });

  it("R28 sessions.patch creates an entry for a chat before it first speaks, and the policy holds when it does", async () => {
    const telegram = new RecordingAdapter("telegram");
    h = await startHarness({ adapters: [telegram] });
    const c = await h.client();
    const res = await c.request("sessions.patch", { key: "agent:main:telegram:group:-100777", sendPolicy: "deny" });
    expect(res).toMatchObject({ ok: true, key: "agent:main:telegram:group:-100777", entry: { sendPolicy: "deny", kind: "group" } });
    await h.app.router.accept(inbound({ chatType: "group", peerId: "-100777", to: "-100777", wasMentioned: true }));
    await h.app.router.idle();
    expect(telegram.sent).toHaveLength(0);
  });

  it("agent answers twice (accepted, then final) and agent.wait works across a reconnect (R18)", async () => {
    h = await startHarness();
    h.model.setResponder(() => ({ content: "later", delayMs: 300 }));
    const first = await h.client();
    const frames: any[] = [];
    const raw = await connectedSocket(h.url);
    raw.ws.on("message", (d) => frames.push(JSON.parse(d.toString())));
    raw.ws.send(JSON.stringify({ type: "req", id: "run", method: "agent", params: { message: "go", idempotencyKey: "run-1" } }));
    await vi.waitFor(() => expect(frames.filter((f) => f.id === "run")).toHaveLength(2), { timeout: 5000 });
    const [accepted, final] = frames.filter((f) => f.id === "run");
    expect(accepted.payload).toMatchObject({ runId: "run-1", status: "accepted", sessionKey: "agent:main:main", acceptedAt: expect.any(Number) });
    expect(final.payload).toMatchObject({ runId: "run-1", status: "ok", summary: "completed", result: { reply: "later" } });
    raw.ws.close();

    await first.request("agent", { message: "again", idempotencyKey: "run-2" });
    first.close();
    const second = await h.client();
    const waited = await second.request("agent.wait", { runId: "run-2", timeoutMs: 5000 });
    expect(waited).toMatchObject({ runId: "run-2", status: "ok", startedAt: expect.any(Number), endedAt: expect.any(Number) });
    expect(await second.request("agent.wait", { runId: "run-2", timeoutMs: 0 })).toMatchObject({ status: "ok" });
    expect(await second.request("agent.wait", { runId: "never-started", timeoutMs: 20 })).toEqual({ runId: "never-started", status: "timeout", unknown: true });
  });

  it("an idempotencyKey repeated on a new connection returns the first run, not a second one", async () => {
    h = await startHarness();
    const a = await h.client();
    const one = await a.request("agent", { message: "once", idempotencyKey: "same" }, { expectFinal: true });
    a.close();
    const b = await h.client();
    const two = await b.request("agent", { message: "once", idempotencyKey: "same" }, { expectFinal: true });
    expect(two).toEqual(one);
    expect(h.model.requests).toHaveLength(1);
  });

  it("chat.send streams a final chat event and chat.history returns the transcript", async () => {
    h = await startHarness();
    const c = await h.client();
    const events: any[] = [];
    c.on("event", (name, payload) => name === "chat" && events.push(payload));
    expect(await c.request("chat.send", { sessionKey: "main", message: "hey", idempotencyKey: "w1" })).toEqual({ runId: "w1", status: "started" });
    await vi.waitFor(() => expect(events).toHaveLength(1));
    expect(events[0]).toMatchObject({ runId: "w1", sessionKey: "agent:main:main", state: "final", message: { role: "assistant", content: [{ type: "text", text: "echo: hey" }] } });
    const history = await c.request("chat.history", { sessionKey: "main" });
    expect(history.messages.map((m: any) => m.role)).toEqual(["user", "assistant"]);
    expect(history.sessionId).toBe(h.app.sessions.require("agent:main:main").sessionId);
  });

  it("sessions.list rows carry the spec row shape; resolve works by key, sessionId (R12) and label", async () => {
    h = await startHarness();
    const c = await h.client();
    await c.request("agent", { message: "hi", idempotencyKey: "r" }, { expectFinal: true });
    await c.request("sessions.patch", { key: "agent:main:telegram:group:-5", label: "team" });
    const list = await c.request("sessions.list", {});
    const main = list.sessions.find((s: any) => s.key === "agent:main:main");
    expect(main).toMatchObject({ kind: "main", channel: "unknown", sessionId: expect.any(String), updatedAt: expect.any(Number), model: "fake/m", totalTokens: expect.any(Number), transcriptPath: expect.stringMatching(/agents\/main\/sessions\/.+\.jsonl$/) });
    expect(list.sessions.find((s: any) => s.label === "team")).toMatchObject({ kind: "group", channel: "telegram" });
    expect(await c.request("sessions.resolve", { sessionId: main.sessionId })).toEqual({ ok: true, key: "agent:main:main" });
    expect(await c.request("sessions.resolve", { label: "team" })).toEqual({ ok: true, key: "agent:main:telegram:group:-5" });
    expect(await c.request("sessions.resolve", { key: "main" })).toEqual({ ok: true, key: "agent:main:main" });
    await expect(c.request("sessions.resolve", { sessionId: "no-such-id" })).rejects.toMatchObject({ code: "NOT_FOUND", message: "no session found with sessionId: no-such-id" });
    await expect(c.request("chat.history", { sessionKey: "no-such-id" })).rejects.toMatchObject({ code: "NOT_FOUND" });
  });

  it("sessions.list filters by search (any case; key, label, display name) and by spawnedBy; a row without a displayName shows its label", async () => {
    h = await startHarness();
    const c = await h.client();
    await c.request("sessions.patch", { key: "agent:main:telegram:group:-5", label: "Team" });
    await c.request("sessions.patch", { key: "agent:main:subagent:abc", spawnedBy: "agent:main:telegram:group:-5" });
    await c.request("sessions.patch", { key: "main" });
    const keys = async (params: Record<string, unknown>) => (await c.request("sessions.list", params)).sessions.map((s: any) => s.key);
    expect(await keys({ search: "team" })).toEqual(["agent:main:telegram:group:-5"]);
    expect(await keys({ search: "SUBAGENT" })).toEqual(["agent:main:subagent:abc"]);
    expect(await keys({ spawnedBy: "agent:main:telegram:group:-5" })).toEqual(["agent:main:subagent:abc"]);
    const [group] = (await c.request("sessions.list", { label: "Team" })).sessions;
    expect(group).toMatchObject({ key: "agent:main:telegram:group:-5", label: "Team", displayName: "Team" });
  });

  it("R12 sessions.resolve finds a sessionId passed with surrounding whitespace", async () => {
    h = await startHarness();
    const c = await h.client();
    await c.request("sessions.patch", { key: "agent:main:telegram:group:-5" });
    const { sessionId } = h.app.sessions.require("agent:main:telegram:group:-5");
    expect(await c.request("sessions.resolve", { sessionId: ` ${sessionId}\n` })).toEqual({ ok: true, key: "agent:main:telegram:group:-5" });
  });

  it("sessions.reset mints a new sessionId; sessions.delete refuses main and archives a transcript", async () => {
    h = await startHarness();
    const c = await h.client();
    await c.request("agent", { message: "hi", idempotencyKey: "x", sessionKey: "agent:main:telegram:group:-9" }, { expectFinal: true });
    const before = h.app.sessions.require("agent:main:telegram:group:-9").sessionId;
    const reset = await c.request("sessions.reset", { key: "agent:main:telegram:group:-9" });
    expect(reset.entry.sessionId).not.toBe(before);
    await expect(c.request("sessions.delete", { key: "main" })).rejects.toMatchObject({ message: expect.stringMatching(/Cannot delete the main session/) });
    await c.request("agent", { message: "hi", idempotencyKey: "y", sessionKey: "agent:main:telegram:group:-9" }, { expectFinal: true });
    const del = await c.request("sessions.delete", { key: "agent:main:telegram:group:-9" });
    expect(del).toMatchObject({ ok: true, deleted: true, archived: [expect.stringMatching(/\.jsonl\.deleted\./)] });
    expect(h.app.sessions.get("agent:main:telegram:group:-9")).toBeUndefined();
  });

  it("send goes through the outbox: delivered when allowed, refused when the chat's session is denied", async () => {
    const telegram = new RecordingAdapter("telegram");
    h = await startHarness({ adapters: [telegram] });
    const c = await h.client();
    expect(await c.request("send", { channel: "telegram", to: "-1", message: "notice", idempotencyKey: "s1" })).toMatchObject({ status: "sent" });
    await c.request("sessions.patch", { key: "agent:main:telegram:group:-2", sendPolicy: "deny" });
    await expect(c.request("send", { channel: "telegram", to: "-2", message: "nope", sessionKey: "agent:main:telegram:group:-2", idempotencyKey: "s2" })).rejects.toMatchObject({ message: "send blocked by session policy" });
    expect(telegram.sent.map((m) => m.text)).toEqual(["notice"]);
    await expect(c.request("send", { channel: "discord", to: "1", message: "x", idempotencyKey: "s3" })).rejects.toMatchObject({ code: "UNAVAILABLE", message: expect.stringMatching(/channel not connected: discord/) });
  });

  it("send of a message with nothing but whitespace is refused, not reported sent with no message", async () => {
    const telegram = new RecordingAdapter("telegram");
    h = await startHarness({ adapters: [telegram] });
    const c = await h.client();
    await expect(c.request("send", { channel: "telegram", to: "-1", message: " \n\t ", idempotencyKey: "blank" })).rejects.toMatchObject({ code: "INVALID_REQUEST", message: expect.stringMatching(/message/) });
    expect(telegram.sent).toEqual([]);
  });

  it("D2 send without a sessionKey applies the sendPolicy of the session that chats in the target chat", async () => {
    const telegram = new RecordingAdapter("telegram");
    h = await startHarness({ adapters: [telegram] });
    // The group speaks first, so its session records where it lives; that record is the only link
    // from a bare channel+to back to the session whose policy governs the chat.
    await h.app.router.accept(inbound({ chatType: "group", peerId: "-2", to: "-2", wasMentioned: true, text: "hello group" }));
    await h.app.router.idle();
    expect(h.app.sessions.require("agent:main:telegram:group:-2").deliveryContext).toMatchObject({ channel: "telegram", to: "-2" });
    expect(telegram.sent.map((m) => m.text)).toEqual(["echo: hello group"]);
    const c = await h.client();
    await c.request("sessions.patch", { key: "agent:main:telegram:group:-2", sendPolicy: "deny" });
    await expect(c.request("send", { channel: "telegram", to: "-2", message: "sneaky notice", idempotencyKey: "s-nokey" })).rejects.toMatchObject({ code: "INVALID_REQUEST", message: "send blocked by session policy" });
    expect(telegram.sent.map((m) => m.text)).toEqual(["echo: hello group"]);
  });

  it("D2 send to web chat's main by the key callers use (\"main\") obeys the main session's policy, and reaches the page once allowed", async () => {
    h = await startHarness();
    const c = await h.client();
    // The page chats in main: the session's web chat route is its canonical key.
    await c.request("chat.send", { sessionKey: "main", message: "hello page", idempotencyKey: "w1" });
    await vi.waitFor(() => expect(h!.app.sessions.get("agent:main:main")?.deliveryContext).toMatchObject({ channel: "webchat", to: "agent:main:main" }));
    await c.request("sessions.patch", { key: "main", sendPolicy: "deny" });
    await expect(c.request("send", { channel: "webchat", to: "main", message: "sneaky notice", idempotencyKey: "w2" })).rejects.toMatchObject({ code: "INVALID_REQUEST", message: "send blocked by session policy" });
    await c.request("sessions.patch", { key: "main", sendPolicy: null });
    const events: Array<{ sessionKey: string; message?: { content: Array<{ text: string }> } }> = [];
    c.on("event", (event: string, payload: (typeof events)[number]) => void (event === "chat" && events.push(payload)));
    expect(await c.request("send", { channel: "webchat", to: "main", message: "allowed notice", idempotencyKey: "w3" })).toMatchObject({ status: "sent" });
    await vi.waitFor(() => expect(events.map((e) => [e.sessionKey, e.message?.content[0]?.text])).toContainEqual(["agent:main:main", "allowed notice"]));
  });

  it("D2 R6 with session.scope global, send without a sessionKey applies the policy of the global bucket that chats there", async () => {
    const telegram = new RecordingAdapter("telegram");
    h = await startHarness({ config: { session: { scope: "global" } }, adapters: [telegram] });
    await h.app.router.accept(inbound({ peerId: "42", to: "42", text: "hello" }));
    await h.app.router.idle();
    expect(h.app.sessions.require("global").deliveryContext).toMatchObject({ channel: "telegram", to: "42" });
    const c = await h.client();
    await c.request("sessions.patch", { key: "main", sendPolicy: "deny" });
    await expect(c.request("send", { channel: "telegram", to: "42", message: "sneaky notice", idempotencyKey: "g-nokey" })).rejects.toMatchObject({ message: "send blocked by session policy" });
    expect(telegram.sent.map((m) => m.text)).toEqual(["echo: hello"]);
  });

  it("D2 send without a sessionKey takes the policy of the session at exactly that destination: a forum topic's session does not speak for its group", async () => {
    const telegram = new RecordingAdapter("telegram");
    h = await startHarness({ adapters: [telegram] });
    const group = { chatType: "group" as const, peerId: "-3", to: "-3", wasMentioned: true };
    await h.app.router.accept(inbound({ ...group, text: "hello group" }));
    await h.app.router.idle();
    const c = await h.client();
    await c.request("sessions.patch", { key: "agent:main:telegram:group:-3", sendPolicy: "deny" });
    // The group's topic 9 speaks last: its session is the chat's most recent, and it is allowed.
    await h.app.router.accept(inbound({ ...group, threadId: "9", text: "hello topic" }));
    await h.app.router.idle();
    await vi.waitFor(() => expect(telegram.textsTo("-3")).toEqual(["echo: hello group", "echo: hello topic"]));
    await expect(c.request("send", { channel: "telegram", to: "-3", message: "to the group", idempotencyKey: "s-group" })).rejects.toMatchObject({ code: "INVALID_REQUEST", message: "send blocked by session policy" });
    expect(await c.request("send", { channel: "telegram", to: "-3", threadId: "9", message: "to the topic", idempotencyKey: "s-topic" })).toMatchObject({ status: "sent" });
    expect(telegram.sent.map((m) => [m.text, m.target.threadId])).toEqual([["echo: hello group", undefined], ["echo: hello topic", "9"], ["to the topic", "9"]]);
  });

  it("R29 chat.send of text that merely starts with '/' (not a command) is refused in a denied session", async () => {
    h = await startHarness();
    const c = await h.client();
    await c.request("sessions.patch", { key: "main", sendPolicy: "deny" });
    // Only parsed owner commands are exempt (so `/send on` can lift the deny); a path is ordinary text.
    await expect(c.request("chat.send", { sessionKey: "main", message: "/tmp is full", idempotencyKey: "slash" })).rejects.toMatchObject({ code: "INVALID_REQUEST", message: "send blocked by session policy" });
    expect(h.model.requests).toHaveLength(0);
  });

  it("R29 /new with text in a denied session starts the fresh session and records the text, but runs no agent (as from a chat)", async () => {
    h = await startHarness();
    const c = await h.client();
    await c.request("sessions.patch", { key: "main", sendPolicy: "deny" });
    expect(await c.request("chat.send", { sessionKey: "main", message: "/new first words", idempotencyKey: "new-denied" })).toMatchObject({ status: "ok", command: true });
    // The text is recorded in the fresh session (a run would start right behind that write).
    await vi.waitFor(async () => expect((await c.request("chat.history", { sessionKey: "main" })).messages.map((m: any) => [m.role, m.content])).toEqual([["user", "first words"]]));
    expect(h.app.runtime.get("new-denied:continue")).toBeUndefined();
    expect(h.model.requests).toHaveLength(0);
  });

  it("health reports channels, runs and queue depth", async () => {
    h = await startHarness();
    const c = await h.client();
    const health = await c.request("health", {});
    expect(health).toMatchObject({ ok: true, channels: { "webchat:default": { connected: true } }, runs: { running: 0, queued: 0 }, inbound: { pending: 0, retrying: 0, failed: 0 }, outbox: { pending: 0, failed: 0, unknown: 0 } });
  });
});

describe("gateway unknown agent", () => {
  it("agent with an unknown agentId is INVALID_REQUEST naming it", async () => {
    h = await startHarness();
    const c = await h.client();
    await expect(c.request("agent", { message: "x", agentId: "ghost", idempotencyKey: "g" })).rejects.toBeInstanceOf(GatewayCallError);
    await expect(c.request("agent", { message: "x", agentId: "ghost", idempotencyKey: "g2" })).rejects.toMatchObject({ message: 'unknown agent id "ghost"' });
  });
});


describe("web chat page", () => {
  it("serves the page, its script and stylesheet on the gateway port", async () => {
    h = await startHarness();
    const base = h.url.replace("ws://", "http://");
    const page = await fetch(base);
    expect(page.headers.get("content-type")).toMatch(/text\/html/);
    const html = await page.text();
    expect(html).toContain('<script type="module" src="/webchat.js">');
    expect(html).toMatch(/<label for="message"/);
    const js = await fetch(`${base}webchat.js`);
    expect(js.headers.get("content-type")).toMatch(/javascript/);
    expect(await js.text()).toContain('from "./webchat-client.js"');
    const client = await fetch(`${base}webchat-client.js`);
    expect(client.headers.get("content-type")).toMatch(/javascript/);
    expect(await client.text()).toContain('"chat.send"');
    expect((await fetch(`${base}webchat.css`)).status).toBe(200);
    expect((await fetch(`${base}nope`)).status).toBe(404);
  });

  it("operators receive agent lifecycle events", async () => {
    h = await startHarness();
    const c = await h.client();
    const events: any[] = [];
    c.on("event", (name, payload) => name === "agent" && events.push(payload));
    await c.request("agent", { message: "hi", idempotencyKey: "ev" }, { expectFinal: true });
    await vi.waitFor(() => expect(events.map((e) => e.phase)).toEqual(["queued", "start", "end"]));
    expect(events[2]).toMatchObject({ runId: "ev", status: "ok" });
  });
});

describe("archived sub-agent sessions", () => {
  it("R40 sessions.list hides archived sub-agent sessions unless includeArchived is set", async () => {
    h = await startHarness();
    await h.app.sessions.upsert("agent:main:subagent:abc", "main", { spawnedBy: "agent:main:main", archivedAt: Date.now() });
    const c = await h.client();
    expect((await c.request("sessions.list", {})).sessions).toEqual([]);
    expect((await c.request("sessions.list", { includeArchived: true })).sessions.map((s: { key: string }) => s.key)).toEqual(["agent:main:subagent:abc"]);
  });
});

/** A model reply held until the test releases it: a slow model without asserting on time. */
function gate(): { release: () => void; opened: Promise<void> } {
  let release!: () => void;
  const opened = new Promise<void>((r) => (release = r));
  return { release, opened };
}

describe("gateway idempotency, events and limits", () => {
  it("interfaces §3 chat.send: a retry racing its own original (same idempotencyKey) starts one run and records the message once", async () => {
    h = await startHarness();
    const a = await h.client();
    const b = await h.client();
    // Neither request is awaited before the other is sent: the retry reaches the server while the
    // original is still storing the session entry and the user message.
    const answers = await Promise.all([
      a.request("chat.send", { sessionKey: "main", message: "hey", idempotencyKey: "race" }),
      b.request("chat.send", { sessionKey: "main", message: "hey", idempotencyKey: "race" }),
    ]);
    expect(await a.request("agent.wait", { runId: "race", timeoutMs: 5000 })).toMatchObject({ status: "ok" });
    const history = await a.request("chat.history", { sessionKey: "main" });
    expect(history.messages.map((m: any) => m.role)).toEqual(["user", "assistant"]);
    expect(h.model.requests).toHaveLength(1);
    // Which connection's frame the server read first is not fixed; exactly one is the repeat.
    expect(answers).toEqual(expect.arrayContaining([{ runId: "race", status: "started" }, { runId: "race", status: "started", cached: true }]));
  });

  it("interfaces §3 chat.send repeated on a new connection after the first answer starts no second run (answered cached)", async () => {
    h = await startHarness();
    const a = await h.client();
    expect(await a.request("chat.send", { sessionKey: "main", message: "hey", idempotencyKey: "again" })).toEqual({ runId: "again", status: "started" });
    await a.request("agent.wait", { runId: "again", timeoutMs: 5000 });
    a.close();
    const b = await h.client();
    expect(await b.request("chat.send", { sessionKey: "main", message: "hey", idempotencyKey: "again" })).toEqual({ runId: "again", status: "started", cached: true });
    expect(h.model.requests).toHaveLength(1);
    expect((await b.request("chat.history", { sessionKey: "main" })).messages.map((m: any) => m.role)).toEqual(["user", "assistant"]);
  });

  it("interfaces §3 a chat command (/new with text) repeated with its idempotencyKey on a new connection is answered cached: one reset, one run", async () => {
    h = await startHarness();
    const a = await h.client();
    await a.request("chat.send", { sessionKey: "main", message: "before", idempotencyKey: "first" });
    await a.request("agent.wait", { runId: "first", timeoutMs: 5000 });
    const key = h.app.canonicalKey("main", "main");
    const before = h.app.sessions.get(key)!.sessionId;
    const first = await a.request("chat.send", { sessionKey: "main", message: "/new hello", idempotencyKey: "cmd" });
    expect(first).toEqual({ runId: "cmd", status: "ok", command: true, reply: expect.stringMatching(/^⚙️ New session started/) });
    await a.request("agent.wait", { runId: "cmd:continue", timeoutMs: 5000 });
    const fresh = h.app.sessions.get(key)!.sessionId;
    expect(fresh).not.toBe(before);
    // The page lost the answer (its connection dropped) and sends the request again.
    a.close();
    const b = await h.client();
    expect(await b.request("chat.send", { sessionKey: "main", message: "/new hello", idempotencyKey: "cmd" })).toEqual({ ...first, cached: true });
    await h.app.router.idle();
    await b.request("agent.wait", { runId: "cmd:continue", timeoutMs: 5000 });
    expect(h.app.sessions.get(key)!.sessionId).toBe(fresh);
    expect(h.model.requests).toHaveLength(2);
    expect((await b.request("chat.history", { sessionKey: "main" })).messages.map((m: any) => m.role)).toEqual(["user", "assistant"]);
  });

  it("interfaces §3 event seq counts per connection: each client sees 1, 2, 3… on its own events", async () => {
    h = await startHarness();
    const sockets = [await connectedSocket(h.url), await connectedSocket(h.url)];
    for (const s of sockets) expect(s.hello).toMatchObject({ id: "c", ok: true });
    const c = await h.client();
    await c.request("agent", { message: "hi", idempotencyKey: "seq" }, { expectFinal: true });
    await c.request("chat.send", { sessionKey: "main", message: "hi", idempotencyKey: "seq-chat" });
    await c.request("agent.wait", { runId: "seq-chat", timeoutMs: 5000 });
    for (const s of sockets) {
      // Every event frame the run broadcast; both sockets get the same ones, so with a counter
      // shared between connections each would see only every other number.
      await vi.waitFor(() => expect(s.frames.filter((f) => f.type === "event" && f.event === "chat")).toHaveLength(1));
      const seqs = s.frames.filter((f) => f.type === "event").map((f) => f.seq);
      expect(seqs.length).toBeGreaterThan(3);
      expect(seqs).toEqual(seqs.map((_, i) => i + 1));
      s.ws.close();
    }
  });

  it("interfaces §3 maxPayload: a frame of exactly maxPayload bytes is served, one byte more is refused as too large", async () => {
    h = await startHarness({ config: { gateway: { maxPayload: 512 } } });
    const s = await connectedSocket(h.url);
    // JSON allows whitespace before the closing brace, so padding changes the size and nothing else.
    const frame = (id: string, bytes: number) => {
      const head = JSON.stringify({ type: "req", id, method: "health", params: {} }).slice(0, -1);
      return `${head}${" ".repeat(bytes - Buffer.byteLength(head) - 1)}}`;
    };
    expect(Buffer.byteLength(frame("at", 512))).toBe(512);
    s.ws.send(frame("at", 512));
    expect(await s.next()).toMatchObject({ id: "at", ok: true, payload: { ok: true } });
    s.ws.send(frame("over", 513));
    expect(await s.next()).toMatchObject({ id: "over", ok: false, error: { code: "INVALID_REQUEST", message: "frame too large: 513 bytes (maxPayload 512)" } });
    s.ws.close();
  });

  it("sessions.resolve by a label two sessions share is INVALID_REQUEST naming both, not one of them", async () => {
    h = await startHarness();
    // sessions.patch refuses a second holder of a label, but entries written elsewhere (tools,
    // older state) can still share one; resolve must not pick one silently.
    await h.app.sessions.upsert("agent:main:telegram:group:-11", "main", { label: "twin" });
    await h.app.sessions.upsert("agent:main:telegram:group:-12", "main", { label: "twin" });
    const c = await h.client();
    await expect(c.request("sessions.resolve", { label: "twin" })).rejects.toMatchObject({
      code: "INVALID_REQUEST",
      message: expect.stringMatching(/^multiple sessions found with label: twin \(.*agent:main:telegram:group:-11.*\)$/),
    });
    await expect(c.request("sessions.resolve", { label: "twin" })).rejects.toMatchObject({ message: expect.stringContaining("agent:main:telegram:group:-12") });
  });

  it("interfaces §3 events go to operators only: a node connection receives no chat or agent event from an operator's chat.send", async () => {
    h = await startHarness();
    const node = await h.client({ role: "node", nodeId: "n1" });
    const nodeEvents: string[] = [];
    node.on("event", (name) => nodeEvents.push(name));
    const op = await h.client();
    const opEvents: string[] = [];
    op.on("event", (name) => opEvents.push(name));
    await op.request("chat.send", { sessionKey: "main", message: "hi", idempotencyKey: "op-chat" });
    await vi.waitFor(() => expect(opEvents).toContain("chat"));
    // The broadcast wrote to every socket before the operator got its copy; a reply on the node's
    // socket, requested only now, comes after anything broadcast to it.
    await expect(node.request("health", {})).rejects.toMatchObject({ code: "FORBIDDEN" });
    expect(opEvents).toEqual(expect.arrayContaining(["agent", "chat"]));
    expect(nodeEvents).toEqual([]);
  });

  it("R18 agent.wait without timeoutMs waits (default 30 s) for a run still going, and answers ok when it ends", async () => {
    const g = gate();
    h = await startHarness({ responder: async () => (await g.opened, { content: "slow" }) });
    const c = await h.client();
    expect(await c.request("agent", { message: "go", idempotencyKey: "slow" })).toMatchObject({ status: "accepted" });
    const waited = c.request("agent.wait", { runId: "slow" });
    // Answered after the first wait is registered (same socket, in order), and while the model is held.
    expect(await c.request("agent.wait", { runId: "slow", timeoutMs: 0 })).toEqual({ runId: "slow", status: "timeout", startedAt: expect.any(Number) });
    g.release();
    expect(await waited).toMatchObject({ runId: "slow", status: "ok" });
  });

  it("interfaces §3 agent whose run exceeds its timeout ends with AGENT_TIMEOUT, not UNAVAILABLE", async () => {
    const g = gate();
    h = await startHarness({ responder: async () => (await g.opened, { content: "too late" }) });
    const c = await h.client();
    try {
      await expect(c.request("agent", { message: "go", idempotencyKey: "late", timeout: 0.2 }, { expectFinal: true })).rejects.toMatchObject({ code: "AGENT_TIMEOUT", payload: { runId: "late", status: "timeout" } });
    } finally {
      g.release();
    }
  });

  it("R8 sessions.list with messageLimit leaves tool results out of a row's messages", async () => {
    h = await startHarness();
    const c = await h.client();
    await c.request("agent", { message: "hi", idempotencyKey: "r8" }, { expectFinal: true });
    const entry = h.app.sessions.require("agent:main:main");
    const ref = { path: h.app.sessions.transcriptPath(entry), sessionId: entry.sessionId, key: entry.key };
    await h.app.transcripts.appendMessage(ref, { role: "toolResult", toolCallId: "call_1", toolName: "sessions_list", content: [{ type: "text", text: "secret tool output" }], isError: false, timestamp: Date.now() });
    await h.app.transcripts.appendMessage(ref, { role: "assistant", content: [{ type: "text", text: "done" }], timestamp: Date.now() } as any);
    const list = await c.request("sessions.list", { messageLimit: 5 });
    const row = list.sessions.find((s: any) => s.key === "agent:main:main");
    expect(row.messages.map((m: any) => m.role)).toEqual(["user", "assistant", "assistant"]);
    expect(JSON.stringify(row.messages)).not.toContain("secret tool output");
    // The tool result is in the transcript: the filter, not a missing write, kept it out.
    expect((await c.request("chat.history", { sessionKey: "main" })).messages.map((m: any) => m.role)).toContain("toolResult");

    // R7: still the last N when a turn's tool results outnumber them four to one and more.
    for (let i = 0; i < 12; i++) await h.app.transcripts.appendMessage(ref, { role: "toolResult", toolCallId: `p${i}`, toolName: "agents_list", content: [{ type: "text", text: "{}" }], isError: false, timestamp: Date.now() });
    await h.app.transcripts.appendMessage(ref, { role: "assistant", content: [{ type: "text", text: "after the tools" }], timestamp: Date.now() } as any);
    const two = (await c.request("sessions.list", { messageLimit: 2 })).sessions.find((s: any) => s.key === "agent:main:main");
    expect(two.messages.map((m: any) => m.content[0].text)).toEqual(["done", "after the tools"]);
  });
});

describe("gateway connection lifecycle", () => {
  it("interfaces §3 events go to authenticated connections only: a socket still in its handshake gets no agent event", async () => {
    h = await startHarness();
    const waiting = await rawSocket(h.url);
    expect((await waiting.next()).event).toBe("connect.challenge");
    const c = await h.client();
    const seen: string[] = [];
    c.on("event", (name) => seen.push(name));
    await c.request("agent", { message: "hi", idempotencyKey: "before-handshake" }, { expectFinal: true });
    await vi.waitFor(() => expect(seen).toContain("agent"));
    // The answer to this refused first frame comes after anything broadcast to the socket before it.
    waiting.ws.send(JSON.stringify({ type: "req", id: "late", method: "health", params: {} }));
    expect(await waiting.next()).toMatchObject({ type: "res", id: "late", ok: false });
    expect(waiting.frames.filter((f) => f.type === "event")).toEqual([]);
  });

  it("interfaces §3 policy.maxBufferedBytes: a client that stops reading is disconnected once that much waits for it, instead of the daemon buffering without end", async () => {
    h = await startHarness();
    const key = h.app.canonicalKey("main", "main");
    const entry = await h.app.sessions.upsert(key, "main");
    const ref = { path: h.app.sessions.transcriptPath(entry), sessionId: entry.sessionId, key };
    for (let i = 0; i < 16; i++) await h.app.transcripts.appendMessage(ref, { role: "user", content: `${i}:${"x".repeat(512 * 1024)}`, timestamp: Date.now(), provenance: { kind: "external_user" } });
    const stalled = await connectedSocket(h.url);
    const maxBufferedBytes: number = stalled.hello.payload.policy.maxBufferedBytes;
    let received = 0;
    stalled.ws.on("message", (d: Buffer) => (received += d.length));
    // The client stops reading (a frozen tab, a stuck script) but keeps asking: TCP's window
    // closes, and the answers (8 MB each) pile up in the daemon.
    const socket = (stalled.ws as unknown as { _socket: import("node:net").Socket })._socket;
    socket.pause();
    const asks = Math.ceil((4 * maxBufferedBytes) / (8 * 1024 * 1024));
    for (let i = 0; i < asks; i++) stalled.ws.send(JSON.stringify({ type: "req", id: `h${i}`, method: "chat.history", params: { sessionKey: "main" } }));
    const c = await h.client();
    // Everything asked has been answered (or refused) on the daemon's side.
    await c.request("health", {});
    socket.resume();
    await vi.waitFor(() => expect(stalled.ws.readyState).toBe(WebSocket.CLOSED), { timeout: 15_000 });
    expect(received).toBeLessThan(asks * 8 * 1024 * 1024);
    // The daemon serves the others as before.
    expect(await c.request("health", {})).toMatchObject({ ok: true });
  }, 60_000);

  it("interfaces §3 a tick event follows every tickIntervalMs on a connected socket", async () => {
    h = await startHarness({ config: { gateway: { tickIntervalMs: 20 } } });
    const c = await h.client();
    const ticks: any[] = [];
    c.on("event", (name, payload) => name === "tick" && ticks.push(payload));
    await vi.waitFor(() => expect(ticks.length).toBeGreaterThanOrEqual(2));
    expect(ticks[0]).toEqual({ ts: expect.any(Number) });
  });

  it("interfaces §3 no handshake within 10 s closes the socket; a socket that finished its handshake stays open", async () => {
    h = await startHarness();
    // Opened first, so its own 10 s are up before the silent socket's are.
    const done = await connectedSocket(h.url);
    const s = await rawSocket(h.url);
    await s.next();
    const code = await new Promise<number>((resolve) => s.ws.once("close", (closeCode) => resolve(closeCode)));
    expect(code).toBe(4008);
    done.ws.send(JSON.stringify({ type: "req", id: "still", method: "health", params: {} }));
    expect(await done.next()).toMatchObject({ id: "still", ok: true });
    done.ws.close();
  }, 20_000);

  it("stopping the daemon tells connected clients (a shutdown event) and closes with 1012, service restart", async () => {
    h = await startHarness();
    const c = await h.client();
    const events: Array<[string, unknown]> = [];
    c.on("event", (name, payload) => events.push([name, payload]));
    const closed = new Promise<number>((resolve) => c.on("close", resolve));
    const stopping = h;
    h = undefined;
    await stopping.stop();
    expect(await closed).toBe(1012);
    expect(events).toContainEqual(["shutdown", { reason: "daemon stopping" }]);
  });

  it("interfaces §3 a binary frame is refused with an error naming it; the connection stays open", async () => {
    h = await startHarness();
    const s = await connectedSocket(h.url);
    s.ws.send(Buffer.from(JSON.stringify({ type: "req", id: "bin", method: "health", params: {} })));
    expect(await s.next()).toMatchObject({ type: "res", ok: false, error: { code: "INVALID_REQUEST", message: expect.stringMatching(/binary frames are not supported/) } });
    s.ws.send(JSON.stringify({ type: "req", id: "text", method: "health", params: {} }));
    expect(await s.next()).toMatchObject({ id: "text", ok: true });
    s.ws.close();
  });

  it.each([
    ["3..3", 3, 3, 3],
    ["4..9", 4, 4, 9],
    ["1..3", 3, 1, 3],
  ])("interfaces §3 a protocol range of %s is accepted with protocol %i", async (_range, protocol, minProtocol, maxProtocol) => {
    h = await startHarness();
    const s = await rawSocket(h.url);
    await s.next();
    s.ws.send(connectFrame({ minProtocol, maxProtocol }));
    expect(await s.next()).toMatchObject({ id: "c", ok: true, payload: { protocol } });
    s.ws.close();
  });

  it("a connect asking for no scopes gets read and write, not admin", async () => {
    h = await startHarness();
    const s = await rawSocket(h.url);
    await s.next();
    s.ws.send(connectFrame({ scopes: [] }));
    expect(await s.next()).toMatchObject({ id: "c", ok: true, payload: { auth: { scopes: ["operator.read", "operator.write"] } } });
    s.ws.send(JSON.stringify({ type: "req", id: "p", method: "sessions.patch", params: { key: "main", sendPolicy: "deny" } }));
    expect(await s.next()).toMatchObject({ id: "p", ok: false, error: { code: "FORBIDDEN", details: { missingScope: "operator.admin" } } });
    expect(h.app.sessions.size).toBe(0);
    s.ws.close();
  });

  // The table of interfaces §3, written out here so that a change to METHOD_SCOPES is checked against it.
  const SPEC_SCOPES: Array<[string, "operator.read" | "operator.write" | "operator.admin"]> = [
    ["sessions.list", "operator.read"],
    ["sessions.resolve", "operator.read"],
    ["chat.history", "operator.read"],
    ["health", "operator.read"],
    ["chat.send", "operator.write"],
    ["agent", "operator.write"],
    ["agent.wait", "operator.write"],
    ["send", "operator.write"],
    ["sessions.patch", "operator.admin"],
    ["sessions.reset", "operator.admin"],
    ["sessions.delete", "operator.admin"],
  ];
  const BELOW = { "operator.read": undefined, "operator.write": "operator.read", "operator.admin": "operator.write" } as const;

  it("interfaces §3 scopes: each method is FORBIDDEN one scope below its own (naming it) and let through with its own", async () => {
    h = await startHarness();
    const clients = { "operator.read": await h.client({ scopes: ["operator.read"] }), "operator.write": await h.client({ scopes: ["operator.write"] }), "operator.admin": await h.client({ scopes: ["operator.admin"] }) };
    // Empty params: a method let through fails its params check (or answers), never FORBIDDEN, and changes nothing.
    const codeOf = (scope: keyof typeof clients, method: string) => clients[scope].request(method, {}).then(() => "ok", (e: GatewayCallError) => e.code);
    for (const [method, scope] of SPEC_SCOPES) {
      const below = BELOW[scope];
      if (below) await expect(clients[below].request(method, {}), `${method} with ${below}`).rejects.toMatchObject({ code: "FORBIDDEN", details: { missingScope: scope } });
      expect(await codeOf(scope, method), `${method} with ${scope}`).not.toBe("FORBIDDEN");
    }
    expect(h.model.requests).toHaveLength(0);
  });

  it("interfaces §3 scopes: operator.admin alone may call every operator method, and operator.write alone the read methods", async () => {
    h = await startHarness();
    const admin = await h.client({ scopes: ["operator.admin"] });
    const writer = await h.client({ scopes: ["operator.write"] });
    const codeOf = (c: GatewayClient, method: string) => c.request(method, {}).then(() => "ok", (e: GatewayCallError) => e.code);
    for (const [method, scope] of SPEC_SCOPES) {
      expect(await codeOf(admin, method), `${method} with operator.admin`).not.toBe("FORBIDDEN");
      if (scope === "operator.read") expect(await codeOf(writer, method), `${method} with operator.write`).not.toBe("FORBIDDEN");
    }
    expect(h.model.requests).toHaveLength(0);
  });

  it("a node connection is granted no operator scope, whatever scopes its connect asks for", async () => {
    h = await startHarness();
    const s = await rawSocket(h.url);
    await s.next();
    s.ws.send(connectFrame({ role: "node", nodeId: "n1", scopes: ["operator.admin"] }));
    expect(await s.next()).toMatchObject({ id: "c", ok: true, payload: { auth: { role: "node", scopes: [] } } });
    s.ws.send(JSON.stringify({ type: "req", id: "l", method: "sessions.list", params: {} }));
    expect(await s.next()).toMatchObject({ id: "l", ok: false, error: { code: "FORBIDDEN" } });
    s.ws.close();
  });
});

describe("gateway send and bot accounts", () => {
  it("send to an account no adapter runs is not sent through another account of that channel when there are several", async () => {
    const a = new RecordingAdapter("telegram", "a");
    const b = new RecordingAdapter("telegram", "b");
    h = await startHarness({ adapters: [a, b] });
    const c = await h.client();
    await expect(c.request("send", { channel: "telegram", accountId: "ghost", to: "5", message: "for ghost", idempotencyKey: "ghost" })).rejects.toMatchObject({ code: "UNAVAILABLE" });
    expect([...a.sent, ...b.sent]).toEqual([]);
    expect(await c.request("send", { channel: "telegram", accountId: "b", to: "5", message: "for b", idempotencyKey: "to-b" })).toMatchObject({ status: "sent" });
    expect(b.textsTo("5")).toEqual(["for b"]);
    expect(a.sent).toEqual([]);
  });
});

describe("gateway malformed frames", () => {
  it.each([
    ["not JSON", "{not json"],
    ["JSON but not a request frame", JSON.stringify({ type: "req", id: "f", method: 5 })],
  ])("interfaces §3 a first frame that is %s is refused with an error and the socket closes", async (_what, frame) => {
    h = await startHarness();
    const s = await rawSocket(h.url);
    await s.next();
    const closed = new Promise<number>((resolve) => s.ws.once("close", (code) => resolve(code)));
    s.ws.send(frame);
    expect(await s.next()).toMatchObject({ type: "res", ok: false, error: { code: "INVALID_REQUEST" } });
    expect(await closed).toBe(1008);
  });

  it("interfaces §3 the error for a torn or ill-shaped frame carries the frame's id when it has one", async () => {
    h = await startHarness();
    const s = await connectedSocket(h.url);
    s.ws.send('{"type":"req","id":"torn","method":"health","params":{');
    expect(await s.next()).toMatchObject({ id: "torn", ok: false, error: { code: "INVALID_REQUEST", message: expect.stringMatching(/^invalid JSON/) } });
    s.ws.send(JSON.stringify({ type: "req", id: "shape", method: 42 }));
    expect(await s.next()).toMatchObject({ id: "shape", ok: false, error: { code: "INVALID_REQUEST", message: expect.stringMatching(/^invalid frame: method/) } });
    s.ws.close();
  });

  it("a method named like an Object property (__proto__, constructor, toString) is an unknown method; the connection stays open", async () => {
    h = await startHarness();
    const s = await connectedSocket(h.url);
    for (const method of ["__proto__", "constructor", "toString", "hasOwnProperty"]) {
      s.ws.send(JSON.stringify({ type: "req", id: method, method, params: {} }));
      expect(await s.next()).toMatchObject({ id: method, ok: false, error: { code: "INVALID_REQUEST", message: `unknown method: ${method}` } });
    }
    s.ws.send(JSON.stringify({ type: "req", id: "after", method: "health", params: {} }));
    expect(await s.next()).toMatchObject({ id: "after", ok: true });
    s.ws.close();
  });

  it("interfaces §3 params are strict: an unknown field is INVALID_REQUEST naming it, for every method", async () => {
    h = await startHarness();
    const c = await h.client();
    const node = await h.client({ role: "node", nodeId: "strict" });
    const valid: Record<string, Record<string, unknown>> = {
      "sessions.list": {},
      "sessions.resolve": { key: "main" },
      "sessions.patch": { key: "main" },
      "sessions.reset": { key: "main" },
      "sessions.delete": { key: "agent:main:telegram:group:-1" },
      "chat.history": { sessionKey: "main" },
      "chat.send": { sessionKey: "main", message: "hi", idempotencyKey: "k1" },
      agent: { message: "hi", idempotencyKey: "k2" },
      "agent.wait": { runId: "r" },
      send: { to: "1", message: "hi", channel: "telegram", idempotencyKey: "k3" },
      health: {},
      status: {},
      "node.event": { message: "hi", idempotencyKey: "k4" },
    };
    expect(Object.keys(valid).sort()).toEqual(Object.keys(Params).sort());
    for (const method of Object.keys(valid)) {
      const caller = method === "node.event" ? node : c;
      await expect(caller.request(method, { ...valid[method], bogusField: 1 }), method).rejects.toMatchObject({ code: "INVALID_REQUEST", message: expect.stringContaining('unknown field(s) "bogusField"') });
    }
    expect(h.model.requests).toHaveLength(0);
    expect(h.app.sessions.size).toBe(0);
  });

  it("an HTTP route that throws answers 500 with a JSON error that does not leak the cause; the server keeps serving", async () => {
    h = await startHarness();
    h.daemon.gateway.route("GET", "/boom", () => {
      throw new Error("secret detail");
    });
    const base = h.url.replace("ws://", "http://");
    const res = await fetch(`${base}boom`);
    expect(res.status).toBe(500);
    expect(await res.json()).toEqual({ error: "internal error" });
    expect((await fetch(`${base}healthz`)).status).toBe(200);
  });

  it("a web chat that is disabled serves no page, while /healthz still answers", async () => {
    h = await startHarness({ config: { channels: { webchat: { enabled: false } } } });
    const base = h.url.replace("ws://", "http://");
    expect((await fetch(base)).status).toBe(404);
    expect((await fetch(`${base}webchat.js`)).status).toBe(404);
    expect(await (await fetch(`${base}healthz`)).json()).toMatchObject({ ok: true });
  });
});

describe("gateway client", () => {
  it("a request still waiting when the gateway closes the connection is rejected, not left hanging", async () => {
    h = await startHarness();
    const c = await h.client();
    const rejected = expect(c.request("agent.wait", { runId: "never-started", timeoutMs: 600_000 })).rejects.toThrow(/gateway closed \(1012/);
    const stopping = h;
    h = undefined;
    await stopping.stop();
    await rejected;
  });
});

describe("gateway sessions methods", () => {
  it("sessions.list includes the global session unless includeGlobal is false, and the unknown one only with includeUnknown", async () => {
    h = await startHarness({ config: { session: { scope: "global" } } });
    await h.app.sessions.upsert("global", "main");
    await h.app.sessions.upsert("unknown", "main");
    await h.app.sessions.upsert("agent:main:telegram:group:-1", "main");
    const c = await h.client();
    const keys = async (params: Record<string, unknown>) => (await c.request("sessions.list", params)).sessions.map((s: any) => s.key).sort();
    // The global bucket's row shows it under the key operators use for it: main.
    expect(await keys({})).toEqual(["agent:main:telegram:group:-1", "main"]);
    expect(await keys({ includeGlobal: false })).toEqual(["agent:main:telegram:group:-1"]);
    expect(await keys({ includeUnknown: true })).toEqual(["agent:main:telegram:group:-1", "main", "unknown"]);
  });

  it("sessions.list returns up to limit rows past a few hundred, and 200 without a limit", async () => {
    h = await startHarness();
    for (let i = 0; i < 205; i++) await h.app.sessions.upsert(`agent:main:telegram:group:-${i + 1}`, "main");
    const c = await h.client();
    expect((await c.request("sessions.list", {})).count).toBe(200);
    expect((await c.request("sessions.list", { limit: 205 })).count).toBe(205);
    expect((await c.request("sessions.list", { limit: 150 })).count).toBe(150);
  });

  it("sessions.list spawnedBy takes the parent's short form (main) like the full key", async () => {
    h = await startHarness();
    const c = await h.client();
    await c.request("sessions.patch", { key: "agent:main:subagent:kid", spawnedBy: "agent:main:main" });
    await c.request("sessions.patch", { key: "agent:main:telegram:group:-1" });
    expect((await c.request("sessions.list", { spawnedBy: "main" })).sessions.map((s: any) => s.key)).toEqual(["agent:main:subagent:kid"]);
  });

  it("sessions.resolve: none or several of key/sessionId/label is INVALID_REQUEST; an unknown key or label is NOT_FOUND", async () => {
    h = await startHarness();
    const c = await h.client();
    await c.request("sessions.patch", { key: "main", label: "home" });
    await expect(c.request("sessions.resolve", {})).rejects.toMatchObject({ code: "INVALID_REQUEST", message: "Either key, sessionId, or label is required" });
    await expect(c.request("sessions.resolve", { key: "main", label: "home" })).rejects.toMatchObject({ code: "INVALID_REQUEST", message: "Provide either key, sessionId, or label (not multiple)" });
    await expect(c.request("sessions.resolve", { key: "agent:main:telegram:group:-404" })).rejects.toMatchObject({ code: "NOT_FOUND", message: "session not found: agent:main:telegram:group:-404" });
    await expect(c.request("sessions.resolve", { label: "away" })).rejects.toMatchObject({ code: "NOT_FOUND", message: "no session found with label: away" });
    expect(h.app.sessions.list({}).map((e) => e.key)).toEqual(["agent:main:main"]);
  });

  it("sessions.resolve by label with agentId picks that agent's session of two sharing the label", async () => {
    h = await startHarness({ config: { agents: { list: [{ id: "main", default: true }, { id: "ops" }] } } });
    await h.app.sessions.upsert("agent:main:telegram:group:-1", "main", { label: "shared" });
    await h.app.sessions.upsert("agent:ops:telegram:group:-1", "ops", { label: "shared" });
    const c = await h.client();
    expect(await c.request("sessions.resolve", { label: "shared", agentId: "ops" })).toEqual({ ok: true, key: "agent:ops:telegram:group:-1" });
  });

  it("sessions.patch refuses a label another session holds, and lets a session set its own label again", async () => {
    h = await startHarness();
    const c = await h.client();
    await c.request("sessions.patch", { key: "agent:main:telegram:group:-1", label: "team" });
    await expect(c.request("sessions.patch", { key: "agent:main:telegram:group:-2", label: "team" })).rejects.toMatchObject({ code: "INVALID_REQUEST", message: "label already in use: team (agent:main:telegram:group:-1)" });
    expect(h.app.sessions.get("agent:main:telegram:group:-2")).toBeUndefined();
    expect(await c.request("sessions.patch", { key: "agent:main:telegram:group:-1", label: "team", thinkingLevel: "high" })).toMatchObject({ ok: true, entry: { label: "team" } });
  });

  it("sessions.patch refuses a model no configured provider offers, and keeps the session's model", async () => {
    h = await startHarness();
    const c = await h.client();
    await c.request("sessions.patch", { key: "main", model: "fake/m" });
    await expect(c.request("sessions.patch", { key: "main", model: "nope/x" })).rejects.toMatchObject({ code: "INVALID_REQUEST", message: expect.stringMatching(/^invalid model "nope\/x"/) });
    await expect(c.request("sessions.patch", { key: "main", model: "fake/other" })).rejects.toMatchObject({ code: "INVALID_REQUEST", message: expect.stringMatching(/^invalid model "fake\/other"/) });
    expect(h.app.sessions.require("agent:main:main").model).toBe("fake/m");
  });

  it("sessions.patch spawnedBy: only on a sub-agent key, stored as the full key, and never changed once set", async () => {
    h = await startHarness();
    const c = await h.client();
    await expect(c.request("sessions.patch", { key: "agent:main:telegram:group:-1", spawnedBy: "main" })).rejects.toMatchObject({ code: "INVALID_REQUEST", message: expect.stringMatching(/^spawnedBy is only for sub-agent sessions/) });
    expect(h.app.sessions.get("agent:main:telegram:group:-1")).toBeUndefined();
    await c.request("sessions.patch", { key: "agent:main:subagent:kid", spawnedBy: "main" });
    expect(h.app.sessions.require("agent:main:subagent:kid").spawnedBy).toBe("agent:main:main");
    await expect(c.request("sessions.patch", { key: "agent:main:subagent:kid", spawnedBy: "agent:main:telegram:group:-1" })).rejects.toMatchObject({ code: "INVALID_REQUEST", message: expect.stringMatching(/^spawnedBy cannot be changed once set/) });
    expect(h.app.sessions.require("agent:main:subagent:kid").spawnedBy).toBe("agent:main:main");
  });

  it("chat.send to a name that is neither a session key nor a sessionId starts that session, as a key would (the web chat's session box)", async () => {
    h = await startHarness();
    const c = await h.client();
    expect(await c.request("chat.send", { sessionKey: "work", message: "hello work", idempotencyKey: "work-1" })).toMatchObject({ runId: "work-1", status: "started" });
    expect(await c.request("agent.wait", { runId: "work-1", timeoutMs: 10_000 })).toMatchObject({ status: "ok" });
    // The session named "work", as chat.send to a key names it; not the main session.
    expect(h.app.sessions.list({}).map((e) => e.key)).toEqual([h.app.canonicalKey("work")]);
    // A sessionId still names its session (R12), not a new one called by the id.
    const { sessionId } = h.app.sessions.require(h.app.canonicalKey("work"));
    await c.request("chat.send", { sessionKey: sessionId, message: "by id", idempotencyKey: "work-2" });
    expect(await c.request("agent.wait", { runId: "work-2", timeoutMs: 10_000 })).toMatchObject({ status: "ok" });
    expect(h.app.sessions.list({}).map((e) => e.key)).toEqual([h.app.canonicalKey("work")]);
  });

  it("R42 agent with spawnedBy on a session that is not a sub-agent's is refused, before any run or session", async () => {
    h = await startHarness();
    const c = await h.client();
    await expect(c.request("agent", { message: "hi", sessionKey: "agent:main:telegram:group:-1", spawnedBy: "main", idempotencyKey: "not-sub" })).rejects.toMatchObject({ code: "INVALID_REQUEST", message: expect.stringMatching(/^spawnedBy is only for sub-agent sessions/) });
    expect(h.app.sessions.get("agent:main:telegram:group:-1")).toBeUndefined();
    expect(h.app.runtime.get("not-sub")).toBeUndefined();
    expect(h.model.requests).toHaveLength(0);
    // A sub-agent key may carry one.
    await c.request("agent", { message: "hi", sessionKey: "agent:main:subagent:kid", spawnedBy: "main", idempotencyKey: "sub" }, { expectFinal: true });
    expect(h.app.sessions.require("agent:main:subagent:kid").spawnedBy).toBe("agent:main:main");
  });

  it("sessions.reset and chat.history of a session that does not exist are NOT_FOUND and create nothing", async () => {
    h = await startHarness();
    const c = await h.client();
    await expect(c.request("sessions.reset", { key: "agent:main:telegram:group:-404" })).rejects.toMatchObject({ code: "NOT_FOUND", message: "session not found: agent:main:telegram:group:-404" });
    await expect(c.request("chat.history", { sessionKey: "agent:main:telegram:group:-404" })).rejects.toMatchObject({ code: "NOT_FOUND", message: "session not found: agent:main:telegram:group:-404" });
    expect(h.app.sessions.size).toBe(0);
  });

  it("sessions.delete with deleteTranscript false keeps the transcript where it was", async () => {
    h = await startHarness();
    const c = await h.client();
    await c.request("agent", { message: "hi", idempotencyKey: "keep", sessionKey: "agent:main:telegram:group:-9" }, { expectFinal: true });
    const file = h.app.sessions.transcriptPath(h.app.sessions.require("agent:main:telegram:group:-9"));
    expect(await c.request("sessions.delete", { key: "agent:main:telegram:group:-9", deleteTranscript: false })).toMatchObject({ ok: true, deleted: true, archived: [] });
    expect(h.app.sessions.get("agent:main:telegram:group:-9")).toBeUndefined();
    expect(existsSync(file)).toBe(true);
  });

  it("chat.history returns the newest limit messages, and the newest 200 without a limit", async () => {
    h = await startHarness();
    const entry = await h.app.sessions.upsert("agent:main:main", "main");
    const ref = { path: h.app.sessions.transcriptPath(entry), sessionId: entry.sessionId, key: entry.key };
    for (let i = 0; i < 205; i++) await h.app.transcripts.appendMessage(ref, { role: "user", content: `m${i}`, timestamp: Date.now() });
    const c = await h.client();
    const all = (await c.request("chat.history", { sessionKey: "main" })).messages;
    expect(all).toHaveLength(200);
    expect([all[0].content, all[199].content]).toEqual(["m5", "m204"]);
    expect((await c.request("chat.history", { sessionKey: "main", limit: 2 })).messages.map((m: any) => m.content)).toEqual(["m203", "m204"]);
  });
});

describe("gateway chat.send, agent and agent.wait", () => {
  it("interfaces §3 chat.send whose first attempt failed (UNAVAILABLE) starts the run when retried with the same idempotencyKey", async () => {
    h = await startHarness();
    const entry = await h.app.sessions.upsert("agent:main:main", "main");
    const transcript = h.app.sessions.transcriptPath(entry);
    // A directory where the transcript goes: storing the user message fails, so no run starts.
    await mkdir(transcript, { recursive: true });
    const c = await h.client();
    await expect(c.request("chat.send", { sessionKey: "main", message: "hey", idempotencyKey: "retry" })).rejects.toMatchObject({ code: "UNAVAILABLE" });
    expect(h.app.runtime.get("retry")).toBeUndefined();
    await rmdir(transcript);
    expect(await c.request("chat.send", { sessionKey: "main", message: "hey", idempotencyKey: "retry" })).toEqual({ runId: "retry", status: "started" });
    expect(await c.request("agent.wait", { runId: "retry", timeoutMs: 5000 })).toMatchObject({ status: "ok" });
    expect(h.model.requests).toHaveLength(1);
  });

  it("interfaces §5 /new through chat.send while a web chat message waits behind a running turn: that message is answered from the session it was said in", async () => {
    let release!: () => void;
    const held = new Promise<void>((r) => (release = r));
    h = await startHarness({
      responder: async (req, i) => {
        if (JSON.stringify(req.messages).includes("first question")) await held;
        return echoLastUser(req, i);
      },
    });
    const c = await h.client();
    await c.request("chat.send", { sessionKey: "main", message: "first question", idempotencyKey: "w1" });
    await vi.waitFor(() => expect(h!.app.runtime.counts().running).toBe(1));
    await c.request("chat.send", { sessionKey: "main", message: "second question", idempotencyKey: "w2" });
    const before = h.app.sessions.require("agent:main:main");
    expect(await c.request("chat.send", { sessionKey: "main", message: "/new", idempotencyKey: "w3" })).toMatchObject({ command: true, reply: expect.stringMatching(/^⚙️ New session started/) });
    release();
    for (const runId of ["w1", "w2"]) expect(await c.request("agent.wait", { runId, timeoutMs: 5000 })).toMatchObject({ status: "ok" });
    expect(h.app.runtime.get("w2")?.reply).toBe("echo: second question");
    const old = await h.app.transcripts.readMessages(h.app.sessions.transcriptPath(before));
    expect(old.map((m) => (m.role === "user" ? m.content : m.role))).toEqual(["first question", "second question", "assistant", "assistant"]);
    expect((await c.request("chat.history", { sessionKey: "main" })).messages).toEqual([]);
  });

  it("interfaces §3 chat.send whose run fails broadcasts a chat event with state error", async () => {
    h = await startHarness({ responder: () => ({ status: 400, error: "model refused" }) });
    const c = await h.client();
    const events: any[] = [];
    c.on("event", (name, payload) => name === "chat" && events.push(payload));
    await c.request("chat.send", { sessionKey: "main", message: "hey", idempotencyKey: "boom" });
    await vi.waitFor(() => expect(events.filter((e) => e.state === "error")).toHaveLength(1), { timeout: 10_000 });
    expect(events.find((e) => e.state === "error")).toMatchObject({ runId: "boom", sessionKey: "agent:main:main", errorMessage: expect.any(String) });
  });

  it("agent with an agentId that is not the session key's agent is INVALID_REQUEST and starts nothing", async () => {
    h = await startHarness({ config: { agents: { list: [{ id: "main", default: true }, { id: "ops" }] } } });
    const c = await h.client();
    await expect(c.request("agent", { message: "hi", agentId: "ops", sessionKey: "agent:main:main", idempotencyKey: "mismatch" })).rejects.toMatchObject({ code: "INVALID_REQUEST", message: 'agent "ops" does not match session key agent "main"' });
    expect(h.model.requests).toHaveLength(0);
    expect(h.app.sessions.size).toBe(0);
  });

  it("agent's label names a new session but does not rename one that has a label", async () => {
    h = await startHarness();
    const c = await h.client();
    await c.request("agent", { message: "hi", label: "fresh", sessionKey: "agent:main:telegram:group:-1", idempotencyKey: "l1" }, { expectFinal: true });
    expect(h.app.sessions.require("agent:main:telegram:group:-1").label).toBe("fresh");
    await c.request("agent", { message: "hi", label: "other", sessionKey: "agent:main:telegram:group:-1", idempotencyKey: "l2" }, { expectFinal: true });
    expect(h.app.sessions.require("agent:main:telegram:group:-1").label).toBe("fresh");
  });

  it("agent's label is not given to a second session (labels stay unique, as sessions.patch and sessions_spawn keep them): that one shows it as its display name, and the label still resolves", async () => {
    h = await startHarness();
    const c = await h.client();
    await c.request("agent", { message: "hi", label: "nightly", sessionKey: "agent:main:report-1", idempotencyKey: "n1" }, { expectFinal: true });
    await c.request("agent", { message: "hi", label: "nightly", sessionKey: "agent:main:report-2", idempotencyKey: "n2" }, { expectFinal: true });
    expect(h.app.sessions.require("agent:main:report-1").label).toBe("nightly");
    expect(h.app.sessions.require("agent:main:report-2")).toMatchObject({ displayName: "nightly" });
    expect(h.app.sessions.require("agent:main:report-2").label).toBeUndefined();
    expect(await c.request("sessions.resolve", { label: "nightly" })).toEqual({ ok: true, key: "agent:main:report-1" });
  });

  it("interfaces §3 agent timeout is in seconds: a run held past timeout milliseconds still ends ok", async () => {
    const g = gate();
    h = await startHarness({ responder: async () => (await g.opened, { content: "in time" }) });
    const c = await h.client();
    const final = c.request("agent", { message: "go", idempotencyKey: "secs", timeout: 60 }, { expectFinal: true });
    // Ends when its 200 ms are up, with the model still held: long past 60 ms, well within 60 s.
    expect(await c.request("agent.wait", { runId: "secs", timeoutMs: 200 })).toEqual({ runId: "secs", status: "timeout", startedAt: expect.any(Number) });
    g.release();
    expect(await final).toMatchObject({ runId: "secs", status: "ok", result: { reply: "in time" } });
  });

  it("agent.wait timeoutMs must be a whole number from 0 to 24 h", async () => {
    h = await startHarness();
    const c = await h.client();
    for (const timeoutMs of [-1, 1.5, 24 * 3600_000 + 1]) {
      await expect(c.request("agent.wait", { runId: "r", timeoutMs }), String(timeoutMs)).rejects.toMatchObject({ code: "INVALID_REQUEST", message: expect.stringMatching(/^invalid agent.wait params: timeoutMs/) });
    }
  });

  it("agent delivers its reply to the session's chat only when deliver is set", async () => {
    const telegram = new RecordingAdapter("telegram");
    h = await startHarness({ adapters: [telegram] });
    await h.app.router.accept(inbound({ chatType: "group", peerId: "-2", to: "-2", wasMentioned: true, text: "hello group" }));
    await h.app.router.idle();
    const c = await h.client();
    await c.request("agent", { message: "quiet", sessionKey: "agent:main:telegram:group:-2", idempotencyKey: "quiet" }, { expectFinal: true });
    await c.request("agent", { message: "loud", sessionKey: "agent:main:telegram:group:-2", deliver: true, idempotencyKey: "loud" }, { expectFinal: true });
    // The chat's deliveries go out in order: "echo: quiet", had it been queued, would come first.
    await vi.waitFor(() => expect(telegram.textsTo("-2")).toContain("echo: loud"));
    expect(telegram.textsTo("-2")).toEqual(["echo: hello group", "echo: loud"]);
  });

  it("R29 node.event into a denied node session fails with 'send blocked by session policy'", async () => {
    h = await startHarness();
    const node = await h.client({ role: "node", nodeId: "pi" });
    const first = await node.request("node.event", { message: "one", idempotencyKey: "n1" }, { expectFinal: true });
    expect(first).toMatchObject({ status: "ok" });
    const c = await h.client();
    const sessionKey = h.app.sessions.list({}).find((e) => e.key.includes("node"))!.key;
    await c.request("sessions.patch", { key: sessionKey, sendPolicy: "deny" });
    await expect(node.request("node.event", { message: "two", idempotencyKey: "n2" })).rejects.toMatchObject({ code: "INVALID_REQUEST", message: "send blocked by session policy" });
    expect(h.model.requests).toHaveLength(1);
  });
});

describe("gateway send", () => {
  it("interfaces §3 send repeated with the same idempotencyKey delivers once", async () => {
    const telegram = new RecordingAdapter("telegram");
    h = await startHarness({ adapters: [telegram] });
    const c = await h.client();
    expect(await c.request("send", { channel: "telegram", to: "5", message: "once", idempotencyKey: "dup" })).toMatchObject({ status: "sent" });
    const b = await h.client();
    expect(await b.request("send", { channel: "telegram", to: "5", message: "once", idempotencyKey: "dup" })).toMatchObject({ status: "sent" });
    expect(telegram.textsTo("5")).toEqual(["once"]);
  });

  it("D2 send with a numeric threadId reaches that topic and obeys the topic session's policy", async () => {
    const telegram = new RecordingAdapter("telegram");
    h = await startHarness({ adapters: [telegram] });
    const topic = { chatType: "group" as const, peerId: "-3", to: "-3", wasMentioned: true };
    await h.app.router.accept(inbound({ ...topic, threadId: "9", text: "hello topic" }));
    await h.app.router.accept(inbound({ ...topic, threadId: "10", text: "hello other topic" }));
    await h.app.router.idle();
    const denied = h.app.sessions.list({}).find((e) => e.deliveryContext?.threadId === "9")!.key;
    const c = await h.client();
    await c.request("sessions.patch", { key: denied, sendPolicy: "deny" });
    await expect(c.request("send", { channel: "telegram", to: "-3", threadId: 9, message: "to topic 9", idempotencyKey: "t9" })).rejects.toMatchObject({ code: "INVALID_REQUEST", message: "send blocked by session policy" });
    expect(await c.request("send", { channel: "telegram", to: "-3", threadId: 10, message: "to topic 10", idempotencyKey: "t10" })).toMatchObject({ status: "sent" });
    expect(telegram.sent.filter((m) => m.text.startsWith("to topic")).map((m) => [m.text, m.target.threadId])).toEqual([["to topic 10", "10"]]);
  });

  it("D2 send without a sessionKey takes the policy of the session at that chat through that bot account, not another account's", async () => {
    const a = new RecordingAdapter("telegram", "a");
    const b = new RecordingAdapter("telegram", "b");
    h = await startHarness({ adapters: [a, b] });
    await h.app.sessions.upsert("agent:main:telegram:group:-7", "main", { sendPolicy: "deny", deliveryContext: { channel: "telegram", to: "-7", accountId: "a" } });
    const c = await h.client();
    await expect(c.request("send", { channel: "telegram", accountId: "a", to: "-7", message: "via a", idempotencyKey: "via-a" })).rejects.toMatchObject({ message: "send blocked by session policy" });
    expect(await c.request("send", { channel: "telegram", accountId: "b", to: "-7", message: "via b", idempotencyKey: "via-b" })).toMatchObject({ status: "sent" });
    expect([a.textsTo("-7"), b.textsTo("-7")]).toEqual([[], ["via b"]]);
  });

  it("D2 send without accountId to a channel whose only bot account is not named \"default\" (channels.telegram.accountId) takes that account's session policy", async () => {
    const work = new RecordingAdapter("telegram", "work");
    h = await startHarness({ adapters: [work], config: { commands: { owners: ["telegram:1001"] } } });
    // The group's owner turned replies off there, through the "work" bot.
    await h.app.router.accept(inbound({ accountId: "work", chatType: "group", peerId: "-8", to: "-8", wasMentioned: true, text: "/send off" }));
    await vi.waitFor(() => expect(h!.app.sessions.get("agent:main:telegram:group:-8")?.sendPolicy).toBe("deny"));
    const c = await h.client();
    await expect(c.request("send", { channel: "telegram", to: "-8", message: "announcement", idempotencyKey: "no-account" })).rejects.toMatchObject({ code: "INVALID_REQUEST", message: "send blocked by session policy" });
    expect(work.textsTo("-8").filter((t) => t === "announcement")).toEqual([]);
    // Sent where allowed, and an agent reply delivered to an explicit chat, go out as that account
    // (one bot, one per-account rate limit), not as a "default" account beside it.
    await c.request("send", { channel: "telegram", to: "-9", message: "elsewhere", idempotencyKey: "elsewhere" });
    await c.request("agent", { message: "report", deliver: true, channel: "telegram", to: "-9", idempotencyKey: "deliver" }, { expectFinal: true });
    await vi.waitFor(() => expect(work.textsTo("-9")).toEqual(["elsewhere", "echo: report"]));
    expect(work.sent.filter((m) => m.target.to === "-9").map((m) => m.target.accountId)).toEqual(["work", "work"]);
  });
});

describe("gateway connections that close", () => {
  it("a wait whose client disconnected ends with its connection: 300 closed connections leave no run listener behind", async () => {
    h = await startHarness({ store: "memory" });
    const { events } = h.app.runtime;
    const baseline = events.listenerCount("run");
    for (let i = 0; i < 300; i++) {
      const s = await connectedSocket(h.url);
      // A script waiting a day for a run (here one that never comes), killed meanwhile.
      s.ws.send(JSON.stringify({ type: "req", id: "w", method: "agent.wait", params: { runId: `never-${i}`, timeoutMs: 24 * 3600_000 } }));
      s.ws.send(JSON.stringify({ type: "req", id: "h", method: "health", params: {} }));
      expect(await s.next()).toMatchObject({ id: "h", ok: true });
      s.ws.close();
      await new Promise((r) => s.ws.once("close", r));
    }
    await vi.waitFor(() => expect(events.listenerCount("run")).toBe(baseline), { timeout: 5000, interval: 20 });
    // A client that stays still gets its answer.
    const c = await h.client();
    expect(await c.request("agent.wait", { runId: "never", timeoutMs: 20 })).toEqual({ runId: "never", status: "timeout", unknown: true });
  });

  it.each([
    ["agent", "operator"],
    ["node.event", "node"],
  ] as const)("a repeated %s (its run still going) whose client disconnected leaves no run listener behind", async (method, role) => {
    const g = gate();
    h = await startHarness({ store: "memory", responder: async () => (await g.opened, { content: "late" }) });
    try {
      const first = await h.client(role === "node" ? { role: "node", nodeId: "n1" } : {});
      expect(await first.request(method, { message: "go", idempotencyKey: "held" })).toMatchObject({ status: "accepted" });
      const { events } = h.app.runtime;
      const baseline = events.listenerCount("run");
      for (let i = 0; i < 5; i++) {
        const s = await rawSocket(h.url);
        await s.next();
        s.ws.send(operatorConnect({ auth: {}, ...(role === "node" ? { role: "node", nodeId: "n1", scopes: [] } : {}) }));
        expect(await s.next()).toMatchObject({ id: "c", ok: true });
        // The repeat answers from the run already going (accepted), then would wait for its end.
        s.ws.send(JSON.stringify({ type: "req", id: "r", method, params: { message: "go", idempotencyKey: "held" } }));
        expect(await s.next()).toMatchObject({ id: "r", ok: true, payload: { status: "accepted" } });
        s.ws.close();
        await s.closed;
      }
      await vi.waitFor(() => expect(events.listenerCount("run")).toBe(baseline), { timeout: 5000, interval: 20 });
    } finally {
      g.release();
    }
  });

  it("one connection may wait on more than ten runs at once without a listener-leak warning", async () => {
    h = await startHarness({ store: "memory" });
    const warnings: string[] = [];
    const onWarning = (w: Error) => warnings.push(w.name);
    process.on("warning", onWarning);
    try {
      const s = await connectedSocket(h.url);
      for (let i = 0; i < 12; i++) s.ws.send(JSON.stringify({ type: "req", id: `w${i}`, method: "agent.wait", params: { runId: `never-${i}`, timeoutMs: 24 * 3600_000 } }));
      s.ws.send(JSON.stringify({ type: "req", id: "h", method: "health", params: {} }));
      expect(await s.next()).toMatchObject({ id: "h", ok: true });
      // process.emitWarning reports on a later tick: one more round trip lets it through.
      s.ws.send(JSON.stringify({ type: "req", id: "h2", method: "health", params: {} }));
      expect(await s.next()).toMatchObject({ id: "h2", ok: true });
      expect(warnings).not.toContain("MaxListenersExceededWarning");
      s.ws.close();
      await s.closed;
    } finally {
      process.off("warning", onWarning);
    }
  });
});
