/**
 * The web chat page's logic (src/web/webchat-client.js, the code the browser runs) against the
 * real gateway, through a relay that makes the connection faults a laptop's page meets: the daemon
 * restarting, Wi-Fi dropping, an answer lost on the way. Nothing typed is lost or run twice, and
 * every reply is shown exactly once.
 */
import { rmSync } from "node:fs";
import { afterEach, expect, it, vi } from "vitest";
import WebSocket from "ws";
import type { ConfigInput } from "../../src/config/schema.js";
import { ChatView, GatewayConnection } from "../../src/web/webchat-client.js";
import { echoLastUser, type Responder } from "../fakes/model-server.js";
import { FaultRelay } from "../helpers/fault-relay.js";
import { startHarness, type Harness } from "../helpers/harness.js";

let h: Harness | undefined;
let relay: FaultRelay | undefined;
let conn: GatewayConnection | undefined;

afterEach(async () => {
  conn?.stop();
  await relay?.stop();
  await h?.stop();
  conn = relay = h = undefined;
});

/**
 * ws as a browser's WebSocket delivers messages: each as a task of its own, with the promise
 * continuations of the one before run in between (ws's default runs a chunk's messages at once).
 */
class BrowserWebSocket extends WebSocket {
  constructor(url: string) {
    super(url, { allowSynchronousEvents: false });
  }
}

interface PageOptions {
  responder?: Responder;
  config?: ConfigInput;
  token?: string;
  retryMs?: number[];
  onStatus?: (text: string) => void;
}

async function page(opts: PageOptions = {}) {
  h = await startHarness({ responder: opts.responder, config: opts.config });
  relay = new FaultRelay(Number(new URL(h.url).port));
  const port = await relay.start();
  const state = { reloads: 0, unauthorized: 0 };
  conn = new GatewayConnection({
    url: `ws://127.0.0.1:${port}/`,
    token: opts.token,
    WebSocket: BrowserWebSocket,
    retryMs: opts.retryMs ?? [20],
    onStatus: opts.onStatus,
    onReady: () => void view.reload().then(() => state.reloads++),
    onEvent: (name, payload) => name === "chat" && view.onChat(payload),
    onUnauthorized: () => state.unauthorized++,
  });
  const view = new ChatView(conn);
  return { view, state, shown: () => view.items.map((i) => `${i.role}: ${i.text}`), runIdOf: (n: number) => view.items.filter((i) => i.pending)[n]?.runId };
}

async function userMessages(text: string): Promise<number> {
  const history = await (await h!.client()).request("chat.history", { sessionKey: "main" });
  return (history.messages as Array<{ role: string; content: unknown }>).filter((m) => m.role === "user" && m.content === text).length;
}

it("a message typed while the gateway is unreachable waits, then is sent once it is back: one run, its reply shown once", async () => {
  const p = await page();
  relay!.down();
  conn!.start();
  const sending = p.view.send("hello");
  expect(p.shown()).toEqual(["user: hello", "assistant: …"]);
  relay!.up();
  await sending;
  await vi.waitFor(() => expect(p.shown()).toEqual(["user: hello", "assistant: echo: hello"]));
  expect(h!.model.requests).toHaveLength(1);
  expect(await userMessages("hello")).toBe(1);
});

it("the retry delay starts over once a connection succeeds", async () => {
  // Back right after the first failed attempt, so that exactly one has failed.
  const p = await page({ retryMs: [20, 60_000], onStatus: (text) => text.startsWith("Disconnected") && relay!.up() });
  relay!.down();
  conn!.start();
  await vi.waitFor(() => expect(p.state.reloads).toBe(1));
  relay!.down();
  relay!.up();
  // Had the failed first attempt's count been kept, the next try would be a minute away.
  await vi.waitFor(() => expect(p.state.reloads).toBe(2));
});

it("a run that failed while the page was away shows its error after the reconnect", async () => {
  const p = await page({ responder: () => ({ status: 400, error: "model refused" }) });
  conn!.start();
  await vi.waitFor(() => expect(p.state.reloads).toBe(1));
  relay!.deaf();
  void p.view.send("doomed");
  const runId = p.runIdOf(0)!;
  await vi.waitFor(() => expect(h!.app.runtime.get(runId)?.status).toBe("error"));
  relay!.down();
  relay!.up();
  await vi.waitFor(() => expect(p.state.reloads).toBe(2));
  expect(p.shown()).toEqual(["user: doomed", expect.stringMatching(/^error: .*model refused/)]);
});

