/**
 * The daemon's start and stop in-process: a channel that cannot be created or started is left
 * out while the rest runs, and a stop finishes the work in flight before it closes the store.
 */
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import pino from "pino";
import { afterEach, describe, expect, it, vi } from "vitest";
import { loadConfigFile } from "../../src/config/load.js";
import { createFullDaemon } from "../../src/full-daemon.js";
import { GatewayClient } from "../../src/gateway/client.js";
import { echoLastUser, FakeModelServer } from "../fakes/model-server.js";
import { inbound, startHarness, type Harness } from "../helpers/harness.js";
import { RecordingAdapter } from "../helpers/recording-adapter.js";
import { features } from "../helpers/tool-driver.js";

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** A harness whose model answers after `delayMs`, stopped by the test itself (state kept for it to read). */
async function slowHarness(delayMs: number, adapters: RecordingAdapter[] = []): Promise<Harness> {
  const model = new FakeModelServer(async (req, i) => ({ ...(await echoLastUser(req, i)), delayMs }));
  cleanups.push(() => model.stop());
  const h = await startHarness({ model, adapters });
  cleanups.push(() => rmSync(h.stateDir, { recursive: true, force: true }));
  return h;
}

describe("daemon lifecycle", () => {
  it("a channel whose adapter cannot be created is left out; the daemon starts and serves the others", async () => {
    const h = await startHarness({
      config: { channels: { webchat: { enabled: true }, telegram: { enabled: true, botToken: "123:abc" } } },
      adapterFactories: {
        telegram: async () => {
          throw new Error("telegram SDK failed to load");
        },
      },
    });
    cleanups.push(() => h.stop());
    const c = await h.client();
    const health = await c.request("health", {});
    expect(Object.keys(health.channels)).toEqual(["webchat:default"]);
    expect(await c.request("agent", { message: "still here", idempotencyKey: "up" }, { expectFinal: true })).toMatchObject({ status: "ok" });
  });

  it("stop waits for a run in flight: its reply is in the transcript when stop returns", async () => {
    const h = await slowHarness(800);
    const c = await h.client();
    await c.request("agent", { message: "slow one", idempotencyKey: "in-flight" });
    await vi.waitFor(() => expect(h.model.requests).toHaveLength(1));
    await h.stop({ keepState: true });
    expect(h.app.runtime.get("in-flight")).toMatchObject({ status: "ok", reply: "echo: slow one" });
    const entry = h.app.sessions.require("agent:main:main");
    const lines = readFileSync(h.app.sessions.transcriptPath(entry), "utf8").trim().split("\n").map((l) => JSON.parse(l));
    expect(lines.filter((l) => l.type === "message").map((l) => l.message.role)).toEqual(["user", "assistant"]);
  });

  it("stop waits for a chat message in flight: its reply is sent before stop returns", async () => {
    const telegram = new RecordingAdapter("telegram");
    const h = await slowHarness(800, [telegram]);
    await h.app.router.accept(inbound({ text: "answer before you go", peerId: "1001", to: "1001" }));
    await vi.waitFor(() => expect(h.model.requests).toHaveLength(1));
    await h.stop({ keepState: true });
    expect(telegram.textsTo("1001")).toEqual(["echo: answer before you go"]);
  });

  it("a chat message whose run the stop cut short is answered after the restart, not told its run was aborted", async () => {
    const stateDir = mkdtempSync(path.join(os.tmpdir(), "sb-cut-short-"));
    cleanups.push(() => rmSync(stateDir, { recursive: true, force: true }));
    // The first answer takes longer than any stop waits for it; later ones come at once.
    const model = new FakeModelServer(async (req, i) => ({ ...(await echoLastUser(req, i)), ...(i === 0 ? { delayMs: 60_000 } : {}) }));
    cleanups.push(() => model.stop());
    const before = new RecordingAdapter("telegram");
    const h = await startHarness({ stateDir, model, adapters: [before] });
    await h.app.router.accept(inbound({ text: "a long question", peerId: "1001", to: "1001" }));
    await vi.waitFor(() => expect(model.requests).toHaveLength(1));
    // What stop() does once its wait for the runs in flight has run out.
    h.app.router.stop();
    await h.app.runtime.drain(0);
    await h.app.router.idle();
    await h.stop({ keepState: true });
    expect(before.sent).toEqual([]);

    const after = new RecordingAdapter("telegram");
    const again = await startHarness({ stateDir, model, adapters: [after] });
    cleanups.push(() => again.stop({ keepState: true }));
    await vi.waitFor(() => expect(after.textsTo("1001")).toEqual(["echo: a long question"]));
    await again.app.router.idle();
    expect(after.sent.map((m) => m.text)).toEqual(["echo: a long question"]);
  });

  it("stop waits for background work (agent-to-agent flows, announces) still running", async () => {
    const h = await slowHarness(0);
    let finished = false;
    features(h).background.run("test work", {}, async () => {
      await new Promise((resolve) => setTimeout(resolve, 300));
      finished = true;
    });
    await h.stop({ keepState: true });
    expect(finished).toBe(true);
  });

  it("a hook arriving while the daemon drains is answered 503 at once, not left hanging, and starts no run nor leaves a session", async () => {
    const model = new FakeModelServer(async (req, i) => ({ ...(await echoLastUser(req, i)), delayMs: 800 }));
    cleanups.push(() => model.stop());
    const h = await startHarness({ model, config: { hooks: { enabled: true, token: "hook-token-123456" } } });
    const c = await h.client();
    await c.request("agent", { message: "keeps the drain busy", idempotencyKey: "busy" });
    await vi.waitFor(() => expect(model.requests).toHaveLength(1));
    const stopping = h.stop();
    await vi.waitFor(() => expect(h.app.runtime.accepting).toBe(false));
    const res = await fetch(`${h.url.replace("ws://", "http://")}hooks/agent`, { method: "POST", headers: { authorization: "Bearer hook-token-123456", "content-type": "application/json" }, body: JSON.stringify({ message: "too late" }) });
    expect(res.status).toBe(503);
    expect(await res.json()).toEqual({ error: "the daemon is shutting down: hook not accepted, send it again once it is back" });
    await stopping;
    expect(model.requests).toHaveLength(1);
    expect(h.app.sessions.list().filter((e) => e.key.startsWith("hook:"))).toEqual([]);
  });

  it("a web chat message (chat.send), an agent call or a node's event arriving while the daemon drains is refused at once and stores nothing: no session, no transcript line its retry after the restart would repeat", async () => {
    const model = new FakeModelServer(async (req, i) => ({ ...(await echoLastUser(req, i)), delayMs: 800 }));
    cleanups.push(() => model.stop());
    const h = await startHarness({ model });
    cleanups.push(() => rmSync(h.stateDir, { recursive: true, force: true }));
    // Not the harness's client: its stop() closes those before draining.
    const c = new GatewayClient({ url: h.url, token: h.app.config.gateway.auth.token });
    await c.connect();
    const node = new GatewayClient({ url: h.url, token: h.app.config.gateway.auth.token, role: "node", nodeId: "pi" });
    await node.connect();
    cleanups.push(() => c.close(), () => node.close());
    await c.request("agent", { message: "keeps the drain busy", idempotencyKey: "busy" });
    await vi.waitFor(() => expect(model.requests).toHaveLength(1));
    const main = h.app.sessions.require("agent:main:main");
    const stopping = h.stop({ keepState: true });
    await vi.waitFor(() => expect(h.app.runtime.accepting).toBe(false));
    await expect(c.request("chat.send", { sessionKey: "main", message: "too late for main", idempotencyKey: "late-1" })).rejects.toThrow(/shutting down/);
    await expect(c.request("chat.send", { sessionKey: "work", message: "too late for work", idempotencyKey: "late-2" })).rejects.toThrow(/shutting down/);
    await expect(c.request("agent", { sessionKey: "agent:main:elsewhere", message: "too late", idempotencyKey: "late-3" })).rejects.toThrow(/shutting down/);
    await expect(node.request("node.event", { message: "too late", idempotencyKey: "late-4" })).rejects.toThrow(/shutting down/);
    await stopping;
    expect(h.app.sessions.list().map((e) => e.key)).toEqual(["agent:main:main"]);
    const said = readFileSync(h.app.sessions.transcriptPath(main), "utf8").trim().split("\n").map((l) => JSON.parse(l));
    expect(said.filter((l) => l.type === "message" && l.message.role === "user").map((l) => l.message.content)).toEqual(["keeps the drain busy"]);
  });
});

