/**
 * Agent runs: one lane per session key (runs of a session never overlap), bounded pools per
 * lane kind (different sessions run concurrently), runIds, lifecycle events, timeouts, abort,
 * and a completion registry so `agent.wait` answers after the run ended (R18).
 *
 * A run parked on another run's answer (a sessions_send wait) keeps its session's lane but gives
 * its pool slot back until the answer came (ToolContext.park): chains of sessions_send longer
 * than the pool complete instead of stalling until their waits time out.
 */
import { EventEmitter } from "node:events";
import { randomUUID } from "node:crypto";
import PQueue from "p-queue";
import type pino from "pino";
import { lazyChild } from "../log.js";
import { BoundedMap } from "../util/bounded-map.js";
import { RunAbort, type AbortLike } from "../util/run-abort.js";
import { within } from "../util/within.js";
import type { Config } from "../config/schema.js";
import { agentConfigOf } from "../inbound/route.js";
import type { DeliveryContext } from "../sessions/entry.js";
import type { SessionStore } from "../sessions/session-store.js";
import type { InputProvenance, TranscriptMessage, TranscriptStore } from "../sessions/transcript.js";
import type { AgentTool, ToolSource } from "../tools/types.js";
import { argumentsJson, buildModelMessages, systemPromptOf } from "./context.js";
import { estimateTokens, fitToContextWindow } from "./context-window.js";
import { NO_MODEL_MESSAGE, type ModelRegistry } from "./models/registry.js";
import { SlotLease } from "./slots.js";
import { ModelError, type ChatMessage, type CompletionResult, type ToolDefinition } from "./models/provider.js";

export type Lane = "main" | "nested" | "subagent";

export interface RunRequest {
  sessionKey: string;
  agentId: string;
  message: string;
  runId?: string;
  lane?: Lane;
  provenance?: InputProvenance;
  sender?: { id: string; name?: string; channel?: string };
  extraSystemPrompt?: string;
  /** Abort the run after this long (ms); default agents.defaults.runTimeoutSeconds. 0 = none. */
  timeoutMs?: number;
  /** Model reference overriding the session's and agent's. */
  model?: string;
  /** The inbound router already recorded the user message. */
  userMessageRecorded?: boolean;
  /**
   * The session (sessionId) the message belongs to, when the caller recorded it: the run reads and
   * writes that transcript even if the session was reset (`/new`) while the run waited for its turn.
   */
  sessionId?: string;
  origin?: DeliveryContext;
  /** Restricts the tool set (sub-agents). */
  toolFilter?: (name: string) => boolean;
}

export interface RunUsage {
  input: number;
  output: number;
}

export type RunOutcome =
  | { status: "ok"; reply: string; usage: RunUsage; model?: string }
  | { status: "error"; error: string; usage: RunUsage }
  /** `stopped`: an owner's /stop ended it; its answer to the chat was the /stop confirmation. */
  | { status: "timeout"; error: string; usage: RunUsage; stopped?: true };

export interface RunInfo {
  runId: string;
  sessionKey: string;
  agentId: string;
  lane: Lane;
  status: "queued" | "running" | RunOutcome["status"];
  acceptedAt: number;
  startedAt?: number;
  endedAt?: number;
  error?: string;
  reply?: string;
  usage?: RunUsage;
  model?: string;
}

/**
 * `unknown`: a "timeout" for a run this daemon has no record of — never started here, or forgotten
 * (a restart, or it ended longer ago than completions are kept). A client that waited across a
 * reconnect (the web chat) learns that nothing more will come of it.
 */
export type WaitResult = { runId: string; status: "ok" | "error" | "timeout"; startedAt?: number; endedAt?: number; error?: string; unknown?: true };

export type RunEvent =
  | { phase: "queued" | "start"; runId: string; sessionKey: string }
  | { phase: "end"; runId: string; sessionKey: string; outcome: RunOutcome };

export interface RuntimeDeps {
  config: Config;
  sessions: SessionStore;
  transcripts: TranscriptStore;
  models: ModelRegistry;
  tools: ToolSource;
  log: pino.Logger;
  /** How long finished runs stay answerable by agent.wait (ms). */
  completionTtlMs?: number;
  /** Upper bound on remembered completions (at least half as many are kept), so a busy daemon's memory stays flat. */
  maxCompletions?: number;
}

interface ActiveRun {
  info: RunInfo;
  controller: RunAbort;
  done: Promise<RunOutcome>;
}