it("a chat.send whose answer was lost is sent again with its idempotencyKey: the daemon runs it once, and the reply that came meanwhile is shown once", async () => {
  const p = await page();
  conn!.start();
  await vi.waitFor(() => expect(p.state.reloads).toBe(1));
  relay!.deaf();
  void p.view.send("once");
  const runId = p.runIdOf(0)!;
  // The daemon took the message and answered it, but neither its answer nor the reply reached the page.
  await vi.waitFor(() => expect(h!.app.runtime.get(runId)?.status).toBe("ok"));
  expect(p.shown()).toEqual(["user: once", "assistant: …"]);
  relay!.down();
  relay!.up();
  await vi.waitFor(() => expect(p.state.reloads).toBe(2));
  expect(p.shown()).toEqual(["user: once", "assistant: echo: once"]);
  expect(h!.model.requests).toHaveLength(1);
  expect(await userMessages("once")).toBe(1);
});

it("a command (/new with text) whose answer was lost is sent again: one reset, its text run once and shown with its reply, no placeholder left", async () => {
  const p = await page();
  conn!.start();
  await vi.waitFor(() => expect(p.state.reloads).toBe(1));
  relay!.deaf();
  void p.view.send("/new fresh start");
  const runId = p.runIdOf(0)!;
  // The daemon reset the session and ran the text, but nothing of it reached the page.
  await vi.waitFor(() => expect(h!.app.runtime.get(`${runId}:continue`)?.status).toBe("ok"));
  const sessionId = h!.app.sessions.get(h!.app.canonicalKey("main", "main"))!.sessionId;
  relay!.down();
  relay!.up();
  await vi.waitFor(() => expect(p.state.reloads).toBe(2));
  await h!.app.router.idle();
  await vi.waitFor(() => expect(p.shown()).toEqual(["user: fresh start", "assistant: echo: fresh start"]));
  expect(h!.app.sessions.get(h!.app.canonicalKey("main", "main"))!.sessionId).toBe(sessionId);
  expect(h!.model.requests).toHaveLength(1);
});

it("a run still going across a reconnect keeps its placeholder, and its reply is shown once when it comes", async () => {
  let release!: () => void;
  const gate = new Promise<void>((resolve) => (release = resolve));
  const p = await page({ responder: async (req, i) => (await gate, echoLastUser(req, i)) });
  conn!.start();
  void p.view.send("slow");
  await vi.waitFor(() => expect(h!.model.requests).toHaveLength(1));
  relay!.down();
  relay!.up();
  await vi.waitFor(() => expect(p.state.reloads).toBe(2));
  expect(p.shown()).toEqual(["user: slow", "assistant: …"]);
  release();
  await vi.waitFor(() => expect(p.shown()).toEqual(["user: slow", "assistant: echo: slow"]));
  expect(await userMessages("slow")).toBe(1);
});

it("R29 a chat.send the gateway refuses shows its error in place of the placeholder", async () => {
  const p = await page({ config: { session: { sendPolicy: { default: "deny" } } } });
  conn!.start();
  await p.view.send("blocked?");
  await vi.waitFor(() => expect(p.shown()).toEqual(["user: blocked?", "error: send blocked by session policy"]));
  expect(h!.model.requests).toHaveLength(0);
});

it("a token the gateway refuses stops the retries until the page gives another; then the page loads", async () => {
  const TOKEN = "webchat-token-0123456789";
  const p = await page({ config: { gateway: { auth: { token: TOKEN } } }, token: "wrong" });
  conn!.start();
  await vi.waitFor(() => expect(p.state.unauthorized).toBe(1));
  // Twenty retry delays later, still that one attempt.
  await new Promise((resolve) => setTimeout(resolve, 400));
  expect(relay!.connections).toBe(1);
  conn!.setToken(TOKEN);
  await vi.waitFor(() => expect(p.state.reloads).toBe(1));
  await p.view.send("in");
  await vi.waitFor(() => expect(p.shown()).toEqual(["user: in", "assistant: echo: in"]));
  // A new token while connected replaces the connection: the old one's close starts no other.
  conn!.setToken(TOKEN);
  await vi.waitFor(() => expect(p.state.reloads).toBe(2));
  await new Promise((resolve) => setTimeout(resolve, 400));
  expect(relay!.connections).toBe(3);
  expect(conn!.connected).toBe(true);
});

/**
 * A stand-in for the gateway connection whose answers the test scripts: used where the order of
 * answers and events that matters cannot be produced on demand through the real gateway.
 */
