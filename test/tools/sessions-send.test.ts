/**
 * sessions_send end to end (R13–R22): a requester Telegram group sends to a target Telegram
 * group; the scripted model answers each step, recognised by its system prompt's first line;
 * announces are observed at a recording Telegram adapter behind the real outbox.
 */
import { afterEach, describe, expect, it, vi } from "vitest";
import { PlatformError } from "../../src/channels/types.js";
import { A2A_STEP_TIMEOUT_MS } from "../../src/tools/a2a-flow.js";
import type { ConfigInput } from "../../src/config/schema.js";
import type { ModelReply, ModelRequest } from "../fakes/model-server.js";
import { inbound, startHarness, type Harness } from "../helpers/harness.js";
import { RecordingAdapter } from "../helpers/recording-adapter.js";
import { openStoreDb } from "../helpers/store-db.js";
import { afterTool, call, callViaGateway, callViaTelegram, countSteps, crossDeadline, lastToolResult, lastUserText, messagesOf, sessionOf, settle, stepOf, systemOf, toolDriver, type Step } from "../helpers/tool-driver.js";

const REQ = "agent:main:telegram:group:-100req";
const TGT = "agent:main:telegram:group:-100tgt";
const THIRD = "agent:main:telegram:group:-100third";

let h: Harness | undefined;
let telegram: RecordingAdapter;
let discord: RecordingAdapter;
let script: ((req: ModelRequest, step: Step) => ModelReply | undefined | Promise<ModelReply | undefined>) | undefined;

afterEach(async () => {
  await h?.stop();
  h = undefined;
  script = undefined;
});

async function boot(config: ConfigInput = {}, store: "memory" | "sqlite" = "memory"): Promise<Harness> {
  telegram = new RecordingAdapter("telegram");
  discord = new RecordingAdapter("discord");
  h = await startHarness({ store, config, adapters: [telegram, discord], responder: toolDriver((req, step) => script?.(req, step)) });
  for (const peer of ["-100req", "-100tgt"]) await greet(peer);
  telegram.sent.length = 0;
  return h;
}

/** Opens a group chat's session with a first message. */
async function greet(peer: string): Promise<void> {
  await h!.app.router.accept(inbound({ chatType: "group", peerId: peer, to: peer, wasMentioned: true, text: `hi ${peer}` }));
  await h!.app.router.idle();
}

async function send(args: Record<string, unknown>) {
  const { result } = await callViaTelegram(h!, { peerId: "-100req" }, "sessions_send", args);
  return result;
}

/** The model holds its answer to `held` until the returned release() is called; `others` answers the other steps. */
function holdStep(held: Step, content: string, others: (step: Step) => ModelReply | undefined): () => void {
  let release!: () => void;
  const released = new Promise<void>((resolve) => (release = resolve));
  script = async (_req, step) => (step === held ? released.then(() => ({ content })) : others(step));
  return release;
}

const stepRequests = (step: Step) => h!.model.requests.filter((r) => stepOf(r) === step && r.messages.at(-1)?.role !== "tool");