describe("several agents at start-up", () => {
  it("an agent removed from agents.list while a binding and sessions still name it is a start-up warning, not a silent change of agent", async () => {
    const first = await startHarness({ config: { agents: { list: [{ id: "main", default: true }, { id: "ops" }] }, bindings: [{ agentId: "ops", match: { channel: "telegram", peer: { kind: "group", id: "-100400" } } }] } });
    cleanups.push(() => rmSync(first.stateDir, { recursive: true, force: true }));
    await first.app.router.accept(inbound({ chatType: "group", peerId: "-100400", to: "-100400", wasMentioned: true, text: "for ops" }));
    await first.app.router.idle();
    expect(first.app.sessions.get("agent:ops:telegram:group:-100400")).toBeDefined();
    await first.stop({ keepState: true });

    const lines: Array<{ level: number; msg: string; [k: string]: unknown }> = [];
    const log = pino({ level: "warn" }, { write: (line: string) => void lines.push(JSON.parse(line)) });
    const h = await startHarness({ stateDir: first.stateDir, log, config: { bindings: [{ agentId: "ops", match: { channel: "telegram", peer: { kind: "group", id: "-100400" } } }] } });
    cleanups.push(() => h.stop());
    const warnings = lines.filter((l) => l.level === 40);
    expect(warnings).toContainEqual(expect.objectContaining({ binding: 0, agentId: "ops", msg: expect.stringContaining('not in agents.list: its chats go to the default agent "main"') }));
    expect(warnings).toContainEqual(expect.objectContaining({ sessions: { ops: 1 }, msg: expect.stringContaining("not in agents.list") }));
  });
});