function scripted(answer: (method: string, params: Record<string, string>) => unknown) {
  const request = async (method: string, params: Record<string, string>) => {
    const payload = await answer(method, params);
    // As the gateway answers chat.history: with the key it resolved.
    return method === "chat.history" ? { sessionKey: params.sessionKey, ...(payload as object) } : payload;
  };
  const view = new ChatView({ request } as unknown as GatewayConnection);
  return { view, shown: () => view.items.map((i) => `${i.role}: ${i.text}`) };
}
const said = (text: string) => ({ role: "assistant", content: [{ type: "text", text }] });

it("a reply that a reload already read from the transcript is not shown again when its event comes after", async () => {
  // The run ends between the reload's agent.wait and its chat.history read.
  const transcript: unknown[] = [];
  const { view, shown } = scripted((method, params) => {
    if (method === "chat.send") return void transcript.push({ role: "user", content: params.message });
    if (method === "agent.wait") {
      transcript.push(said("done"));
      return { runId: params.runId, status: "timeout" };
    }
    return { messages: [...transcript] };
  });
  await view.send("race");
  const runId = view.items[1].runId!;
  await view.reload();
  expect(shown()).toEqual(["user: race", "assistant: done", "assistant: …"]);
  view.onChat({ runId, sessionKey: "agent:main:main", state: "final", message: said("done") });
  await vi.waitFor(() => expect(shown()).toEqual(["user: race", "assistant: done"]));
});

it("an event that comes while the history is being read is shown after it, not overwritten by it", async () => {
  const { view, shown } = scripted((method) => {
    if (method !== "chat.history") throw new Error(`unexpected ${method}`);
    view.onChat({ sessionKey: "main", state: "final", message: said("an announce") });
    return { messages: [{ role: "user", content: "earlier" }] };
  });
  await view.reload();
  expect(shown()).toEqual(["user: earlier", "assistant: an announce"]);
});

it("a reload waits for the sends still unanswered, so a message the daemon stored is shown once, from the transcript", async () => {
  const transcript: unknown[] = [];
  let answer!: () => void;
  const { view, shown } = scripted((method, params) => {
    if (method === "agent.wait") return { runId: params.runId, status: "timeout" };
    if (method === "chat.history") return { messages: [...transcript] };
    // Stored at once, answered later: the answer was lost and the resent request is in flight.
    transcript.push({ role: "user", content: params.message });
    return new Promise((resolve) => (answer = () => resolve({ runId: params.idempotencyKey, status: "started" })));
  });
  void view.send("stored");
  const reloaded = view.reload();
  answer();
  await reloaded;
  expect(shown()).toEqual(["user: stored", "assistant: …"]);
});

it("opening another session while the first still loads shows the second, whatever order the answers come in", async () => {
  let first: (() => void) | undefined;
  const { view, shown } = scripted((_method, params) =>
    params.sessionKey === "slow" ? new Promise((resolve) => (first = () => resolve({ messages: [said("slow session")] }))) : { messages: [said("fast session")] },
  );
  const slow = view.open("slow");
  await vi.waitFor(() => expect(first).toBeDefined());
  await view.open("fast");
  first!();
  await slow;
  expect(shown()).toEqual(["assistant: fast session"]);
});

it("events of other sessions are not shown; main and agent:<id>:main are the same session", async () => {
  const { view, shown } = scripted(() => ({ messages: [] }));
  view.onChat({ sessionKey: "agent:main:other", state: "final", message: said("elsewhere") });
  view.onChat({ sessionKey: "agent:main:main", state: "final", message: said("here") });
  expect(shown()).toEqual(["assistant: here"]);
});

/** A second page (another browser tab) on the same daemon, straight to the gateway, showing `sessionKey`. */
function secondPage(sessionKey: string) {
  const other: { view?: ChatView; reloads: number } = { reloads: 0 };
  const tab = new GatewayConnection({
    url: h!.url,
    WebSocket: BrowserWebSocket,
    retryMs: [20],
    onReady: () => void other.view!.reload().then(() => other.reloads++),
    onEvent: (name, payload) => name === "chat" && other.view!.onChat(payload),
  });
  other.view = new ChatView(tab, { sessionKey });
  return { tab, view: other.view, state: other, shown: () => other.view!.items.map((i) => `${i.role}: ${i.text}`) };
}