describe("sessions_send: the primary run", () => {
  it("R14 timeoutSeconds > 0 waits and returns {runId, status: ok, reply}", async () => {
    await boot();
    script = (_req, step) => (step === "a2a-reply" ? { content: "REPLY_SKIP" } : step === "a2a-announce" ? { content: "ANNOUNCE_SKIP" } : undefined);
    const result = await send({ sessionKey: TGT, message: "hello target", timeoutSeconds: 5 });
    expect(result).toEqual({ runId: expect.any(String), status: "ok", reply: "echo: hello target", sessionKey: TGT });
    expect(h!.app.runtime.get(result.runId)).toMatchObject({ sessionKey: TGT, status: "ok", lane: "nested" });
  });

  it("R18 the wait is the server-side agent.wait: the same runId answers agent.wait from another connection", async () => {
    await boot();
    script = (_req, step) => (step === "a2a-reply" ? { content: "REPLY_SKIP" } : step === "a2a-announce" ? { content: "ANNOUNCE_SKIP" } : undefined);
    const wait = vi.spyOn(h!.app.runtime, "wait");
    const result = await send({ sessionKey: TGT, message: "hello", timeoutSeconds: 7 });
    expect(wait).toHaveBeenCalledWith(result.runId, 7000);
    const outside = await h!.client();
    expect(await outside.request("agent.wait", { runId: result.runId, timeoutMs: 0 })).toMatchObject({ runId: result.runId, status: "ok" });
  });

  it("R19 R20 the target run gets the agent-to-agent context and an inter_session user message", async () => {
    await boot();
    script = (_req, step) => (step === "a2a-reply" ? { content: "REPLY_SKIP" } : step === "a2a-announce" ? { content: "ANNOUNCE_SKIP" } : undefined);
    await send({ sessionKey: TGT, message: "status report please", timeoutSeconds: 5 });
    const [primary] = stepRequests("a2a-message");
    expect(sessionOf(primary)).toBe(TGT);
    expect(systemOf(primary)).toContain(`\n\nAgent-to-agent message context:\nAgent 1 (requester) session: ${REQ}.\nAgent 1 (requester) channel: telegram.\nAgent 2 (target) session: ${TGT}.`);
    expect(primary.messages.at(-1).content).toBe(`[Inter-session message] sourceSession=${REQ} sourceChannel=telegram sourceTool=sessions_send\nstatus report please`);
    const user = (await messagesOf(h!.app, TGT)).filter((m) => m.role === "user").at(-1);
    expect(user).toMatchObject({ role: "user", content: "status report please", provenance: { kind: "inter_session", sourceSessionKey: REQ, sourceChannel: "telegram", sourceTool: "sessions_send" } });
  });

  it("R13 timeoutSeconds = 0 returns {runId, status: accepted} at once; the run and the announce still happen", async () => {
    await boot();
    script = (_req, step) => (step === "a2a-message" ? { delayMs: 400, content: "slow answer" } : step === "a2a-reply" ? { content: "REPLY_SKIP" } : step === "a2a-announce" ? { content: "Target says: slow answer" } : undefined);
    const result = await send({ sessionKey: TGT, message: "no hurry", timeoutSeconds: 0 });
    expect(result).toEqual({ runId: expect.any(String), status: "accepted", sessionKey: TGT });
    const returnedAt = (await messagesOf(h!.app, REQ)).filter((m) => m.role === "toolResult").at(-1)!.timestamp;
    await vi.waitFor(() => expect(h!.app.runtime.get(result.runId)?.status).toBe("ok"));
    expect(h!.app.runtime.get(result.runId)!.endedAt!).toBeGreaterThan(returnedAt);
    await settle(h!);
    expect(telegram.textsTo("-100tgt")).toEqual(["Target says: slow answer"]);
  });

  it("R15 a wait that times out returns {status: timeout, error}; the run continues and completes; no loop or announce", async () => {
    await boot();
    script = (_req, step) => (step === "a2a-message" ? { delayMs: 500, content: "late but done" } : undefined);
    const result = await send({ sessionKey: TGT, message: "quick?", timeoutSeconds: 0.1 });
    expect(result).toMatchObject({ runId: expect.any(String), status: "timeout", sessionKey: TGT });
    expect(result.error).toMatch(/no reply within 0.1 s; the run continues/);
    await vi.waitFor(() => expect(h!.app.runtime.get(result.runId)?.status).toBe("ok"));
    await settle(h!);
    const last = (await messagesOf(h!.app, TGT)).at(-1);
    expect(last).toMatchObject({ role: "assistant", content: [{ type: "text", text: "late but done" }] });
    expect(countSteps(h!.model.requests, "a2a-reply")).toBe(0);
    expect(countSteps(h!.model.requests, "a2a-announce")).toBe(0);
    expect(telegram.textsTo("-100tgt")).toEqual([]);
  });

  it("R16 a failed run returns {status: error, error}; no loop or announce", async () => {
    await boot();
    script = (_req, step) => (step === "a2a-message" ? { status: 400, error: "context too long" } : undefined);
    const result = await send({ sessionKey: TGT, message: "boom", timeoutSeconds: 5 });
    expect(result).toMatchObject({ runId: expect.any(String), status: "error", sessionKey: TGT });
    expect(result.error).toMatch(/HTTP 400.*context too long/);
    await settle(h!);
    expect(countSteps(h!.model.requests, "a2a-reply")).toBe(0);
    expect(countSteps(h!.model.requests, "a2a-announce")).toBe(0);
  });

  it("R13 R16 timeoutSeconds = 0 and the run then fails: no loop and no announce follow (the error is nothing to talk about)", async () => {
    await boot();
    script = (_req, step) => (step === "a2a-message" ? { status: 400, error: "context too long" } : undefined);
    const result = await send({ sessionKey: TGT, message: "boom later", timeoutSeconds: 0 });
    expect(result).toEqual({ runId: expect.any(String), status: "accepted", sessionKey: TGT });
    await vi.waitFor(() => expect(h!.app.runtime.get(result.runId)?.status).toBe("error"));
    await settle(h!);
    expect(countSteps(h!.model.requests, "a2a-reply")).toBe(0);
    expect(countSteps(h!.model.requests, "a2a-announce")).toBe(0);
    expect(telegram.textsTo("-100tgt")).toEqual([]);
  });

  it("sending to the caller's own session is an error (its run would wait for itself)", async () => {
    await boot();
    const result = await send({ sessionKey: REQ, message: "me?" });
    expect(result).toMatchObject({ status: "error", sessionKey: REQ });
    expect(result.error).toMatch(/cannot target the calling session/);
    expect(countSteps(h!.model.requests, "a2a-message")).toBe(0);
  });

  it("R14 a target that sends back to its requester while the requester waits for it gets an error at once (the requester's run could only answer after its own wait): no deadlock until both time out", async () => {
    await boot();
    script = (req, step) => {
      if (step === "a2a-message" && sessionOf(req) === TGT && req.messages.at(-1)?.role !== "tool") return { toolCalls: [{ name: "sessions_send", arguments: { sessionKey: REQ, message: "which one did you mean?", timeoutSeconds: 600 } }] };
      return step === "a2a-reply" ? { content: "REPLY_SKIP" } : step === "a2a-announce" ? { content: "ANNOUNCE_SKIP" } : undefined;
    };
    const result = await send({ sessionKey: TGT, message: "fix the bug", timeoutSeconds: 600 });
    expect(result).toMatchObject({ status: "ok", reply: "done", sessionKey: TGT });
    const back = await lastToolResult(h!.app, TGT);
    expect(back).toMatchObject({ status: "error", sessionKey: REQ, error: expect.stringContaining("waiting for") });
    await settle(h!);
    // The message back was not queued behind the requester's run either.
    expect(stepRequests("a2a-message").map(sessionOf)).toEqual([TGT]);
  });

  it("R14 a cycle through a third session (A waits on B, B waits on C, C sends to A) is refused the same way", async () => {
    await boot();
    await greet("-100third");
    script = (req, step) => {
      const first = req.messages.at(-1)?.role !== "tool";
      if (step === "a2a-message" && first && sessionOf(req) === TGT) return { toolCalls: [{ name: "sessions_send", arguments: { sessionKey: THIRD, message: "ask around", timeoutSeconds: 600 } }] };
      if (step === "a2a-message" && first && sessionOf(req) === THIRD) return { toolCalls: [{ name: "sessions_send", arguments: { sessionKey: REQ, message: "what is this about?", timeoutSeconds: 600 } }] };
      return step === "a2a-reply" ? { content: "REPLY_SKIP" } : step === "a2a-announce" ? { content: "ANNOUNCE_SKIP" } : undefined;
    };
    expect(await send({ sessionKey: TGT, message: "fix the bug", timeoutSeconds: 600 })).toMatchObject({ status: "ok", reply: "done" });
    expect(await lastToolResult(h!.app, THIRD)).toMatchObject({ status: "error", sessionKey: REQ });
    expect(await lastToolResult(h!.app, TGT)).toMatchObject({ status: "ok", sessionKey: THIRD, reply: "done" });
    await settle(h!);
  });

  it("R14 a wait that ended leaves no trace: the former target may then send to its requester and wait for the answer", async () => {
    await boot();
    script = (_req, step) => (step === "a2a-reply" ? { content: "REPLY_SKIP" } : step === "a2a-announce" ? { content: "ANNOUNCE_SKIP" } : undefined);
    expect(await send({ sessionKey: TGT, message: "first", timeoutSeconds: 600 })).toMatchObject({ status: "ok", sessionKey: TGT });
    await settle(h!);
    const { result } = await callViaTelegram(h!, { peerId: "-100tgt" }, "sessions_send", { sessionKey: REQ, message: "and back", timeoutSeconds: 600 });
    expect(result).toMatchObject({ status: "ok", sessionKey: REQ, reply: "echo: and back" });
    await settle(h!);
  });

  it("R14 a target may still message its waiting requester with timeoutSeconds 0, as the refusal suggests: accepted, and run once the requester's turn ends", async () => {
    await boot();
    script = (req, step) => {
      if (step === "a2a-message" && sessionOf(req) === TGT && req.messages.at(-1)?.role !== "tool") return { toolCalls: [{ name: "sessions_send", arguments: { sessionKey: REQ, message: "fyi: on it", timeoutSeconds: 0 } }] };
      return step === "a2a-reply" ? { content: "REPLY_SKIP" } : step === "a2a-announce" ? { content: "ANNOUNCE_SKIP" } : undefined;
    };
    expect(await send({ sessionKey: TGT, message: "fix the bug", timeoutSeconds: 600 })).toMatchObject({ status: "ok", reply: "done", sessionKey: TGT });
    expect(await lastToolResult(h!.app, TGT)).toMatchObject({ status: "accepted", sessionKey: REQ });
    await settle(h!);
    expect(stepRequests("a2a-message").map(sessionOf)).toEqual([TGT, REQ]);
  });

  it("a label two sessions share is ambiguous: an error naming both, and no run starts", async () => {
    await boot();
    // The gateway keeps labels unique; a store written otherwise (older data, a manual edit) may not.
    for (const key of [TGT, "agent:main:telegram:group:-100dup"]) await h!.app.sessions.upsert(key, "main", { label: "twin" });
    expect(await send({ label: "twin", message: "which one?" })).toEqual({
      runId: expect.any(String),
      status: "error",
      error: expect.stringMatching(/^Multiple sessions found with label: twin \((?=.*agent:main:telegram:group:-100tgt)(?=.*agent:main:telegram:group:-100dup)/),
    });
    expect(countSteps(h!.model.requests, "a2a-message")).toBe(0);
  });

  it("R15 stopping the requester's run ends its wait at once; the target run goes on and completes", async () => {
    await boot();
    const release = holdStep("a2a-message", "finished anyway", (step) => (step === "a2a-reply" ? { content: "REPLY_SKIP" } : step === "a2a-announce" ? { content: "ANNOUNCE_SKIP" } : undefined));
    await h!.app.router.accept(inbound({ chatType: "group", peerId: "-100req", to: "-100req", wasMentioned: true, text: call("sessions_send", { sessionKey: TGT, message: "long job", timeoutSeconds: 600 }) }));
    await vi.waitFor(() => expect(h!.app.runtime.activeRuns().find((r) => r.sessionKey === TGT)?.status).toBe("running"));
    const requester = h!.app.runtime.activeRuns().find((r) => r.sessionKey === REQ)!;
    const target = h!.app.runtime.activeRuns().find((r) => r.sessionKey === TGT)!;
    h!.app.runtime.abortSession(REQ);
    try {
      // The target is still held by the model: only an ended wait lets the requester's run end now.
      await vi.waitFor(() => expect(h!.app.runtime.get(requester.runId)?.endedAt).toBeDefined(), { timeout: 5000 });
      expect(h!.app.runtime.get(target.runId)?.status).toBe("running");
    } finally {
      release();
    }
    await vi.waitFor(() => expect(h!.app.runtime.get(target.runId)?.status).toBe("ok"));
    await settle(h!);
  });

  it("R6 a label the main bucket shares under scope global is ambiguous with the bucket named main, never global", async () => {
    await boot({ session: { scope: "global" } });
    for (const key of ["global", TGT]) await h!.app.sessions.upsert(key, "main", { label: "twin" });
    const result = await send({ label: "twin", message: "which one?" });
    expect(result).toMatchObject({ status: "error", error: expect.stringMatching(/^Multiple sessions found with label: twin \(/) });
    expect(result.error.slice(result.error.indexOf("(")).split(/[(), ]+/).filter(Boolean).sort()).toEqual(["agent:main:telegram:group:-100tgt", "main"]);
  });

  it("R15 R16 a target run stopped (/stop in its chat) before it answered is an error naming the stop, not a timeout whose run continues", async () => {
    await boot({ commands: { owners: ["telegram:1001"] } });
    const release = holdStep("a2a-message", "never delivered", () => undefined);
    try {
      await h!.app.router.accept(inbound({ chatType: "group", peerId: "-100req", to: "-100req", wasMentioned: true, text: call("sessions_send", { sessionKey: TGT, message: "long job", timeoutSeconds: 600 }) }));
      await vi.waitFor(() => expect(h!.app.runtime.activeRuns().find((r) => r.sessionKey === TGT)?.status).toBe("running"));
      await h!.app.router.accept(inbound({ chatType: "group", peerId: "-100tgt", to: "-100tgt", wasMentioned: true, text: "/stop" }));
      await h!.app.router.idle();
      const result = await lastToolResult(h!.app, REQ);
      expect(result).toMatchObject({ runId: expect.any(String), status: "error", sessionKey: TGT });
      expect(result.error).toMatch(/aborted by \/stop/);
      expect(h!.app.runtime.get(result.runId)?.endedAt).toBeDefined();
    } finally {
      release();
    }
    await settle(h!);
    expect(countSteps(h!.model.requests, "a2a-reply")).toBe(0);
    expect(countSteps(h!.model.requests, "a2a-announce")).toBe(0);
  });

  it("R12 the target may be given by sessionId or label; unknown targets and bad params are clear errors", async () => {
    await boot();
    script = (_req, step) => (step === "a2a-reply" ? { content: "REPLY_SKIP" } : step === "a2a-announce" ? { content: "ANNOUNCE_SKIP" } : undefined);
    const byId = await send({ sessionKey: h!.app.sessions.require(TGT).sessionId, message: "by id" });
    expect(byId).toMatchObject({ status: "ok", sessionKey: TGT, reply: "echo: by id" });
    const admin = await h!.client();
    await admin.request("sessions.patch", { key: TGT, label: "target-room" });
    expect(await send({ label: "target-room", message: "by label" })).toMatchObject({ status: "ok", sessionKey: TGT, reply: "echo: by label" });
    expect(await send({ sessionKey: "agent:main:nope", message: "x" })).toMatchObject({ status: "error", error: "unknown session: agent:main:nope", runId: expect.any(String) });
    expect(await send({ label: "nope", message: "x" })).toMatchObject({ status: "error", error: "No session found with label: nope" });
    expect(await send({ sessionKey: TGT })).toMatchObject({ status: "error", error: "message required" });
    expect(await send({ sessionKey: TGT, label: "target-room", message: "x" })).toMatchObject({ status: "error", error: "Provide either sessionKey or label (not both)." });
  });
});

describe("sessions_send: a waiting run gives its run slot back", () => {
  const ONE_SLOT: ConfigInput = { agents: { defaults: { maxConcurrent: 1 } }, commands: { owners: ["telegram:1001"] } };
  const OTHER = "agent:main:telegram:group:-100other";
  const quietFlow = (step: Step): ModelReply | undefined => (step === "a2a-reply" ? { content: "REPLY_SKIP" } : step === "a2a-announce" ? { content: "ANNOUNCE_SKIP" } : undefined);
  const requestsIn = (sessionKey: string) => h!.model.requests.filter((r) => sessionOf(r) === sessionKey);
  const say = (peer: string, text: string) => h!.app.router.accept(inbound({ chatType: "group", peerId: peer, to: peer, wasMentioned: true, text }));
  const activeIn = (sessionKey: string) => h!.app.runtime.activeRuns().find((r) => r.sessionKey === sessionKey);

  /**
   * The requester's run (main lane) waits on the target's, which the model holds; another chat's
   * run then takes the main lane's only slot — the one the requester gave back — and the model
   * holds it too. Resolves once both are held.
   */
  async function waitWhileAnotherRunHoldsTheSlot(): Promise<{ requesterRunId: string; targetRunId: string; answerTarget: () => void; releaseOther: () => void }> {
    await boot(ONE_SLOT);
    let answerTarget!: () => void;
    let releaseOther!: () => void;
    const targetAnswered = new Promise<void>((resolve) => (answerTarget = resolve));
    const otherReleased = new Promise<void>((resolve) => (releaseOther = resolve));
    script = async (req, step) => {
      if (step === "a2a-message" && sessionOf(req) === TGT) return targetAnswered.then(() => ({ content: "B's answer" }));
      if (sessionOf(req) === OTHER) return otherReleased.then(() => ({ content: "other done" }));
      return quietFlow(step);
    };
    await say("-100req", call("sessions_send", { sessionKey: TGT, message: "ask B", timeoutSeconds: 600 }));
    await vi.waitFor(() => expect(requestsIn(TGT).filter((r) => stepOf(r) === "a2a-message")).toHaveLength(1), { timeout: 10_000 });
    await say("-100other", "hold the slot");
    await vi.waitFor(() => expect(requestsIn(OTHER)).toHaveLength(1), { timeout: 10_000 });
    return { requesterRunId: activeIn(REQ)!.runId, targetRunId: activeIn(TGT)!.runId, answerTarget, releaseOther };
  }

  it("R14 at maxConcurrent 1 a chain of waiting sends (A waits on B, B waits on C) completes with the replies; B's session still runs one turn at a time", async () => {
    await boot(ONE_SLOT);
    await greet("-100third");
    let answer!: () => void;
    const answered = new Promise<void>((resolve) => (answer = resolve));
    script = async (req, step) => {
      if (step !== "a2a-message") return quietFlow(step);
      if (sessionOf(req) === THIRD) return answered.then(() => ({ content: "C's answer" }));
      if (sessionOf(req) !== TGT) return undefined;
      if (afterTool(req)) return { content: `B relays: ${JSON.parse(String(req.messages.at(-1)!.content)).reply}` };
      return { toolCalls: [{ name: "sessions_send", arguments: { sessionKey: THIRD, message: "ask C", timeoutSeconds: 600 } }] };
    };
    await say("-100req", call("sessions_send", { sessionKey: TGT, message: "ask B", timeoutSeconds: 600 }));
    // A's run took the main lane's only slot and B's the nested lane's: C's run starts on the one B gave back.
    await vi.waitFor(() => expect(requestsIn(THIRD).filter((r) => stepOf(r) === "a2a-message")).toHaveLength(1), { timeout: 10_000 });
    // The main-lane slot A gave back is free, yet a message in B's chat waits for B's run to end.
    await say("-100tgt", "meanwhile in B");
    answer();
    await h!.app.router.idle();
    expect(await lastToolResult(h!.app, REQ)).toMatchObject({ status: "ok", sessionKey: TGT, reply: "B relays: C's answer" });
    expect(await lastToolResult(h!.app, TGT)).toMatchObject({ status: "ok", sessionKey: THIRD, reply: "C's answer" });
    const turnsOfB = requestsIn(TGT).filter((r) => stepOf(r) === "a2a-message" || stepOf(r) === "plain");
    expect(turnsOfB.map((r) => (afterTool(r) ? "tool result" : lastUserText(r)))).toEqual(["hi -100tgt", "ask B", "tool result", "meanwhile in B"]);
    await settle(h!);
  });

  it("R21 at maxConcurrent 1 a reply-back step that sends and waits gets its answer: the step's run gives its nested-lane slot back too", async () => {
    await boot(ONE_SLOT);
    await greet("-100third");
    script = (req, step) => {
      if (step === "a2a-reply" && sessionOf(req) === REQ && !afterTool(req) && lastUserText(req) === "echo: ask B") return { toolCalls: [{ name: "sessions_send", arguments: { sessionKey: THIRD, message: "ask C", timeoutSeconds: 600 } }] };
      return quietFlow(step);
    };
    expect(await send({ sessionKey: TGT, message: "ask B", timeoutSeconds: 600 })).toMatchObject({ status: "ok", reply: "echo: ask B" });
    await settle(h!);
    expect(await lastToolResult(h!.app, REQ)).toMatchObject({ status: "ok", sessionKey: THIRD, reply: "echo: ask C" });
  });

  it("R15 /stop on a run waiting for a slot again after its wait ended ends it at once, while the slot's holder still runs, and without a model call", async () => {
    const { requesterRunId, targetRunId, answerTarget, releaseOther } = await waitWhileAnotherRunHoldsTheSlot();
    try {
      answerTarget();
      await vi.waitFor(() => expect(h!.app.runtime.get(targetRunId)?.status).toBe("ok"));
      await say("-100req", "/stop");
      await vi.waitFor(() => expect(h!.app.runtime.get(requesterRunId)).toMatchObject({ status: "timeout", error: expect.stringContaining("aborted by /stop") }), { timeout: 10_000 });
      expect(activeIn(OTHER)?.status).toBe("running");
      expect(requestsIn(REQ).filter(afterTool)).toEqual([]);
    } finally {
      releaseOther();
    }
    await settle(h!);
  });

  it("a run whose wait ended takes the next free slot ahead of runs that have not started yet", async () => {
    const { answerTarget, releaseOther } = await waitWhileAnotherRunHoldsTheSlot();
    await say("-100late", "queued meanwhile");
    await vi.waitFor(() => expect(activeIn("agent:main:telegram:group:-100late")?.status).toBe("queued"));
    answerTarget();
    await vi.waitFor(() => expect(activeIn(TGT)).toBeUndefined());
    releaseOther();
    await settle(h!);
    const turns = h!.model.requests.filter((r) => (sessionOf(r) === REQ && afterTool(r)) || lastUserText(r) === "queued meanwhile");
    expect(turns.map((r) => (afterTool(r) ? "requester resumed" : "queued run"))).toEqual(["requester resumed", "queued run"]);
  });
});

describe("sessions_send: reply-back loop and announce", () => {
  it("R21 R22 the ping-pong alternates requester/target (turn 1 on the requester, fed the target's reply), bounded by the default 5 turns; the announce reaches the target chat through the outbox", async () => {
    await boot();
    let turn = 0;
    script = (_req, step) => (step === "a2a-reply" ? { content: `pong-${++turn}` } : step === "a2a-announce" ? { content: "announce now" } : undefined);
    const result = await send({ sessionKey: TGT, message: "hello target", timeoutSeconds: 5 });
    await settle(h!);
    const replies = stepRequests("a2a-reply");
    expect(replies).toHaveLength(5);
    expect(replies.map(sessionOf)).toEqual([REQ, TGT, REQ, TGT, REQ]);
    expect(replies.map(lastUserText)).toEqual(["echo: hello target", "pong-1", "pong-2", "pong-3", "pong-4"]);
    expect(systemOf(replies[0])).toContain("Agent-to-agent reply step:\nCurrent agent: Agent 1 (requester).\nTurn 1 of 5.");
    expect(systemOf(replies[1])).toContain("Agent-to-agent reply step:\nCurrent agent: Agent 2 (target).\nTurn 2 of 5.");
    expect(systemOf(replies[0])).toContain('If you want to stop the ping-pong, reply exactly "REPLY_SKIP".');
    expect(h!.app.runtime.get(`${result.runId}:reply:2`)).toMatchObject({ sessionKey: TGT, lane: "nested" });

    const [announce] = stepRequests("a2a-announce");
    expect(sessionOf(announce)).toBe(TGT);
    expect(systemOf(announce)).toContain("Original request: hello target\nRound 1 reply: echo: hello target\nLatest reply: pong-5");
    expect(telegram.textsTo("-100tgt")).toEqual(["announce now"]);
    expect(telegram.textsTo("-100req")).not.toContain("announce now");
    expect(h!.app.outbox.get(`a2a-announce:${result.runId}`)).toMatchObject({ sessionKey: TGT, kind: "announce", state: "sent", target: { channel: "telegram", to: "-100tgt" } });
  });

  it("R17 an announce whose outbox write fails is dropped, never thrown: the send's result stands, nothing is sent for it, and the next announce goes out", async () => {
    await boot({}, "sqlite");
    const rejections: unknown[] = [];
    const onRejection = (reason: unknown) => rejections.push(reason);
    process.on("unhandledRejection", onRejection);
    const db = await openStoreDb(h!.stateDir);
    try {
      script = (_req, step) => (step === "a2a-reply" ? { content: "REPLY_SKIP" } : step === "a2a-announce" ? { content: `announce after ${stepRequests("a2a-announce").length}` } : undefined);
      await db.exec("CREATE TRIGGER test_refuse_announce BEFORE INSERT ON keyv WHEN NEW.key LIKE 'outbox:a2a-announce:%' BEGIN SELECT RAISE(ABORT, 'refused by the test'); END");
      const refused = await send({ sessionKey: TGT, message: "first", timeoutSeconds: 5 });
      expect(refused).toMatchObject({ status: "ok", reply: "echo: first" });
      await settle(h!);
      expect(stepRequests("a2a-announce")).toHaveLength(1);
      expect(h!.app.outbox.get(`a2a-announce:${refused.runId}`)).toBeUndefined();

      await db.exec("DROP TRIGGER test_refuse_announce");
      const allowed = await send({ sessionKey: TGT, message: "second", timeoutSeconds: 5 });
      await settle(h!);
      expect(telegram.textsTo("-100tgt")).toEqual(["announce after 2"]);
      expect(h!.app.outbox.get(`a2a-announce:${allowed.runId}`)).toMatchObject({ state: "sent" });
      expect(rejections).toEqual([]);
    } finally {
      process.off("unhandledRejection", onRejection);
      await db.close();
    }
  });

  it(`R21 a reply-back step that never answers is aborted after ${A2A_STEP_TIMEOUT_MS / 1000} s; the loop ends there and the announce step still runs`, async () => {
    await boot();
    const release = holdStep("a2a-reply", "too late", (step) => (step === "a2a-announce" ? { content: "announce after a silent step" } : undefined));
    // Only the timers created from here on are fake: the step's own deadline among them.
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout"], shouldAdvanceTime: true });
    try {
      const result = await send({ sessionKey: TGT, message: "are you there?", timeoutSeconds: 5 });
      await crossDeadline(h!, `${result.runId}:reply:1`, A2A_STEP_TIMEOUT_MS);
      await vi.waitFor(() => expect(telegram.textsTo("-100tgt")).toEqual(["announce after a silent step"]));
      expect(stepRequests("a2a-reply")).toHaveLength(1);
    } finally {
      vi.useRealTimers();
      release();
    }
    await settle(h!);
  });

  it("R21 R22 a session deleted (sessions.delete) while the ping-pong runs is not brought back by a later step: the loop and the announce stop there", async () => {
    await boot();
    await deleteTargetDuringFirstReply();
    expect(stepRequests("a2a-reply").map(sessionOf)).toEqual([REQ]);
    expect(stepRequests("a2a-announce")).toHaveLength(0);
    expect(telegram.textsTo("-100tgt")).toEqual([]);
  });

  it("R21 R22 a session deleted during the last ping-pong turn gets no announce step: the announce would bring it back", async () => {
    await boot({ session: { agentToAgent: { maxPingPongTurns: 1 } } });
    await deleteTargetDuringFirstReply();
    expect(stepRequests("a2a-announce")).toHaveLength(0);
    expect(telegram.textsTo("-100tgt")).toEqual([]);
  });

  it("R21 R22 the requester's session deleted while the ping-pong runs ends it too: no later step brings it back", async () => {
    await boot();
    let release!: () => void;
    const released = new Promise<void>((resolve) => (release = resolve));
    // Turn 2 runs on the target: held there while the requester's session is deleted.
    script = async (req, step) => (step === "a2a-reply" ? (sessionOf(req) === TGT ? released.then(() => ({ content: "your turn" })) : { content: "over to you" }) : step === "a2a-announce" ? { content: "ANNOUNCE_SKIP" } : undefined);
    const result = await send({ sessionKey: TGT, message: "hello target", timeoutSeconds: 5 });
    await vi.waitFor(() => expect(h!.app.runtime.get(`${result.runId}:reply:2`)?.status).toBe("running"));
    const admin = await h!.client();
    await admin.request("sessions.delete", { key: REQ });
    release();
    await settle(h!);
    expect(h!.app.sessions.get(REQ)).toBeUndefined();
    expect(stepRequests("a2a-reply").map(sessionOf)).toEqual([REQ, TGT]);
  });

  it("R20 every reply-back step is persisted as an inter_session message from the other side", async () => {
    await boot({ session: { agentToAgent: { maxPingPongTurns: 2 } } });
    script = (_req, step) => (step === "a2a-reply" ? { content: "keep going" } : step === "a2a-announce" ? { content: "ANNOUNCE_SKIP" } : undefined);
    await send({ sessionKey: TGT, message: "q", timeoutSeconds: 5 });
    await settle(h!);
    const inputs = async (key: string) => (await messagesOf(h!.app, key)).flatMap((m) => (m.role === "user" && m.provenance?.kind === "inter_session" ? [[m.content, m.provenance]] : []));
    // Turn 1 runs on the requester, fed the target's reply; turn 2 on the target, fed the requester's.
    expect(await inputs(REQ)).toEqual([["echo: q", { kind: "inter_session", sourceSessionKey: TGT, sourceChannel: "telegram", sourceTool: "sessions_send" }]]);
    expect(await inputs(TGT)).toEqual([
      ["q", { kind: "inter_session", sourceSessionKey: REQ, sourceChannel: "telegram", sourceTool: "sessions_send" }],
      ["keep going", { kind: "inter_session", sourceSessionKey: REQ, sourceChannel: "telegram", sourceTool: "sessions_send" }],
      ["Agent-to-agent announce step.", { kind: "inter_session", sourceSessionKey: REQ, sourceChannel: "telegram", sourceTool: "sessions_send" }],
    ]);
  });

  it("R22 across channels the step prompts name each side's own channel; the announce goes to the target's chat", async () => {
    await boot();
    await h!.app.router.accept(inbound({ channel: "discord", chatType: "channel", peerId: "c1", to: "c1", wasMentioned: true, text: "hi discord" }));
    await h!.app.router.idle();
    const DISCORD = "agent:main:discord:channel:c1";
    script = (_req, step) => (step === "a2a-reply" ? { content: "REPLY_SKIP" } : step === "a2a-announce" ? { content: "posted on discord" } : undefined);
    await send({ sessionKey: DISCORD, message: "q", timeoutSeconds: 5 });
    await settle(h!);
    const parties = `Agent 1 (requester) session: ${REQ}.\nAgent 1 (requester) channel: telegram.\nAgent 2 (target) session: ${DISCORD}.\nAgent 2 (target) channel: discord.`;
    expect(systemOf(stepRequests("a2a-reply")[0])).toContain(parties);
    expect(systemOf(stepRequests("a2a-announce")[0])).toContain(parties);
    expect(discord.textsTo("c1")).toEqual(["echo: hi discord", "posted on discord"]);
    expect(telegram.textsTo("-100req")).not.toContain("posted on discord");
  });

  it("R6 under session.scope global the step prompts show the main bucket as main, never global", async () => {
    await boot({ session: { scope: "global" } });
    await h!.app.router.accept(inbound({ chatType: "direct", peerId: "1001", to: "1001", text: "dm" }));
    await h!.app.router.idle();
    script = (_req, step) => (step === "a2a-reply" ? { content: "REPLY_SKIP" } : step === "a2a-announce" ? { content: "ANNOUNCE_SKIP" } : undefined);
    expect(await send({ sessionKey: "main", message: "q", timeoutSeconds: 5 })).toMatchObject({ status: "ok", sessionKey: "main" });
    await settle(h!);
    const prompts = [...stepRequests("a2a-message"), ...stepRequests("a2a-reply"), ...stepRequests("a2a-announce")].map(systemOf);
    expect(prompts).toHaveLength(3);
    for (const prompt of prompts) {
      expect(prompt).toContain("Agent 2 (target) session: main.");
      expect(prompt).not.toMatch(/\((requester|target)\) session: global\./);
    }
  });

  it("R21 replying exactly REPLY_SKIP stops the ping-pong", async () => {
    await boot();
    script = (req, step) => (step === "a2a-reply" ? { content: sessionOf(req) === TGT ? "  REPLY_SKIP  " : "requester follow-up" } : step === "a2a-announce" ? { content: "ANNOUNCE_SKIP" } : undefined);
    await send({ sessionKey: TGT, message: "q", timeoutSeconds: 5 });
    await settle(h!);
    expect(stepRequests("a2a-reply").map(sessionOf)).toEqual([REQ, TGT]);
    expect(systemOf(stepRequests("a2a-announce")[0])).toContain("Latest reply: requester follow-up");
  });

  it("R21 an empty reply stops the ping-pong", async () => {
    await boot();
    script = (_req, step) => (step === "a2a-reply" ? { content: "" } : step === "a2a-announce" ? { content: "ANNOUNCE_SKIP" } : undefined);
    await send({ sessionKey: TGT, message: "q", timeoutSeconds: 5 });
    await settle(h!);
    expect(stepRequests("a2a-reply")).toHaveLength(1);
    expect(systemOf(stepRequests("a2a-announce")[0])).toContain("Round 1 reply: echo: q\nLatest reply: echo: q");
  });

  it("R21 session.agentToAgent.maxPingPongTurns bounds the loop (2)", async () => {
    await boot({ session: { agentToAgent: { maxPingPongTurns: 2 } } });
    script = (_req, step) => (step === "a2a-reply" ? { content: "keep going" } : step === "a2a-announce" ? { content: "ANNOUNCE_SKIP" } : undefined);
    await send({ sessionKey: TGT, message: "q", timeoutSeconds: 5 });
    await settle(h!);
    expect(stepRequests("a2a-reply")).toHaveLength(2);
    expect(systemOf(stepRequests("a2a-reply")[1])).toContain("Turn 2 of 2.");
    expect(stepRequests("a2a-announce")).toHaveLength(1);
  });

  it("R21 R22 maxPingPongTurns 0: no reply steps, the announce step still runs", async () => {
    await boot({ session: { agentToAgent: { maxPingPongTurns: 0 } } });
    script = (_req, step) => (step === "a2a-announce" ? { content: "short announce" } : undefined);
    await send({ sessionKey: TGT, message: "q", timeoutSeconds: 5 });
    await settle(h!);
    expect(stepRequests("a2a-reply")).toHaveLength(0);
    expect(telegram.textsTo("-100tgt")).toEqual(["short announce"]);
  });

  it("R22 replying exactly ANNOUNCE_SKIP stays silent", async () => {
    await boot();
    script = (_req, step) => (step === "a2a-reply" ? { content: "REPLY_SKIP" } : step === "a2a-announce" ? { content: "ANNOUNCE_SKIP" } : undefined);
    const result = await send({ sessionKey: TGT, message: "q", timeoutSeconds: 5 });
    await settle(h!);
    expect(stepRequests("a2a-announce")).toHaveLength(1);
    expect(telegram.textsTo("-100tgt")).toEqual([]);
    expect(h!.app.outbox.get(`a2a-announce:${result.runId}`)).toBeUndefined();
  });

  // Models dress a bare token (a full stop, quotes, code or bold markup): posted, the chat would read the literal token.
  it.each(["ANNOUNCE_SKIP.", "`ANNOUNCE_SKIP`", "**ANNOUNCE_SKIP**", '"ANNOUNCE_SKIP"'])("R22 an ANNOUNCE_SKIP dressed in punctuation or markup (%j) stays silent too: the token never reaches the chat", async (reply) => {
    await boot();
    script = (_req, step) => (step === "a2a-reply" ? { content: "REPLY_SKIP" } : step === "a2a-announce" ? { content: reply } : undefined);
    const result = await send({ sessionKey: TGT, message: "q", timeoutSeconds: 5 });
    await settle(h!);
    expect(stepRequests("a2a-announce")).toHaveLength(1);
    expect(telegram.textsTo("-100tgt")).toEqual([]);
    expect(h!.app.outbox.get(`a2a-announce:${result.runId}`)).toBeUndefined();
  });

  it("R21 a REPLY_SKIP dressed in punctuation (\"REPLY_SKIP.\") stops the ping-pong; a reply with words besides the token does not", async () => {
    await boot();
    script = (req, step) => (step === "a2a-reply" ? { content: sessionOf(req) === TGT ? "*REPLY_SKIP.*" : "no REPLY_SKIP yet: one more question" } : step === "a2a-announce" ? { content: "ANNOUNCE_SKIP" } : undefined);
    await send({ sessionKey: TGT, message: "q", timeoutSeconds: 5 });
    await settle(h!);
    expect(stepRequests("a2a-reply").map(sessionOf)).toEqual([REQ, TGT]);
    expect(systemOf(stepRequests("a2a-announce")[0])).toContain("Latest reply: no REPLY_SKIP yet: one more question");
  });

  it("R22 R17 D2 the send policy applies to the announce: a denied target chat gets nothing", async () => {
    await boot();
    const admin = await h!.client();
    await admin.request("sessions.patch", { key: TGT, sendPolicy: "deny" });
    script = (_req, step) => (step === "a2a-reply" ? { content: "REPLY_SKIP" } : step === "a2a-announce" ? { content: "this must not be posted" } : undefined);
    const result = await send({ sessionKey: TGT, message: "q", timeoutSeconds: 5 });
    expect(result.status).toBe("ok");
    await settle(h!);
    expect(stepRequests("a2a-announce")).toHaveLength(1);
    expect(telegram.textsTo("-100tgt")).toEqual([]);
    expect(h!.app.outbox.get(`a2a-announce:${result.runId}`)).toMatchObject({ state: "suppressed", sessionKey: TGT });
    const lines = await h!.app.transcripts.readLines(h!.app.sessions.transcriptPath(h!.app.sessions.require(TGT)));
    expect(lines).toContainEqual(expect.objectContaining({ type: "delivery", status: "suppressed", outboxId: `a2a-announce:${result.runId}`, text: "this must not be posted" }));
  });

  it("R17 the announce is best effort: status ok was returned though the platform then refused the announce", async () => {
    await boot();
    await h!.app.router.accept(inbound({ channel: "discord", chatType: "channel", peerId: "c1", to: "c1", wasMentioned: true, text: "hi discord" }));
    await h!.app.router.idle();
    discord.failures.push(new PlatformError("discord", "forbidden", "Missing Access"));
    script = (_req, step) => (step === "a2a-reply" ? { content: "REPLY_SKIP" } : step === "a2a-announce" ? { content: "done over there" } : undefined);
    const result = await send({ sessionKey: "agent:main:discord:channel:c1", message: "q", timeoutSeconds: 5 });
    expect(result.status).toBe("ok");
    await settle(h!);
    expect(h!.app.outbox.get(`a2a-announce:${result.runId}`)).toMatchObject({ state: "failed" });
    expect(discord.textsTo("c1")).toEqual(["echo: hi discord"]);
  });
});

describe("sessions_send across agents (tools.agentToAgent)", () => {
  const agents = { list: [{ id: "main", default: true }, { id: "beta" }] };
  async function bootAgents(agentToAgent?: { enabled: boolean; allow: string[] }) {
    await boot({ agents, ...(agentToAgent ? { tools: { agentToAgent } } : {}) });
    const admin = await h!.client();
    await admin.request("agent", { agentId: "beta", message: "beta wakes up", idempotencyKey: "beta-1" }, { expectFinal: true });
    script = (_req, step) => (step === "a2a-reply" ? { content: "REPLY_SKIP" } : step === "a2a-announce" ? { content: "ANNOUNCE_SKIP" } : undefined);
  }

  it("disabled by default: cross-agent send, history and list rows are forbidden or hidden", async () => {
    await bootAgents();
    expect(await send({ sessionKey: "agent:beta:main", message: "hi beta" })).toEqual({
      status: "forbidden",
      error: "Agent-to-agent messaging is disabled. Set tools.agentToAgent.enabled=true to allow cross-agent sends.",
    });
    expect(countSteps(h!.model.requests, "a2a-message")).toBe(0);
    expect(await callViaGateway(h!, REQ, "sessions_history", { sessionKey: "agent:beta:main" })).toEqual({
      status: "forbidden",
      error: "Agent-to-agent history is disabled. Set tools.agentToAgent.enabled=true to allow cross-agent access.",
    });
    const list = await callViaGateway(h!, REQ, "sessions_list");
    expect(list.sessions.map((r: any) => r.key)).not.toContain("agent:beta:main");
  });

  it("naming the other agent's session by label or sessionId gets the same refusal", async () => {
    await bootAgents();
    const admin = await h!.client();
    await admin.request("sessions.patch", { key: "agent:beta:main", label: "beta-room" });
    const refusal = { status: "forbidden", error: "Agent-to-agent messaging is disabled. Set tools.agentToAgent.enabled=true to allow cross-agent sends." };
    expect(await send({ label: "beta-room", message: "hi beta" })).toEqual(refusal);
    expect(await send({ sessionKey: h!.app.sessions.require("agent:beta:main").sessionId, message: "hi beta" })).toEqual(refusal);
    expect(countSteps(h!.model.requests, "a2a-message")).toBe(0);
  });

  it("enabled with both agents allowed: the send runs in the other agent's session", async () => {
    await bootAgents({ enabled: true, allow: ["main", "beta"] });
    expect(await send({ sessionKey: "agent:beta:main", message: "hi beta", timeoutSeconds: 5 })).toMatchObject({ status: "ok", reply: "echo: hi beta", sessionKey: "agent:beta:main" });
    const list = await callViaGateway(h!, REQ, "sessions_list");
    expect(list.sessions.map((r: any) => r.key)).toContain("agent:beta:main");
  });

  it("R21 each reply-back step runs as its own session's agent (turn 1 as the requester's agent)", async () => {
    await bootAgents({ enabled: true, allow: ["main", "beta"] });
    script = (_req, step) => (step === "a2a-reply" ? { content: "go on" } : step === "a2a-announce" ? { content: "ANNOUNCE_SKIP" } : undefined);
    const result = await send({ sessionKey: "agent:beta:main", message: "hi beta", timeoutSeconds: 5 });
    await settle(h!);
    expect([1, 2, 3].map((turn) => h!.app.runtime.get(`${result.runId}:reply:${turn}`)?.agentId)).toEqual(["main", "beta", "main"]);
    expect(stepRequests("a2a-reply").map((r) => [sessionOf(r), /^You are (\w+),/.exec(systemOf(r))?.[1]])).toEqual([
      [REQ, "main"],
      ["agent:beta:main", "beta"],
      [REQ, "main"],
      ["agent:beta:main", "beta"],
      [REQ, "main"],
    ]);
  });

  it("enabled but the other agent not in allow: forbidden", async () => {
    await bootAgents({ enabled: true, allow: ["main"] });
    expect(await send({ sessionKey: "agent:beta:main", message: "hi beta" })).toEqual({ status: "forbidden", error: "Agent-to-agent messaging denied by tools.agentToAgent.allow." });
  });
});

/**
 * sessions_send to TGT, whose first ping-pong reply is held while TGT is deleted; then the flow
 * goes on. An announce step, if one ran, would answer "must not be posted".
 */
async function deleteTargetDuringFirstReply(): Promise<void> {
  const release = holdStep("a2a-reply", "over to you", (step) => (step === "a2a-announce" ? { content: "must not be posted" } : undefined));
  const result = await send({ sessionKey: TGT, message: "hello target", timeoutSeconds: 5 });
  await vi.waitFor(() => expect(h!.app.runtime.get(`${result.runId}:reply:1`)?.status).toBe("running"));
  const admin = await h!.client();
  await admin.request("sessions.delete", { key: TGT });
  release();
  await settle(h!);
  expect(h!.app.sessions.get(TGT)).toBeUndefined();
}
