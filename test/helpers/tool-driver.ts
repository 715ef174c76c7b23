/**
 * Drives the session tools through real runs: a scripted model that issues the tool call a
 * message asks for (`CALL <tool> <json args>`), plus helpers to read what a run's tool returned.
 * Steps of the inter-agent flows are recognised by the fixed first line of their extra system
 * prompt (interfaces §4), so a test can script and count each step.
 */
import { randomUUID } from "node:crypto";
import { expect, vi } from "vitest";
import type { App } from "../../src/app.js";
import { resolveRoute } from "../../src/inbound/route.js";
import type { TranscriptMessage } from "../../src/sessions/transcript.js";
import type { ToolContext } from "../../src/tools/types.js";
import type { FullDaemon } from "../../src/full-daemon.js";
import type { ModelReply, ModelRequest, Responder } from "../fakes/model-server.js";
import type { Harness } from "./harness.js";
import { inbound } from "./harness.js";

export type Step = "a2a-message" | "a2a-reply" | "a2a-announce" | "subagent" | "subagent-announce" | "plain";

const MARKERS: Array<[Step, string]> = [
  ["a2a-message", "Agent-to-agent message context:"],
  ["a2a-reply", "Agent-to-agent reply step:"],
  ["a2a-announce", "Agent-to-agent announce step:"],
  ["subagent-announce", "Subagent announce step:"],
  ["subagent", "Subagent context:"],
];

export function systemOf(req: ModelRequest): string {
  const first = req.messages[0];
  return first?.role === "system" ? String(first.content) : "";
}

/** Which step a model request belongs to: a marker that starts a line of the system prompt. */
export function stepOf(req: ModelRequest): Step {
  const lines = systemOf(req).split("\n");
  return MARKERS.find(([, marker]) => lines.includes(marker))?.[0] ?? "plain";
}

/** The session a model request runs in ("Current session: <key>."). */
export function sessionOf(req: ModelRequest): string {
  return /Current session: (\S+)\./.exec(systemOf(req))?.[1] ?? "";
}

/** The last user message, without the in-memory inter-session prefix line. */
export function lastUserText(req: ModelRequest): string {
  const user = [...req.messages].reverse().find((m) => m.role === "user");
  const text = String(user?.content ?? "");
  return text.startsWith("[Inter-session message]") ? text.slice(text.indexOf("\n") + 1) : text;
}

/** The request continues a tool round (its last message is a tool result). */
export function afterTool(req: ModelRequest): boolean {
  return req.messages.at(-1)?.role === "tool";
}

export function countSteps(requests: ModelRequest[], step: Step): number {
  return requests.filter((r) => stepOf(r) === step && !afterTool(r)).length;
}

/**
 * `CALL <tool> <json>` → that tool call; after a tool result → "done"; otherwise `echo: <text>`.
 * `script` may answer first (return undefined to fall through).
 */
export function toolDriver(script?: (req: ModelRequest, step: Step) => ModelReply | undefined | Promise<ModelReply | undefined>): Responder {
  return async (req) => {
    const scripted = await script?.(req, stepOf(req));
    if (scripted) return scripted;
    if (afterTool(req)) return { content: "done" };
    const text = lastUserText(req);
    const call = /^CALL (\w+)\s*([\s\S]*)$/.exec(text.trim());
    if (call) return { toolCalls: [{ name: call[1], arguments: call[2] ? JSON.parse(call[2]) : {} }] };
    return { content: `echo: ${text}` };
  };
}

/** The context of a tool executed directly, outside any run: there is no slot to give back while it waits. */
export function outsideRun(ctx: Omit<ToolContext, "signal" | "park">): ToolContext {
  return { ...ctx, signal: new AbortController().signal, park: (wait) => wait };
}

export function call(tool: string, args: unknown = {}): string {
  return `CALL ${tool} ${JSON.stringify(args)}`;
}

export async function messagesOf(app: App, sessionKey: string): Promise<TranscriptMessage[]> {
  const entry = app.sessions.require(sessionKey);
  await app.transcripts.flush();
  return app.transcripts.readMessages(app.sessions.transcriptPath(entry));
}

/** The parsed result of the last tool call recorded in a session. */
export async function lastToolResult<T = any>(app: App, sessionKey: string): Promise<T> {
  const results = (await messagesOf(app, sessionKey)).filter((m) => m.role === "toolResult");
  const last = results.at(-1);
  if (!last || last.role !== "toolResult") throw new Error(`no tool result in ${sessionKey}`);
  return JSON.parse(last.content[0].text) as T;
}

/** Run `CALL tool args` in a session through the gateway `agent` method; returns the tool's result. */
export async function callViaGateway<T = any>(h: Harness, sessionKey: string, tool: string, args: unknown = {}): Promise<T> {
  const client = await h.client();
  try {
    await client.request("agent", { sessionKey, message: call(tool, args), idempotencyKey: randomUUID() }, { expectFinal: true });
  } finally {
    client.close();
  }
  return lastToolResult<T>(h.app, h.app.canonicalKey(sessionKey));
}

/** Run `CALL tool args` as an inbound Telegram message (so the run has a chat origin). */
export async function callViaTelegram<T = any>(h: Harness, chat: { peerId: string; chatType?: "direct" | "group"; threadId?: string; senderId?: string }, tool: string, args: unknown = {}): Promise<{ result: T; sessionKey: string }> {
  const msg = inbound({ chatType: chat.chatType ?? "group", peerId: chat.peerId, to: chat.peerId, wasMentioned: true, text: call(tool, args), ...(chat.threadId ? { threadId: chat.threadId } : {}), ...(chat.senderId ? { senderId: chat.senderId } : {}) });
  await h.app.router.accept(msg);
  await h.app.router.idle();
  const { sessionKey } = resolveRoute(h.app.config, msg);
  return { result: await lastToolResult<T>(h.app, sessionKey), sessionKey };
}

export function features(h: Harness) {
  const f = (h.daemon as FullDaemon).features;
  if (!f) throw new Error("daemon not started");
  return f;
}

/** Wait until the background work (agent-to-agent flows, announces) is done. */
export async function settle(h: Harness): Promise<void> {
  await vi.waitFor(async () => {
    await features(h).background.idle();
    if (h.app.runtime.counts().running + h.app.runtime.counts().queued > 0) throw new Error("runs still active");
    if (h.app.outbox.pending > 0) throw new Error("outbox not drained");
  }, { timeout: 10_000, interval: 20 });
}

/**
 * Under fake timers installed before run `runId` started (its deadline among them), whose model
 * never answers: it is still running a second before `limitMs` and times out a second after.
 */
export async function crossDeadline(h: Harness, runId: string, limitMs: number): Promise<void> {
  await vi.waitFor(() => expect(h.app.runtime.get(runId)?.status).toBe("running"));
  await vi.advanceTimersByTimeAsync(limitMs - 1000);
  expect(h.app.runtime.get(runId)?.status).toBe("running");
  await vi.advanceTimersByTimeAsync(2000);
  await vi.waitFor(() => expect(h.app.runtime.get(runId)).toMatchObject({ status: "timeout" }));
}