it("R1 with several agents, a tab on `main` (the default agent's) shows none of another agent's agent:<id>:main conversation; a key typed with upper case still shows its own replies", async () => {
  const p = await page({ config: { agents: { list: [{ id: "main", default: true }, { id: "ops" }] } } });
  conn!.start();
  await vi.waitFor(() => expect(p.state.reloads).toBe(1));
  const ops = secondPage("agent:Ops:main");
  ops.tab.start();
  try {
    await vi.waitFor(() => expect(ops.state.reloads).toBe(1));
    await ops.view.send("hi ops");
    await vi.waitFor(() => expect(ops.shown()).toEqual(["user: hi ops", "assistant: echo: hi ops"]));
    await p.view.send("hi main");
    await vi.waitFor(() => expect(p.shown()).toEqual(["user: hi main", "assistant: echo: hi main"]));
    // Both replies were broadcast to every tab; each tab shows only its own session's.
    await h!.app.router.idle();
    expect(p.shown()).toEqual(["user: hi main", "assistant: echo: hi main"]);
    expect(ops.shown()).toEqual(["user: hi ops", "assistant: echo: hi ops"]);
  } finally {
    ops.tab.stop();
  }
});

it("R6 with session.scope global, the page on `main` shows its replies as they come (the reply event never names `global`)", async () => {
  const events: Array<{ sessionKey: string }> = [];
  const p = await page({ config: { session: { scope: "global" } } });
  const watcher = await h!.client();
  watcher.on("event", (name: string, payload: { sessionKey: string }) => name === "chat" && events.push(payload));
  conn!.start();
  await vi.waitFor(() => expect(p.state.reloads).toBe(1));
  await p.view.send("anyone?");
  await vi.waitFor(() => expect(p.shown()).toEqual(["user: anyone?", "assistant: echo: anyone?"]));
  expect(events.map((e) => e.sessionKey)).toEqual(["main"]);
});

it("interfaces §3 a reply the agent keeps to itself (NO_REPLY) ends its placeholder: no '…' left waiting, no empty reply shown", async () => {
  const p = await page({ responder: () => ({ content: "NO_REPLY" }) });
  conn!.start();
  await vi.waitFor(() => expect(p.state.reloads).toBe(1));
  await p.view.send("just noting this");
  await vi.waitFor(() => expect(p.shown()).toEqual(["user: just noting this"]));
});

it("interfaces §3 a chat command's reply is shown once, though it comes both in the answer and in the chat event that follows it", async () => {
  const p = await page();
  conn!.start();
  await vi.waitFor(() => expect(p.state.reloads).toBe(1));
  await p.view.send("/status");
  // The event was sent on the page's connection right after the answer: before this one's answer.
  await conn!.request("health", {});
  expect(p.shown()).toEqual(["user: /status", expect.stringMatching(/^assistant: \S/)]);
});

it("a send refused in one session shows its error there only: not in the session the page opened meanwhile", async () => {
  const p = await page();
  conn!.start();
  await vi.waitFor(() => expect(p.state.reloads).toBe(1));
  await (await h!.client()).request("sessions.patch", { key: "agent:main:quiet", sendPolicy: "deny" });
  await p.view.open("agent:main:quiet");
  const sending = p.view.send("anyone there?");
  // Switched before the gateway's refusal came back.
  await Promise.all([sending, p.view.open("main")]);
  expect(p.shown()).toEqual([]);
});

it("a reply that came while the page was away, across a daemon restart, is shown once and its placeholder goes", async () => {
  let release!: () => void;
  const gate = new Promise<void>((resolve) => (release = resolve));
  const p = await page({ responder: async (req, i) => (await gate, echoLastUser(req, i)) });
  conn!.start();
  await vi.waitFor(() => expect(p.state.reloads).toBe(1));
  await p.view.send("before the restart");
  await vi.waitFor(() => expect(h!.model.requests).toHaveLength(1));
  relay!.down();
  release();
  // The daemon answers while the page is away, then restarts (a stop drains the run and its reply).
  const { stateDir } = h!;
  const port = Number(new URL(h!.url).port);
  await h!.stop({ keepState: true });
  h = await startHarness({ stateDir, config: { gateway: { port } } });
  try {
    relay!.up();
    await vi.waitFor(() => expect(p.state.reloads).toBe(2));
    expect(p.shown()).toEqual(["user: before the restart", "assistant: echo: before the restart"]);
  } finally {
    await h.stop();
    h = undefined;
    rmSync(stateDir, { recursive: true, force: true });
  }
});