export class AgentRuntime {
  readonly events = new EventEmitter();
  private readonly runs = new Map<string, ActiveRun>();
  /**
   * Finished runs, oldest first, each with when it ended on the monotonic clock: its TTL is a
   * duration. Counted on the wall clock, a clock set forward by hours (an NTP correction) dropped
   * runs that had just ended, and a client repeating an `agent` or `chat.send` whose answer it
   * lost ran it a second time.
   */
  private readonly completed: BoundedMap<string, { info: RunInfo; endedMs: number }>;
  private readonly sessionLanes = new Map<string, Promise<unknown>>();
  private readonly pools: Record<Lane, PQueue>;
  private readonly sweeper: NodeJS.Timeout;
  private draining = false;

  constructor(private readonly deps: RuntimeDeps) {
    this.completed = new BoundedMap(deps.maxCompletions ?? MAX_COMPLETIONS);
    const d = deps.config.agents.defaults;
    this.pools = {
      main: new PQueue({ concurrency: d.maxConcurrent }),
      nested: new PQueue({ concurrency: d.maxConcurrent }),
      subagent: new PQueue({ concurrency: d.subagents.maxConcurrent }),
    };
    this.events.setMaxListeners(0);
    this.sweeper = setInterval(() => this.sweep(), 60_000);
    this.sweeper.unref();
  }

  /** Queue a run in its session's lane; resolves at once with the runId. */
  start(req: RunRequest): { runId: string; info: RunInfo; done: Promise<RunOutcome> } {
    if (this.draining) throw new Error(NOT_ACCEPTING);
    const runId = req.runId ?? randomUUID();
    const existing = this.runs.get(runId);
    if (existing) return { runId, info: existing.info, done: existing.done };
    const info: RunInfo = { runId, sessionKey: req.sessionKey, agentId: req.agentId, lane: req.lane ?? "main", status: "queued", acceptedAt: Date.now() };
    const controller = new RunAbort();
    const prev = this.sessionLanes.get(req.sessionKey) ?? Promise.resolve();
    const lease = new SlotLease(this.pools[info.lane], controller);
    const done: Promise<RunOutcome> = prev
      .catch(() => undefined)
      .then(async () => {
        await lease.take();
        try {
          return await this.execute(info, req, controller, lease);
        } finally {
          lease.give();
        }
      });
    this.sessionLanes.set(req.sessionKey, done);
    void done.finally(() => {
      if (this.sessionLanes.get(req.sessionKey) === done) this.sessionLanes.delete(req.sessionKey);
    });
    this.runs.set(runId, { info, controller, done });
    this.emit({ phase: "queued", runId, sessionKey: req.sessionKey });
    return { runId, info, done };
  }

  /** False once drain() began: runs ending now were cut short by the shutdown, not by their work. */
  get accepting(): boolean {
    return !this.draining;
  }

  get(runId: string): RunInfo | undefined {
    return this.runs.get(runId)?.info ?? this.completed.get(runId)?.info;
  }

  /**
   * Server-side wait (R18): answers from the registry after the run ended. `signal`: the waiter is
   * gone (its gateway connection closed), so the wait ends now, answered "timeout", rather than
   * keep its listener and timer for up to a day.
   */
  async wait(runId: string, timeoutMs: number, signal?: AbortSignal): Promise<WaitResult> {
    const known = this.get(runId);
    if (known && isFinished(known)) return toWait(known);
    if (timeoutMs <= 0 || signal?.aborted) return this.timedOut(runId);
    return new Promise((resolve) => {
      const settle = (result: WaitResult) => {
        clearTimeout(timer);
        this.events.off("run", onEvent);
        signal?.removeEventListener("abort", timedOut);
        resolve(result);
      };
      const onEvent = (ev: RunEvent) => {
        if (ev.phase === "end" && ev.runId === runId) settle(toWait(this.get(runId) ?? ({ runId, status: ev.outcome.status } as RunInfo)));
      };
      const timedOut = () => settle(this.timedOut(runId));
      const timer = setTimeout(timedOut, timeoutMs);
      this.events.on("run", onEvent);
      signal?.addEventListener("abort", timedOut, { once: true });
    });
  }

  /** Abort one run (running or queued). */
  abort(runId: string, reason = "aborted"): boolean {
    const run = this.runs.get(runId);
    if (!run) return false;
    run.controller.abort(new Error(reason));
    return true;
  }

  /** Abort every run of a session; returns the aborted runIds. */
  abortSession(sessionKey: string, reason?: string): string[] {
    const ids: string[] = [];
    for (const [id, run] of this.runs) {
      if (run.info.sessionKey === sessionKey) {
        run.controller.abort(reason === undefined ? new RunStopped() : new Error(reason));
        ids.push(id);
      }
    }
    return ids;
  }

