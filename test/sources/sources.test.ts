/**
 * The internal session sources end to end: cron jobs (R3), the hooks webhook (R4) and gateway
 * nodes (R5) — each lands in its own session kind and lists with channel "internal" (R25).
 */
import { randomUUID } from "node:crypto";
import pino from "pino";
import { afterEach, describe, expect, it, vi } from "vitest";
import type { RunEvent } from "../../src/agents/runtime.js";
import { GatewayCallError } from "../../src/gateway/client.js";
import { CronScheduler } from "../../src/sources/cron.js";
import { MAX_BODY_BYTES } from "../../src/sources/hooks.js";
import { inbound, startHarness, type Harness } from "../helpers/harness.js";
import { RecordingAdapter } from "../helpers/recording-adapter.js";
import { call, callViaGateway, features, messagesOf, settle, stepOf, systemOf, toolDriver } from "../helpers/tool-driver.js";

let h: Harness | undefined;
afterEach(async () => {
  await h?.stop();
  h = undefined;
});

async function row(key: string) {
  const admin = await h!.client();
  const { sessions } = await admin.request("sessions.list", {});
  return sessions.find((r: any) => r.key === key);
}

describe("cron", () => {
  it("R3 R25 a job runs on its schedule in cron:<job.id> as internal_system input; lists as kind cron, channel internal; the reply is only recorded", async () => {
    const telegram = new RecordingAdapter("telegram");
    h = await startHarness({
      store: "memory",
      adapters: [telegram],
      responder: toolDriver(),
      config: {
        cron: {
          jobs: [
            { id: "tick", schedule: "* * * * * *", message: "cron says hi" },
            { id: "off", schedule: "* * * * * *", message: "never", enabled: false },
          ],
        },
      },
    });
    await vi.waitFor(async () => expect((await messagesOf(h!.app, "cron:tick")).some((m) => m.role === "assistant")).toBe(true), { timeout: 3000 });
    const [user, reply] = await messagesOf(h!.app, "cron:tick");
    expect(user).toMatchObject({ role: "user", content: "cron says hi", provenance: { kind: "internal_system" } });
    expect(reply).toMatchObject({ role: "assistant", content: [{ type: "text", text: "echo: cron says hi" }] });
    expect(await row("cron:tick")).toMatchObject({ kind: "cron", channel: "internal" });
    expect(h.app.sessions.get("cron:off")).toBeUndefined();
    expect(telegram.sent).toEqual([]);
    expect(await callViaGateway(h, "main", "sessions_list", { kinds: ["cron"] })).toMatchObject({ sessions: [{ key: "cron:tick", kind: "cron", channel: "internal" }] });
  });

  it("R3 a cron session with a chat route gets its reply delivered through the outbox", async () => {
    const telegram = new RecordingAdapter("telegram");
    h = await startHarness({ store: "memory", adapters: [telegram], responder: toolDriver(), config: { cron: { jobs: [{ id: "report", schedule: "0 0 1 1 *", message: "weekly report" }] } } });
    await h.app.sessions.upsert("cron:report", "main", { deliveryContext: { channel: "telegram", to: "777", accountId: "default" } });
    const job = h.app.config.cron.jobs[0];
    const { done, sessionKey } = await features(h).cron.fire(job);
    expect(sessionKey).toBe("cron:report");
    await done;
    await vi.waitFor(() => expect(telegram.textsTo("777")).toEqual(["echo: weekly report"]));
  });

  it("R27 R30 D2 a cron reply is gated by its session's send policy: a cron session patched to deny delivers nothing", async () => {
    const telegram = new RecordingAdapter("telegram");
    h = await startHarness({ store: "memory", adapters: [telegram], responder: toolDriver(), config: { cron: { jobs: [{ id: "report", schedule: "0 0 1 1 *", message: "weekly report" }] } } });
    await h.app.sessions.upsert("cron:report", "main", { deliveryContext: { channel: "telegram", to: "777", accountId: "default" } });
    const admin = await h.client();
    await admin.request("sessions.patch", { key: "cron:report", sendPolicy: "deny" });
    const { done, runId } = await features(h).cron.fire(h.app.config.cron.jobs[0]);
    await done;
    await vi.waitFor(() => expect(h!.app.outbox.get(`cron:${runId}`)).toMatchObject({ state: "suppressed", sessionKey: "cron:report" }));
    expect(telegram.sent).toEqual([]);
  });

  it.each(["NO_REPLY", "NO_REPLY.", "`NO_REPLY`"])("R3 a %s answer is recorded but not delivered to the cron session's chat", async (answer) => {
    const telegram = new RecordingAdapter("telegram");
    h = await startHarness({ store: "memory", adapters: [telegram], responder: toolDriver(() => ({ content: answer })), config: { cron: { jobs: [{ id: "report", schedule: "0 0 1 1 *", message: "anything new?" }] } } });
    await h.app.sessions.upsert("cron:report", "main", { deliveryContext: { channel: "telegram", to: "777", accountId: "default" } });
    const { done, runId } = await features(h).cron.fire(h.app.config.cron.jobs[0]);
    expect(await done).toMatchObject({ status: "ok", reply: answer });
    expect(h.app.outbox.get(`cron:${runId}`)).toBeUndefined();
    expect(telegram.sent).toEqual([]);
  });

  it("a job's timezone decides the hours it fires in", async () => {
    const hourIn = (timeZone: string, at: number) => Number(new Intl.DateTimeFormat("en-US", { timeZone, hour: "numeric", hourCycle: "h23" }).format(at));
    const now = Date.now();
    const local = [new Date(now).getHours(), new Date(now + 3600_000).getHours()];
    // A zone whose current and next hour are not the local ones, so without the zone the job never fires.
    const zone = ["Pacific/Kiritimati", "Asia/Kolkata"].find((z) => ![hourIn(z, now), hourIn(z, now + 3600_000)].some((hour) => local.includes(hour)));
    expect(zone).toBeDefined();
    const hours = `${hourIn(zone!, now)},${hourIn(zone!, now + 3600_000)}`;
    h = await startHarness({ store: "memory", responder: toolDriver(), config: { cron: { jobs: [{ id: "zoned", schedule: `* * ${hours} * * *`, timezone: zone, message: "zoned hello" }] } } });
    await vi.waitFor(async () => expect((await messagesOf(h!.app, "cron:zoned")).some((m) => m.role === "assistant")).toBe(true), { timeout: 3000 });
  });

  it("a job whose agentId no longer matches its existing session's agent keeps the session's agent, and says so at start", async () => {
    h = await startHarness({
      store: "memory",
      responder: toolDriver(),
      config: { agents: { list: [{ id: "main", default: true }, { id: "ops" }] }, cron: { jobs: [{ id: "report", schedule: "0 0 1 1 *", message: "weekly report", agentId: "ops" }] } },
    });
    await h.app.sessions.upsert("cron:report", "main");
    const warnings: Array<{ msg: string; agentId?: string; sessionAgent?: string }> = [];
    const scheduler = new CronScheduler(h.app, pino({ level: "warn" }, { write: (line: string) => void warnings.push(JSON.parse(line)) }));
    scheduler.start();
    scheduler.stop();
    expect(warnings).toEqual([expect.objectContaining({ agentId: "ops", sessionAgent: "main", msg: expect.stringContaining("sessions.delete cron:report to move it") })]);
    const { done, runId } = await scheduler.fire(h.app.config.cron.jobs[0]);
    await done;
    expect(h.app.sessions.get("cron:report")?.agentId).toBe("main");
    expect(h.app.runtime.get(runId)).toMatchObject({ sessionKey: "cron:report", agentId: "main" });
  });

  it("R19 a cron run that messages another session names its session's chat channel as the requester's", async () => {
    const message = call("sessions_send", { sessionKey: "main", message: "status?", timeoutSeconds: 5 });
    h = await startHarness({
      store: "memory",
      adapters: [new RecordingAdapter("telegram")],
      responder: toolDriver((_req, step) => (step === "a2a-reply" ? { content: "REPLY_SKIP" } : step === "a2a-announce" ? { content: "ANNOUNCE_SKIP" } : undefined)),
      config: { cron: { jobs: [{ id: "report", schedule: "0 0 1 1 *", message }] } },
    });
    await h.app.sessions.upsert("agent:main:main", "main");
    await h.app.sessions.upsert("cron:report", "main", { deliveryContext: { channel: "telegram", to: "777", accountId: "default" } });
    await (await features(h).cron.fire(h.app.config.cron.jobs[0])).done;
    await settle(h);
    const primary = h.model.requests.find((r) => stepOf(r) === "a2a-message");
    expect(systemOf(primary!)).toContain("Agent 1 (requester) session: cron:report.\nAgent 1 (requester) channel: telegram.");
  });

  it("a tick whose run cannot start (the runtime is draining) is logged, not thrown out of the timer, and stores no session", async () => {
    h = await startHarness({ store: "memory", responder: toolDriver(), config: { cron: { jobs: [{ id: "tick", schedule: "* * * * * *", message: "tick" }] } } });
    // The daemon's own scheduler is stopped; this one logs where the test can read it.
    features(h).cron.stop();
    const errors: Array<{ msg: string; err?: string }> = [];
    const scheduler = new CronScheduler(h.app, pino({ level: "error" }, { write: (line: string) => void errors.push(JSON.parse(line)) }));
    await h.app.runtime.drain(0);
    scheduler.start();
    try {
      await vi.waitFor(() => expect(errors).toContainEqual(expect.objectContaining({ msg: "cron job run failed to start", err: expect.stringMatching(/shutting down/) })), { timeout: 3000 });
    } finally {
      scheduler.stop();
    }
    expect(h.app.sessions.get("cron:tick")).toBeUndefined();
  });

  it("a job's agentId names its agent in any letter case: the job is scheduled, not skipped as unknown, and runs as that agent", async () => {
    h = await startHarness({
      store: "memory",
      responder: toolDriver(),
      config: { agents: { list: [{ id: "main", default: true }, { id: "ops" }] }, cron: { jobs: [{ id: "report", schedule: "0 0 1 1 *", message: "weekly report", agentId: "Ops" }] } },
    });
    const logs: Array<{ msg: string }> = [];
    const scheduler = new CronScheduler(h.app, pino({ level: "info" }, { write: (line: string) => void logs.push(JSON.parse(line)) }));
    scheduler.start();
    scheduler.stop();
    expect(logs.map((l) => l.msg)).toEqual(["cron job scheduled"]);
    const { done, runId } = await scheduler.fire(h.app.config.cron.jobs[0]);
    await done;
    expect(h.app.runtime.get(runId)).toMatchObject({ sessionKey: "cron:report", agentId: "ops" });
  });

  it("stop() ends the schedule: no tick starts a run after it", async () => {
    h = await startHarness({ store: "memory", responder: toolDriver(), config: { cron: { jobs: [{ id: "tick", schedule: "* * * * * *", message: "tick" }] } } });
    await vi.waitFor(() => expect(h!.model.requests.length).toBeGreaterThan(0), { timeout: 3000 });
    features(h).cron.stop();
    await settle(h);
    const queued: string[] = [];
    h.app.runtime.events.on("run", (ev: RunEvent) => {
      if (ev.phase === "queued") queued.push(ev.runId);
    });
    // Long enough for at least one more tick.
    await new Promise((resolve) => setTimeout(resolve, 1500));
    expect(queued).toEqual([]);
  });

  it("a run still going when the schedule fires again is not overlapped: that tick is skipped, later ticks run", async () => {
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    let first = true;
    h = await startHarness({
      store: "memory",
      responder: toolDriver(async () => {
        if (!first) return undefined;
        first = false;
        await gate;
        return { content: "slow report" };
      }),
      config: { cron: { jobs: [{ id: "slow", schedule: "* * * * * *", message: "report" }] } },
    });
    await vi.waitFor(() => expect(h!.model.requests).toHaveLength(1), { timeout: 3000 });
    // Two more ticks pass while the first run waits on the model.
    await new Promise((resolve) => setTimeout(resolve, 2100));
    expect(h.app.runtime.activeRuns().filter((r) => r.sessionKey === "cron:slow")).toHaveLength(1);
    const queued: string[] = [];
    h.app.runtime.events.on("run", (ev: RunEvent) => {
      if (ev.phase === "queued" && ev.sessionKey === "cron:slow") queued.push(ev.runId);
    });
    release();
    await vi.waitFor(() => expect(queued.length).toBeGreaterThanOrEqual(1), { timeout: 3000 });
  });
});