it("R12 a session opened by its sessionId shows its replies as they come, and keeps doing so after /new gives it another sessionId", async () => {
  const p = await page();
  const admin = await h!.client();
  await admin.request("agent", { message: "first", sessionKey: "agent:main:work", idempotencyKey: "w1" }, { expectFinal: true });
  const { sessions } = await admin.request("sessions.list", {});
  const sessionId = (sessions as Array<{ key: string; sessionId: string }>).find((s) => s.key === "agent:main:work")!.sessionId;
  conn!.start();
  await vi.waitFor(() => expect(p.state.reloads).toBe(1));
  await p.view.open(sessionId);
  expect(p.shown()).toEqual(["user: first", "assistant: echo: first"]);
  await p.view.send("second");
  await vi.waitFor(() => expect(p.shown()).toEqual(["user: first", "assistant: echo: first", "user: second", "assistant: echo: second"]));
  await p.view.send("/new");
  await p.view.send("third");
  await vi.waitFor(() => expect(p.shown().slice(-2)).toEqual(["user: third", "assistant: echo: third"]));
});

it("a silent reply (NO_REPLY) stays silent after a reload: the transcript's token is not shown", async () => {
  const p = await page({ responder: () => ({ content: "NO_REPLY" }) });
  conn!.start();
  await vi.waitFor(() => expect(p.state.reloads).toBe(1));
  await p.view.send("just noting this");
  await vi.waitFor(() => expect(p.shown()).toEqual(["user: just noting this"]));
  relay!.down();
  relay!.up();
  await vi.waitFor(() => expect(p.state.reloads).toBe(2));
  expect(p.shown()).toEqual(["user: just noting this"]);
});

it("a message too large for the gateway is refused with an error, and the page stays connected and usable", async () => {
  const p = await page({ config: { gateway: { maxPayload: 4096 } } });
  conn!.start();
  await vi.waitFor(() => expect(p.state.reloads).toBe(1));
  await p.view.send("x".repeat(20_000));
  expect(p.shown()).toEqual([`user: ${"x".repeat(20_000)}`, expect.stringMatching(/^error: .*too large/)]);
  await p.view.send("short");
  await vi.waitFor(() => expect(p.shown().slice(-2)).toEqual(["user: short", "assistant: echo: short"]));
  expect(relay!.connections).toBe(1);
});

it("a message too large for the gateway counts in bytes, as the gateway does: text of many-byte characters is refused by the page, not sent", async () => {
  const p = await page({ config: { gateway: { maxPayload: 4096 } } });
  conn!.start();
  await vi.waitFor(() => expect(p.state.reloads).toBe(1));
  // 2,000 characters, 6,000 bytes in UTF-8: over maxPayload though its length is not.
  const text = "€".repeat(2000);
  await p.view.send(text);
  expect(p.shown()).toEqual([`user: ${text}`, expect.stringMatching(/^error: message too large: \d+ bytes \(the gateway takes at most 4096\)$/)]);
  expect(relay!.connections).toBe(1);
});

it("a message far too large, typed while the gateway was unreachable, is refused on the reconnect instead of sent: it cannot close every connection that follows", async () => {
  const p = await page({ config: { gateway: { maxPayload: 4096 } } });
  conn!.start();
  await vi.waitFor(() => expect(p.state.reloads).toBe(1));
  relay!.down();
  await vi.waitFor(() => expect(conn!.connected).toBe(false));
  // Over four times maxPayload: a frame the gateway's socket would close the connection for.
  void p.view.send("x".repeat(20_000));
  relay!.up();
  await vi.waitFor(() => expect(p.shown()).toEqual([`user: ${"x".repeat(20_000)}`, expect.stringMatching(/^error: message too large/)]), { timeout: 5000 });
  await p.view.send("short");
  await vi.waitFor(() => expect(p.shown().slice(-2)).toEqual(["user: short", "assistant: echo: short"]));
  expect(relay!.connections).toBe(2);
});

it("a run that timed out while the page was away shows its error after the reconnect: no placeholder left waiting", async () => {
  let release!: () => void;
  const gate = new Promise<void>((resolve) => (release = resolve));
  const p = await page({ config: { agents: { defaults: { runTimeoutSeconds: 0.2 } } }, responder: async (req, i) => (await gate, echoLastUser(req, i)) });
  try {
    conn!.start();
    await vi.waitFor(() => expect(p.state.reloads).toBe(1));
    relay!.deaf();
    void p.view.send("too slow");
    const runId = p.runIdOf(0)!;
    await vi.waitFor(() => expect(h!.app.runtime.get(runId)?.status).toBe("timeout"));
    relay!.down();
    relay!.up();
    await vi.waitFor(() => expect(p.state.reloads).toBe(2));
    expect(p.shown()).toEqual(["user: too slow", expect.stringMatching(/^error: .*timed out/)]);
  } finally {
    release();
  }
});