  activeRuns(): RunInfo[] {
    return [...this.runs.values()].map((r) => r.info);
  }

  counts(): { running: number; queued: number } {
    let running = 0;
    let queued = 0;
    for (const r of this.runs.values()) r.info.status === "running" ? running++ : queued++;
    return { running, queued };
  }

  /** A wait's "timeout": the run goes on (with when it started), or it is unknown here. */
  private timedOut(runId: string): WaitResult {
    const info = this.get(runId);
    if (!info) return { runId, status: "timeout", unknown: true };
    return { runId, status: "timeout", ...(info.startedAt ? { startedAt: info.startedAt } : {}) };
  }

  /** Stop accepting runs and wait (bounded) for the ones in flight. */
  async drain(timeoutMs: number): Promise<void> {
    this.draining = true;
    clearInterval(this.sweeper);
    await within(Promise.all([...this.runs.values()].map((r) => r.done.catch(() => undefined))), timeoutMs);
    for (const r of this.runs.values()) r.controller.abort(new Error("daemon shutting down"));
  }

  private emit(ev: RunEvent): void {
    this.events.emit("run", ev);
  }

  private async execute(info: RunInfo, req: RunRequest, controller: RunAbort, lease: SlotLease): Promise<RunOutcome> {
    const log = lazyChild(this.deps.log, { runId: info.runId, sessionKey: info.sessionKey });
    info.status = "running";
    info.startedAt = Date.now();
    this.emit({ phase: "start", runId: info.runId, sessionKey: info.sessionKey });
    // Past setTimeout's range Node fires after 1 ms: a huge limit (a model's "no limit") would abort at once.
    const timeoutMs = Math.min(req.timeoutMs ?? this.deps.config.agents.defaults.runTimeoutSeconds * 1000, MAX_TIMER_MS);
    const timer = timeoutMs > 0 ? setTimeout(() => controller.abort(new RunTimeout(timeoutMs)), timeoutMs) : undefined;
    const usage: RunUsage = { input: 0, output: 0 };
    let outcome: RunOutcome;
    try {
      if (controller.aborted) throw controller.reason;
      const result = await this.loop(info, req, controller, lease, usage, log);
      outcome = { status: "ok", reply: result.reply, usage, model: result.model };
    } catch (err) {
      const reason = controller.aborted ? controller.reason : err;
      if (reason instanceof RunTimeout) outcome = { status: "timeout", error: reason.message, usage };
      else if (controller.aborted) outcome = { status: "timeout", error: `run aborted: ${messageOf(reason)}`, usage, ...(reason instanceof RunStopped ? { stopped: true as const } : {}) };
      else outcome = { status: "error", error: messageOf(err), usage };
      if (outcome.status === "error") log.warn({ err: outcome.error }, "run failed");
      await this.markAborted(info, controller.aborted);
    } finally {
      clearTimeout(timer);
    }
    this.complete(info, outcome);
    return outcome;
  }