describe("daemon start: the model", () => {
  /** The start-up warnings of a daemon on the embedded defaults with `env` as its environment. */
  async function startWarnings(env: NodeJS.ProcessEnv): Promise<string[]> {
    const stateDir = mkdtempSync(path.join(os.tmpdir(), "sb-model-env-"));
    cleanups.push(() => rmSync(stateDir, { recursive: true, force: true }));
    const config = loadConfigFile("config/default.json5", { SWITCHBOARD_STATE_DIR: stateDir });
    const lines: Array<{ level: number; msg: string }> = [];
    const log = pino({ level: "warn" }, { write: (line: string) => void lines.push(JSON.parse(line)) });
    const daemon = createFullDaemon({ config: { ...config, gateway: { ...config.gateway, port: 0 } }, log, env });
    await daemon.start();
    await daemon.stop();
    return lines.filter((l) => l.level === 40 && l.msg.startsWith("no model configured")).map((l) => l.msg);
  }

  it("half a model set-up from the environment is named in the start-up warning, not taken for no set-up at all", async () => {
    expect(await startWarnings({})).toEqual(['no model configured — chats get a notice; see README "Connect a model"']);
    expect(await startWarnings({ SWITCHBOARD_MODEL: "gpt-4o-mini" })).toEqual([
      'no model configured (SWITCHBOARD_MODEL is set but OPENAI_BASE_URL is not: set it to the server\'s address (or OPENAI_API_KEY, for OpenAI\'s https://api.openai.com/v1)) — chats get a notice; see README "Connect a model"',
    ]);
    // A key and a model: OpenAI itself, as with the OpenAI SDK.
    expect(await startWarnings({ SWITCHBOARD_MODEL: "gpt-4o-mini", OPENAI_API_KEY: "sk-test" })).toEqual([]);
    expect(await startWarnings({ OPENAI_BASE_URL: "http://127.0.0.1:9/v1" })).toEqual([
      'no model configured (OPENAI_BASE_URL is set but SWITCHBOARD_MODEL is not: set it to one of the server\'s models) — chats get a notice; see README "Connect a model"',
    ]);
    expect(await startWarnings({ OPENAI_BASE_URL: "http://127.0.0.1:9/v1", SWITCHBOARD_MODEL: "llama3.1" })).toEqual([]);
  });
});
