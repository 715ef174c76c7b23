/**
 * Conformance of the gateway (interfaces §3) against the real daemon: a real WebSocket client,
 * real SQLite, the fake OpenAI-compatible model server.
 */
import { afterEach, describe, expect, it, vi } from "vitest";
import { inbound, startHarness, type Harness } from "../helpers/harness.js";
import { connectFrame, rawSocket } from "../helpers/frame-socket.js";
import { RecordingAdapter } from "../helpers/recording-adapter.js";

let h: Harness | undefined;
afterEach(async () => {
  await h?.stop();
  h = undefined;
});


describe("interfaces §3 handshake: any other first frame is refused and the socket closes", () => {
  it("interfaces §3 a binary first frame gets an error response, then the socket closes", async () => {
    h = await startHarness();
    const s = await rawSocket(h.url);
    expect((await s.next()).event).toBe("connect.challenge");
    s.ws.send(Buffer.from(connectFrame()));
    expect(await s.next()).toMatchObject({ type: "res", ok: false, error: { code: "INVALID_REQUEST", message: expect.stringMatching(/binary frames are not supported/) } });
    expect(await s.closed).toBe(1008);
  });

  it("interfaces §3 a first frame over maxPayload gets an error response, then the socket closes", async () => {
    h = await startHarness({ config: { gateway: { maxPayload: 512 } } });
    const s = await rawSocket(h.url);
    await s.next();
    const head = connectFrame().slice(0, -1);
    s.ws.send(`${head}${" ".repeat(600)}}`);
    expect(await s.next()).toMatchObject({ type: "res", id: "c", ok: false, error: { code: "INVALID_REQUEST", message: expect.stringMatching(/frame too large/) } });
    expect(await s.closed).toBe(1008);
  });
});

describe("interfaces §3 tick", () => {
  it("interfaces §3 a tick event follows every tickIntervalMs on a node connection too", async () => {
    h = await startHarness({ config: { gateway: { tickIntervalMs: 20 } } });
    const node = await h.client({ role: "node", nodeId: "pi" });
    const ticks: unknown[] = [];
    node.on("event", (name, payload) => name === "tick" && ticks.push(payload));
    await vi.waitFor(() => expect(ticks.length).toBeGreaterThanOrEqual(2));
  });
});

describe("interfaces §3 chat.send events", () => {
  it("interfaces §3 chat.send whose run answers NO_REPLY still ends with a final chat event (no message)", async () => {
    h = await startHarness({ responder: () => ({ content: "NO_REPLY" }) });
    const c = await h.client();
    const events: any[] = [];
    c.on("event", (name, payload) => name === "chat" && events.push(payload));
    await c.request("chat.send", { sessionKey: "main", message: "hush", idempotencyKey: "quiet" });
    expect(await c.request("agent.wait", { runId: "quiet", timeoutMs: 5000 })).toMatchObject({ status: "ok" });
    await vi.waitFor(() => expect(events).toEqual([{ runId: "quiet", sessionKey: "agent:main:main", state: "final" }]));
  });
});

describe("interfaces §3 R6 keys in events", () => {
  it("R6 with session.scope global, hello-ok's mainSessionKey is the key sessions.list shows the main session under", async () => {
    h = await startHarness({ config: { session: { scope: "global" } } });
    const c = await h.client();
    const { mainSessionKey } = (c.hello as any).snapshot.sessionDefaults;
    await c.request("agent", { message: "hi", idempotencyKey: "hello-main" }, { expectFinal: true });
    const keys = (await c.request("sessions.list", {})).sessions.map((r: any) => r.key);
    expect(keys).toEqual([mainSessionKey]);
    expect(mainSessionKey).toBe("main");
  });

  it("R6 with session.scope global, agent events name the session as the agent call's answer does (main), never global", async () => {
    h = await startHarness({ config: { session: { scope: "global" } } });
    const c = await h.client();
    const events: any[] = [];
    c.on("event", (name, payload) => name === "agent" && events.push(payload));
    const accepted = await c.request("agent", { message: "hi", idempotencyKey: "g1" });
    expect(accepted).toMatchObject({ sessionKey: "main" });
    await c.request("agent.wait", { runId: "g1", timeoutMs: 5000 });
    await vi.waitFor(() => expect(events.map((e) => e.phase)).toEqual(["queued", "start", "end"]));
    expect(events.map((e) => e.sessionKey)).toEqual(["main", "main", "main"]);
  });
});

describe("interfaces §3 chat.send params", () => {
  it("interfaces §3 chat.send timeoutMs is not ignored: the run is stopped when it is up", async () => {
    let release!: () => void;
    const held = new Promise<void>((r) => (release = r));
    h = await startHarness({ responder: async () => (await held, { content: "too late" }) });
    const c = await h.client();
    try {
      await c.request("chat.send", { sessionKey: "main", message: "go", idempotencyKey: "short", timeoutMs: 50 });
      expect(await c.request("agent.wait", { runId: "short", timeoutMs: 10_000 })).toMatchObject({ status: "timeout", endedAt: expect.any(Number) });
    } finally {
      release();
    }
  });
});