describe("hooks: POST /hooks/agent", () => {
  const TOKEN = "hook-secret-0123456789";
  const post = (body: unknown, headers: Record<string, string> = { authorization: `Bearer ${TOKEN}` }) =>
    fetch(`${h!.url.replace("ws://", "http://")}hooks/agent`, { method: "POST", headers: { "content-type": "application/json", ...headers }, body: typeof body === "string" ? body : JSON.stringify(body) });

  it("R4 R25 an authenticated hook starts a run in hook:<uuid> and answers 202 {runId, sessionKey}; the session lists as kind hook, channel internal", async () => {
    h = await startHarness({ store: "memory", responder: toolDriver(), config: { hooks: { enabled: true, token: TOKEN } } });
    const res = await post({ message: "deploy finished" });
    expect(res.status).toBe(202);
    const body = (await res.json()) as { runId: string; sessionKey: string };
    expect(body).toEqual({ runId: expect.any(String), sessionKey: expect.stringMatching(/^hook:[0-9a-f-]{36}$/) });
    await h.app.runtime.wait(body.runId, 5000);
    expect(h.app.runtime.get(body.runId)).toMatchObject({ status: "ok", reply: "echo: deploy finished", sessionKey: body.sessionKey });
    expect(await row(body.sessionKey)).toMatchObject({ kind: "hook", channel: "internal" });
  });

  it("R4 x-switchboard-token works too; an explicit sessionKey is used; wait: true answers with the reply", async () => {
    h = await startHarness({ store: "memory", responder: toolDriver(), config: { hooks: { enabled: true, token: TOKEN } } });
    const res = await post({ message: "ping", sessionKey: "hook:ci", wait: true }, { "x-switchboard-token": TOKEN });
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ runId: expect.any(String), sessionKey: "hook:ci", status: "ok", reply: "echo: ping" });
    expect(await row("hook:ci")).toMatchObject({ kind: "hook", channel: "internal" });
  });

  it("deliver: true with channel and to sends the reply through the outbox", async () => {
    const telegram = new RecordingAdapter("telegram");
    h = await startHarness({ store: "memory", adapters: [telegram], responder: toolDriver(), config: { hooks: { enabled: true, token: TOKEN } } });
    const res = await post({ message: "alert", deliver: true, channel: "telegram", to: "4242" });
    expect(res.status).toBe(202);
    await vi.waitFor(() => expect(telegram.textsTo("4242")).toEqual(["echo: alert"]));
  });

  it("a hook retried with its idempotencyKey (body or Idempotency-Key header) is answered from the first run: one model call, one delivery", async () => {
    const telegram = new RecordingAdapter("telegram");
    h = await startHarness({ store: "memory", adapters: [telegram], responder: toolDriver(), config: { hooks: { enabled: true, token: TOKEN } } });
    const first = (await (await post({ message: "deploy done", deliver: true, channel: "telegram", to: "4242", idempotencyKey: "gh-delivery-1", wait: true })).json()) as Record<string, unknown>;
    expect(first).toMatchObject({ status: "ok", reply: "echo: deploy done" });
    const again = await post({ message: "deploy done", deliver: true, channel: "telegram", to: "4242", idempotencyKey: "gh-delivery-1", wait: true });
    expect(again.status).toBe(200);
    expect(await again.json()).toEqual({ ...first, repeat: true });
    const viaHeader = await post({ message: "deploy done", deliver: true, channel: "telegram", to: "4242" }, { authorization: `Bearer ${TOKEN}`, "idempotency-key": "gh-delivery-1" });
    expect(viaHeader.status).toBe(202);
    expect(await viaHeader.json()).toEqual({ runId: first.runId, sessionKey: first.sessionKey, repeat: true });
    await vi.waitFor(() => expect(h!.app.outbox.get(`hook:${String(first.runId)}`)).toMatchObject({ state: "sent" }));
    expect(telegram.textsTo("4242")).toEqual(["echo: deploy done"]);
    expect(h.model.requests).toHaveLength(1);
    const other = (await (await post({ message: "deploy done", idempotencyKey: "gh-delivery-2", wait: true })).json()) as Record<string, unknown>;
    expect(other.runId).not.toBe(first.runId);
    expect(h.model.requests).toHaveLength(2);
  });

  it("R30 D2 a delivered hook reply is gated by the send policy: a keyPrefix \"hook:\" deny rule leaves the chat untouched", async () => {
    const telegram = new RecordingAdapter("telegram");
    h = await startHarness({
      store: "memory",
      adapters: [telegram],
      responder: toolDriver(),
      config: { hooks: { enabled: true, token: TOKEN }, session: { sendPolicy: { rules: [{ match: { keyPrefix: "hook:" }, action: "deny" }], default: "allow" } } },
    });
    const res = await post({ message: "alert", deliver: true, channel: "telegram", to: "4242" });
    expect(res.status).toBe(202);
    const { runId, sessionKey } = (await res.json()) as { runId: string; sessionKey: string };
    await vi.waitFor(() => expect(h!.app.outbox.get(`hook:${runId}`)).toMatchObject({ state: "suppressed", sessionKey }));
    expect(telegram.sent).toEqual([]);
  });

  it("R4 the Bearer scheme is matched in any letter case, another scheme falls back to x-switchboard-token; hooks without a sessionKey each get a session of their own", async () => {
    h = await startHarness({ store: "memory", responder: toolDriver(), config: { hooks: { enabled: true, token: TOKEN } } });
    const first = await post({ message: "one" }, { authorization: `bearer ${TOKEN}` });
    const second = await post({ message: "two" }, { authorization: `BEARER ${TOKEN}` });
    expect([first.status, second.status]).toEqual([202, 202]);
    const keys = [((await first.json()) as { sessionKey: string }).sessionKey, ((await second.json()) as { sessionKey: string }).sessionKey];
    expect(new Set(keys).size).toBe(2);
    // An Authorization header of another scheme (a proxy's Basic auth) leaves x-switchboard-token in charge.
    expect((await post({ message: "three" }, { authorization: "Basic dXNlcjpwYXNz", "x-switchboard-token": TOKEN })).status).toBe(202);
  });

  it("deliver: true without channel and to sends the reply to the session's own chat, through the outbox", async () => {
    const telegram = new RecordingAdapter("telegram");
    h = await startHarness({ store: "memory", adapters: [telegram], responder: toolDriver(), config: { hooks: { enabled: true, token: TOKEN } } });
    await h.app.sessions.upsert("hook:ops", "main", { deliveryContext: { channel: "telegram", to: "555", accountId: "default" } });
    const res = await post({ message: "to the room", sessionKey: "hook:ops", deliver: true });
    expect(res.status).toBe(202);
    await vi.waitFor(() => expect(telegram.textsTo("555")).toEqual(["echo: to the room"]));
  });

  it("deliver with accountId sends through that account of the channel", async () => {
    const main = new RecordingAdapter("telegram");
    const alerts = new RecordingAdapter("telegram", "alerts");
    h = await startHarness({ store: "memory", adapters: [main, alerts], responder: toolDriver(), config: { hooks: { enabled: true, token: TOKEN } } });
    const res = await post({ message: "alert", deliver: true, channel: "telegram", to: "4242", accountId: "alerts" });
    expect(res.status).toBe(202);
    await vi.waitFor(() => expect(alerts.textsTo("4242")).toEqual(["echo: alert"]));
    expect(main.sent).toEqual([]);
  });

  it("401 for a missing or wrong token; 400 naming the problem for a bad body", async () => {
    h = await startHarness({ store: "memory", responder: toolDriver(), config: { hooks: { enabled: true, token: TOKEN } } });
    expect((await post({ message: "x" }, {})).status).toBe(401);
    expect((await post({ message: "x" }, { authorization: "Bearer wrong-token" })).status).toBe(401);
    expect((await post({ message: "x" }, { "x-switchboard-token": `${TOKEN}x` })).status).toBe(401);
    // The token is checked before the body is read: a caller without it learns nothing about the body.
    expect((await post("{not json", {})).status).toBe(401);
    expect((await post({ message: "x", extra: 1 }, { authorization: "Bearer wrong-token" })).status).toBe(401);
    const cases: Array<[unknown, RegExp]> = [
      ["{not json", /^invalid JSON body/],
      [{}, /message: message required/],
      [{ message: "   " }, /message: message required/],
      [{ message: "x", extra: 1 }, /unknown field\(s\) "extra"/],
      [{ message: "x", agentId: "ghost" }, /unknown agent id "ghost"/],
      [{ message: "x", channel: "telegram" }, /to is required with channel/],
      [{ message: "x", deliver: true }, /deliver needs channel and to/],
      [{ message: "x", channel: "fax", to: "1" }, /channel/],
    ];
    for (const [body, message] of cases) {
      const res = await post(body);
      expect(res.status, JSON.stringify(body)).toBe(400);
      expect(((await res.json()) as { error: string }).error).toMatch(message);
    }
    expect(h.model.requests).toHaveLength(0);
  });

  it("hooks.enabled without hooks.token refuses every request with 401, an empty token included", async () => {
    h = await startHarness({ store: "memory", responder: toolDriver(), config: { hooks: { enabled: true, token: "" } } });
    for (const headers of [{}, { authorization: "Bearer " }, { "x-switchboard-token": "" }, { authorization: "Bearer anything" }] as Array<Record<string, string>>) {
      expect((await post({ message: "x" }, headers)).status, JSON.stringify(headers)).toBe(401);
    }
    expect(h.model.requests).toHaveLength(0);
  });

  it("the hook token is compared whole: a prefix of it or an empty Bearer is refused", async () => {
    h = await startHarness({ store: "memory", responder: toolDriver(), config: { hooks: { enabled: true, token: TOKEN } } });
    for (const headers of [{ authorization: `Bearer ${TOKEN.slice(0, -1)}` }, { authorization: `Bearer ${TOKEN.slice(0, 4)}` }, { "x-switchboard-token": TOKEN.slice(0, 1) }, { authorization: "Bearer " }] as Array<Record<string, string>>) {
      expect((await post({ message: "x" }, headers)).status, JSON.stringify(headers)).toBe(401);
    }
    expect(h.model.requests).toHaveLength(0);
  });

  it("a body of exactly the limit is served; one byte more is refused with 413 and starts no run", async () => {
    h = await startHarness({ store: "memory", responder: toolDriver(), config: { hooks: { enabled: true, token: TOKEN } } });
    // JSON allows whitespace before the closing brace, so padding changes the size and nothing else.
    const body = (bytes: number) => {
      const head = JSON.stringify({ message: "big" }).slice(0, -1);
      return `${head}${" ".repeat(bytes - Buffer.byteLength(head) - 1)}}`;
    };
    const at = await post(body(MAX_BODY_BYTES));
    expect(at.status).toBe(202);
    await h.app.runtime.wait(((await at.json()) as { runId: string }).runId, 5000);
    const over = await post(body(MAX_BODY_BYTES + 1));
    expect(over.status).toBe(413);
    expect(((await over.json()) as { error: string }).error).toMatch(/body too large/);
    expect(h.model.requests).toHaveLength(1);
  });

  it("R4 a session named global or unknown is refused (400), not run", async () => {
    h = await startHarness({ store: "memory", responder: toolDriver(), config: { hooks: { enabled: true, token: TOKEN } } });
    for (const sessionKey of ["global", "unknown"]) {
      const res = await post({ message: "x", sessionKey });
      expect(res.status).toBe(400);
      expect(((await res.json()) as { error: string }).error).toMatch(/is reserved/);
    }
    expect(h.model.requests).toHaveLength(0);
  });

  it("a reply is delivered only when asked, and to the channel and to given rather than the session's own chat", async () => {
    const telegram = new RecordingAdapter("telegram");
    h = await startHarness({ store: "memory", adapters: [telegram], responder: toolDriver(), config: { hooks: { enabled: true, token: TOKEN } } });
    await h.app.router.accept(inbound({ text: "hi", peerId: "1001", to: "1001" }));
    await vi.waitFor(() => expect(telegram.textsTo("1001")).toEqual(["echo: hi"]));
    const chat = h.app.sessions.list().find((e) => e.lastTo === "1001")!.key;
    const quiet = await post({ message: "quiet", sessionKey: chat, wait: true });
    expect(await quiet.json()).toMatchObject({ status: "ok", reply: "echo: quiet" });
    const loud = (await (await post({ message: "loud", sessionKey: chat, deliver: true, channel: "telegram", to: "4242" })).json()) as { runId: string };
    await vi.waitFor(() => expect(telegram.textsTo("4242")).toEqual(["echo: loud"]));
    expect(h.app.outbox.get(`hook:${loud.runId}`)).toMatchObject({ target: { to: "4242" } });
    expect(telegram.textsTo("1001")).toEqual(["echo: hi"]);
  });

  it("agentId picks the agent: a sessionKey is that agent's, and an agent:<id>: chat key runs as its agent", async () => {
    h = await startHarness({ store: "memory", responder: toolDriver(), config: { hooks: { enabled: true, token: TOKEN }, agents: { list: [{ id: "main", default: true }, { id: "ops" }] } } });
    const named = (await (await post({ message: "x", agentId: "ops", sessionKey: "main", wait: true })).json()) as { runId: string; sessionKey: string };
    expect(named.sessionKey).toBe("agent:ops:main");
    expect(h.app.runtime.get(named.runId)).toMatchObject({ sessionKey: "agent:ops:main", agentId: "ops" });
    const keyed = (await (await post({ message: "x", sessionKey: "agent:ops:telegram:group:-5", wait: true })).json()) as { runId: string };
    expect(h.app.runtime.get(keyed.runId)).toMatchObject({ sessionKey: "agent:ops:telegram:group:-5", agentId: "ops" });
    expect(h.app.sessions.get("agent:ops:telegram:group:-5")?.agentId).toBe("ops");
  });

  it("R4 an agent:<id>:hook:<name> key without agentId runs as that agent in hook:<name>; a conflicting or unknown agent is a 400 that stores nothing, another agent's session a 409", async () => {
    h = await startHarness({ store: "memory", responder: toolDriver(), config: { hooks: { enabled: true, token: TOKEN }, agents: { list: [{ id: "main", default: true }, { id: "ops" }] } } });
    const keyed = (await (await post({ message: "x", sessionKey: "agent:Ops:hook:deploy", wait: true })).json()) as { runId: string; sessionKey: string };
    expect(keyed.sessionKey).toBe("hook:deploy");
    expect(h.app.runtime.get(keyed.runId)).toMatchObject({ sessionKey: "hook:deploy", agentId: "ops" });
    expect(h.app.sessions.get("hook:deploy")?.agentId).toBe("ops");

    const conflict = await post({ message: "x", agentId: "main", sessionKey: "agent:ops:hook:other" });
    expect(conflict.status).toBe(400);
    expect(((await conflict.json()) as { error: string }).error).toBe('agentId "main" conflicts with sessionKey "agent:ops:hook:other"');
    const unknown = await post({ message: "x", sessionKey: "agent:nobody:hook:other" });
    expect(unknown.status).toBe(400);
    expect(((await unknown.json()) as { error: string }).error).toBe('unknown agent id "nobody"');
    expect(h.app.sessions.get("hook:other")).toBeUndefined();

    const otherAgent = await post({ message: "x", agentId: "main", sessionKey: "hook:deploy" });
    expect(otherAgent.status).toBe(409);
    expect(((await otherAgent.json()) as { error: string }).error).toBe('session "hook:deploy" belongs to agent "ops", not "main"');

    // Neither agentId nor an agent in the key: the session's own agent runs, not the default one.
    const again = (await (await post({ message: "x", sessionKey: "hook:deploy", wait: true })).json()) as { runId: string };
    expect(h.app.runtime.get(again.runId)).toMatchObject({ sessionKey: "hook:deploy", agentId: "ops" });
    // Keys are case-insensitive, the agent: prefix included.
    const upper = (await (await post({ message: "x", sessionKey: "AGENT:OPS:hook:upper", wait: true })).json()) as { runId: string; sessionKey: string };
    expect(upper.sessionKey).toBe("hook:upper");
    expect(h.app.runtime.get(upper.runId)).toMatchObject({ agentId: "ops" });
  });

  it("wait: true reports a failed run as status error with its error; the hook's text is recorded as external input", async () => {
    h = await startHarness({ store: "memory", responder: () => ({ status: 400, error: "model refused" }), config: { hooks: { enabled: true, token: TOKEN } } });
    const res = await post({ message: "will fail", sessionKey: "hook:failing", wait: true });
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ runId: expect.any(String), sessionKey: "hook:failing", status: "error", error: expect.stringMatching(/model refused/) });
    const said = (await messagesOf(h.app, "hook:failing")).find((m) => m.role === "user");
    expect(said).toMatchObject({ content: "will fail", provenance: { kind: "external_user" }, sender: { id: "hook" } });
  });

  it("404 when hooks are disabled", async () => {
    h = await startHarness({ store: "memory", responder: toolDriver() });
    const res = await post({ message: "x" });
    expect(res.status).toBe(404);
    expect(((await res.json()) as { error: string }).error).toMatch(/hooks are disabled/);
  });
});