  private async loop(info: RunInfo, req: RunRequest, signal: AbortLike, lease: SlotLease, usage: RunUsage, log: pino.Logger): Promise<{ reply: string; model?: string }> {
    const { sessions, transcripts, models, config } = this.deps;
    const entry = sessions.get(req.sessionKey) ?? (await sessions.upsert(req.sessionKey, req.agentId));
    // A message recorded before a `/new` that came while its run waited is answered in the session
    // it was said in: the fresh transcript holds neither it nor the conversation it belongs to.
    const sessionId = req.sessionId ?? entry.sessionId;
    const ref = { path: sessions.transcriptPath({ agentId: entry.agentId, sessionId }), sessionId, key: entry.key };
    if (!req.userMessageRecorded) {
      await transcripts.appendMessage(ref, {
        role: "user",
        content: req.message,
        timestamp: Date.now(),
        ...(req.provenance ? { provenance: req.provenance } : {}),
        ...(req.sender ? { sender: req.sender } : {}),
      });
    }
    const modelRef = req.model ?? entry.model ?? models.defaultRef(req.agentId);
    if (!modelRef || !models.configured) throw new Error(NO_MODEL_MESSAGE);
    const resolved = models.resolve(modelRef);
    info.model = resolved.ref;
    const agent = agentConfigOf(config, req.agentId);
    const tools = this.deps.tools({ sessionKey: req.sessionKey, agentId: req.agentId }).filter((t) => !req.toolFilter || req.toolFilter(t.name));
    const toolDefs: ToolDefinition[] = tools.map((t) => ({ type: "function", function: { name: t.name, description: t.description, parameters: t.parameters } }));
    const prompt = { agentName: agent?.name ?? req.agentId, systemPrompt: agent?.systemPrompt, extraSystemPrompt: req.extraSystemPrompt, sessionKey: req.sessionKey };
    let history: readonly TranscriptMessage[] = await transcripts.readMessages(ref.path, HISTORY_LIMIT);
    if (resolved.contextWindow) history = fitToContextWindow(history, resolved.contextWindow, estimateTokens(systemPromptOf(prompt)) + estimateTokens(JSON.stringify(toolDefs)));
    // `history` first: a literal that starts with a spread and adds a key builds a new hidden class
    // at every call on Node 20 (src/util/http-post.ts).
    const build = () => buildModelMessages({ history, ...prompt });
    let messages: ChatMessage[] = build();
    // Where this run's own assistant turns and tool results begin in `messages`.
    let runStart = messages.length;
    const maxRounds = config.agents.defaults.maxToolRounds;
    for (let round = 0; round < maxRounds; round++) {
      let res: CompletionResult;
      try {
        res = await resolved.provider.complete({ model: resolved.model, messages, tools: toolDefs, signal });
      } catch (err) {
        if (!(err instanceof ModelError && err.contextOverflow)) throw err;
        // The conversation outgrew the model's context window: every later message of the chat
        // would fail the same way. Ask again without the older half of the earlier conversation
        // (the transcript keeps it), down to none of it.
        const turn = history.findLastIndex((m) => m.role === "user");
        if (turn <= 0) throw new Error(`the message does not fit the model's context window, even without the earlier conversation — ${err.message}`, { cause: err });
        const drop = Math.ceil(turn / 2);
        log.info({ dropped: drop, kept: history.length - drop }, "model context window exceeded; asking again with less of the earlier conversation");
        history = history.slice(drop);
        const own = messages.slice(runStart);
        messages = build();
        runStart = messages.length;
        messages.push(...own);
        round--;
        continue;
      }
      usage.input += res.usage.input;
      usage.output += res.usage.output;
      // The entry is updated in memory at once. Its store write is not awaited: the store commits
      // in issue order, so the reply's outbox record (written later) cannot be durable before it.
      this.recordUsage(req.sessionKey, sessionId, res.usage, resolved.ref).catch((err: unknown) => log.error({ err }, "could not store token usage"));
      // No text because the server withheld it or the model was cut off before any (a reasoning
      // model can spend its tokens thinking) is a failed run, not a choice to stay silent (that is
      // an empty "stop", or NO_REPLY): the chat gets a notice instead of nothing. Not recorded as
      // an answer, so a resumed message runs again.
      const withheld = WITHHELD.get(res.finishReason);
      if (!res.toolCalls.length && !res.content.trim() && withheld) {
        throw new Error(`model ${resolved.ref} returned no answer (finish_reason "${res.finishReason}": ${withheld})`);
      }
      const assistant: TranscriptMessage = {
        role: "assistant",
        content: [
          ...(res.content ? [{ type: "text" as const, text: res.content }] : []),
          ...res.toolCalls.map((c) => ({ type: "toolCall" as const, id: c.id, name: c.name, arguments: parseArgs(c.arguments) })),
        ],
        timestamp: Date.now(),
        model: resolved.model,
        provider: resolved.provider.id,
        usage: { input: res.usage.input, output: res.usage.output, totalTokens: res.usage.input + res.usage.output },
        stopReason: res.toolCalls.length ? "toolUse" : "stop",
      };
      await transcripts.appendMessage(ref, assistant);
      if (!res.toolCalls.length) return { reply: res.content.trim(), model: resolved.ref };
      messages.push({ role: "assistant", content: res.content || null, tool_calls: res.toolCalls.map((c) => ({ id: c.id, type: "function", function: { name: c.name, arguments: argumentsJson(parseArgs(c.arguments)) } })) });
      for (const call of res.toolCalls) {
        if (signal.aborted) throw signal.reason;
        const result = await runTool(tools, call, { sessionKey: req.sessionKey, agentId: req.agentId, runId: info.runId, origin: req.origin, signal, park: (wait) => lease.park(wait) }, log);
        await transcripts.appendMessage(ref, { role: "toolResult", toolCallId: call.id, toolName: call.name, content: [{ type: "text", text: result.text }], isError: result.isError, timestamp: Date.now() });
        messages.push({ role: "tool", tool_call_id: call.id, content: result.text });
      }
    }
    throw new Error(`run stopped after ${maxRounds} tool rounds (agents.defaults.maxToolRounds)`);
  }