describe("interfaces §3 ordering of responses and events", () => {
  it("interfaces §3 chat.send of a chat command answers first, then its final chat event follows", async () => {
    h = await startHarness();
    const s = await rawSocket(h.url);
    await s.next();
    s.ws.send(connectFrame());
    expect(await s.next()).toMatchObject({ id: "c", ok: true });
    s.ws.send(JSON.stringify({ type: "req", id: "cmd", method: "chat.send", params: { sessionKey: "main", message: "/status", idempotencyKey: "status-1" } }));
    const seen: string[] = [];
    while (seen.length < 2) {
      const f = await s.next();
      if (f.id === "cmd") seen.push(`res:${f.payload.status}`);
      else if (f.event === "chat") seen.push(`chat:${f.payload.state}`);
    }
    expect(seen).toEqual(["res:ok", "chat:final"]);
    s.ws.close();
  });
});

describe("interfaces §3 chat events, one final per run", () => {
  it("interfaces §3 chat.send whose reply is longer than 100,000 characters ends in one final chat event carrying all of it", async () => {
    const long = `${"word ".repeat(30_000)}end`;
    h = await startHarness({ responder: () => ({ content: long }) });
    const c = await h.client();
    const finals: any[] = [];
    c.on("event", (name, payload) => name === "chat" && payload.runId === "long" && finals.push(payload));
    await c.request("chat.send", { sessionKey: "main", message: "write a lot", idempotencyKey: "long" });
    await c.request("agent.wait", { runId: "long", timeoutMs: 10_000 });
    await vi.waitFor(() => expect(finals.length).toBeGreaterThan(0));
    // The reply's delivery is finished (every chunk sent) and its events are on this socket
    // before the answer to a request made now.
    await vi.waitFor(() => expect(h!.app.outbox.pending).toBe(0));
    await c.request("health", {});
    expect(finals).toHaveLength(1);
    expect(finals[0].message.content[0].text).toBe(long);
  });
});

describe("interfaces §3 events before the handshake", () => {
  it("interfaces §3 a socket still in its handshake gets no event but connect.challenge, not even shutdown; it is closed all the same", async () => {
    h = await startHarness();
    const s = await rawSocket(h.url);
    expect((await s.next()).event).toBe("connect.challenge");
    const stopping = h;
    h = undefined;
    await stopping.stop();
    expect(await s.closed).toBe(1012);
    expect(s.frames).toEqual([]);
  });
});

describe("interfaces §3 agent delivery", () => {
  it.each([
    ["without channel", {}],
    ["with channel last", { channel: "last" }],
  ])("interfaces §3 agent with deliver and a `to` %s delivers to that `to` on the session's last channel, not to the session's own chat", async (_what, extra) => {
    const telegram = new RecordingAdapter("telegram");
    h = await startHarness({ adapters: [telegram] });
    await h.app.router.accept(inbound({ chatType: "group", peerId: "-2", to: "-2", wasMentioned: true, text: "hello group" }));
    await h.app.router.idle();
    const c = await h.client();
    await c.request("agent", { message: "report", sessionKey: "agent:main:telegram:group:-2", deliver: true, to: "-9", idempotencyKey: "to-9", ...extra }, { expectFinal: true });
    await vi.waitFor(() => expect(telegram.sent.map((m) => m.text)).toContain("echo: report"));
    expect(telegram.textsTo("-9")).toEqual(["echo: report"]);
    expect(telegram.textsTo("-2")).toEqual(["echo: hello group"]);
  });

  it("interfaces §3 agent with deliver on another channel than the session's, and no `to`, does not deliver to the session's own chat", async () => {
    const telegram = new RecordingAdapter("telegram");
    const discord = new RecordingAdapter("discord");
    h = await startHarness({ adapters: [telegram, discord] });
    await h.app.router.accept(inbound({ chatType: "group", peerId: "-2", to: "-2", wasMentioned: true, text: "hello group" }));
    await h.app.router.idle();
    const c = await h.client();
    await c.request("agent", { message: "for discord", sessionKey: "agent:main:telegram:group:-2", deliver: true, channel: "discord", idempotencyKey: "elsewhere" }, { expectFinal: true });
    // A delivery made after this one's would come after it: the group's chat sees only its own reply.
    await c.request("agent", { message: "for the group", sessionKey: "agent:main:telegram:group:-2", deliver: true, idempotencyKey: "here" }, { expectFinal: true });
    await vi.waitFor(() => expect(telegram.textsTo("-2")).toContain("echo: for the group"));
    expect(telegram.textsTo("-2")).toEqual(["echo: hello group", "echo: for the group"]);
    expect(discord.sent).toEqual([]);
  });

  it("interfaces §3 agent with deliver and a `to` on the session's own channel goes out through the session's bot account, not the channel's default one", async () => {
    const main = new RecordingAdapter("telegram");
    const work = new RecordingAdapter("telegram", "work");
    h = await startHarness({ adapters: [main, work] });
    await h.app.sessions.upsert("agent:main:telegram:group:-2", "main", { deliveryContext: { channel: "telegram", to: "-2", accountId: "work" } });
    const c = await h.client();
    await c.request("agent", { message: "report", sessionKey: "agent:main:telegram:group:-2", deliver: true, to: "-9", idempotencyKey: "via-work" }, { expectFinal: true });
    await vi.waitFor(() => expect(work.textsTo("-9")).toEqual(["echo: report"]));
    expect(main.sent).toEqual([]);
  });
});