describe("nodes", () => {
  it("R5 R25 a node client's messages land in node-<nodeId> (kind node, channel internal) and it gets the reply", async () => {
    h = await startHarness({ store: "memory", responder: toolDriver() });
    const node = await h.client({ role: "node", nodeId: "Kitchen-Pi" });
    const idempotencyKey = randomUUID();
    const reply = await node.request("node.event", { message: "temperature is 21C", idempotencyKey }, { expectFinal: true });
    expect(reply).toEqual({ runId: `node-key:${idempotencyKey}`, status: "ok", reply: "echo: temperature is 21C" });
    expect(await row("node-kitchen-pi")).toMatchObject({ kind: "node", channel: "internal", displayName: "node Kitchen-Pi" });
    const [user] = await messagesOf(h.app, "node-kitchen-pi");
    expect(user).toMatchObject({ role: "user", content: "temperature is 21C", sender: { id: "Kitchen-Pi", channel: "node" } });

    const again = await node.request("node.event", { message: "temperature is 21C", idempotencyKey }, { expectFinal: true });
    expect(again).toEqual(reply);
    expect(h.model.requests).toHaveLength(1);
    await expect(node.request("sessions.list", {})).rejects.toMatchObject({ code: "FORBIDDEN" } satisfies Partial<GatewayCallError>);
    const operator = await h.client();
    await expect(operator.request("node.event", { message: "x", idempotencyKey: randomUUID() })).rejects.toMatchObject({ code: "FORBIDDEN" });
    await settle(h);
  });
});