  private async recordUsage(sessionKey: string, sessionId: string, u: RunUsage, model: string): Promise<void> {
    const entry = this.deps.sessions.get(sessionKey);
    // A session reset since the run began starts its counters at zero: this run was the old one's.
    if (!entry || entry.sessionId !== sessionId) return;
    const input = (entry.inputTokens ?? 0) + u.input;
    const output = (entry.outputTokens ?? 0) + u.output;
    await this.deps.sessions.upsert(sessionKey, entry.agentId, { inputTokens: input, outputTokens: output, totalTokens: input + output, contextTokens: u.input, lastModel: model, systemSent: true, abortedLastRun: false });
  }

  private async markAborted(info: RunInfo, aborted: boolean): Promise<void> {
    const entry = this.deps.sessions.get(info.sessionKey);
    if (entry && aborted) await this.deps.sessions.upsert(info.sessionKey, entry.agentId, { abortedLastRun: true }).catch(() => undefined);
  }

  private complete(info: RunInfo, outcome: RunOutcome): void {
    info.status = outcome.status;
    info.endedAt = Date.now();
    info.usage = outcome.usage;
    if (outcome.status === "ok") info.reply = outcome.reply;
    else info.error = outcome.error;
    this.runs.delete(info.runId);
    this.completed.set(info.runId, { info, endedMs: performance.now() });
    this.emit({ phase: "end", runId: info.runId, sessionKey: info.sessionKey, outcome });
  }

  private sweep(): void {
    const cutoff = performance.now() - (this.deps.completionTtlMs ?? 15 * 60_000);
    for (const [id, { endedMs }] of this.completed) {
      if (endedMs >= cutoff) break;
      this.completed.delete(id);
    }
  }
}

/** Why start() refuses a run once drain() began; callers that store anything first check `accepting`. */
export const NOT_ACCEPTING = "daemon is shutting down; run not accepted";

const HISTORY_LIMIT = 60;
/** finish_reason values under which an empty answer was not the model's choice. */
const WITHHELD = new Map([
  ["content_filter", "the provider's content filter withheld the answer"],
  ["length", "the model reached its output limit before answering"],
]);
/**
 * Finished runs remembered for agent.wait (within completionTtlMs): hours of a normal chat load.
 * At 50,000 they were 15 MB of a busy daemon's heap, all of it walked by every full collection.
 */
const MAX_COMPLETIONS = 10_000;
/** The longest delay setTimeout honours (2^31 − 1 ms, about 24.8 days). */
const MAX_TIMER_MS = 2_147_483_647;

class RunTimeout extends Error {
  constructor(ms: number) {
    // Whole seconds read best; a fractional limit (runTimeoutSeconds 0.2) is not rounded to "0 s".
    super(`run timed out after ${ms % 1000 === 0 ? `${ms / 1000} s` : `${ms} ms`}`);
  }
}

/** An owner's /stop (abortSession without another reason). */
class RunStopped extends Error {
  constructor() {
    super("aborted by /stop");
  }
}

function isFinished(info: RunInfo): boolean {
  return info.status === "ok" || info.status === "error" || info.status === "timeout";
}

function toWait(info: RunInfo): WaitResult {
  return {
    runId: info.runId,
    status: info.status === "ok" || info.status === "error" ? info.status : "timeout",
    ...(info.startedAt ? { startedAt: info.startedAt } : {}),
    ...(info.endedAt ? { endedAt: info.endedAt } : {}),
    ...(info.error ? { error: info.error } : {}),
  };
}

function parseArgs(raw: string): unknown {
  try {
    return JSON.parse(raw || "{}");
  } catch {
    return raw;
  }
}

async function runTool(tools: AgentTool[], call: { id: string; name: string; arguments: string }, ctx: Parameters<AgentTool["execute"]>[1], log: pino.Logger): Promise<{ text: string; isError: boolean }> {
  const tool = tools.find((t) => t.name === call.name);
  if (!tool) return { text: JSON.stringify({ status: "error", error: `unknown tool: ${call.name}` }), isError: true };
  let args: unknown;
  try {
    args = JSON.parse(call.arguments || "{}");
  } catch {
    return { text: JSON.stringify({ status: "error", error: `invalid JSON arguments for ${call.name}` }), isError: true };
  }
  try {
    const result = await tool.execute(args, ctx);
    const isError = typeof result === "object" && result !== null && ["error", "forbidden"].includes(String((result as { status?: unknown }).status));
    return { text: JSON.stringify(result), isError };
  } catch (err) {
    log.warn({ tool: call.name, err: messageOf(err) }, "tool failed");
    return { text: JSON.stringify({ status: "error", error: `${call.name} failed: ${messageOf(err)}` }), isError: true };
  }
}

function messageOf(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
