/**
 * Gateway method handlers (interfaces §3). Each takes validated params and returns the payload,
 * or throws GatewayError; `agent` answers twice (accepted, then final).
 */
import { promises as fs } from "node:fs";
import type { App } from "../app.js";
import type { OutboundTarget } from "../channels/types.js";
import { NOT_ACCEPTING, type RunOutcome } from "../agents/runtime.js";
import { classifySessionKind, isSubagentKey, agentIdFromKey, normalizeAgentId, MAIN_KEY, displayKey, nodeSessionKey } from "../sessions/keys.js";
import { normalizeDeliveryContext, sameDestination, type DeliveryContext } from "../sessions/entry.js";
import { toSessionRow } from "../sessions/rows.js";
import { SessionNotFoundError } from "../sessions/session-store.js";
import { replyText } from "../inbound/router.js";
import { parseCommand } from "../inbound/command-parse.js";
import { COMMAND_SCOPES, GatewayError, hasScope, missingScope, type MethodName, type MethodParams } from "./protocol.js";
import { BoundedMap } from "../util/bounded-map.js";
import { processStats } from "../util/process-stats.js";

export interface CallContext {
  connId: string;
  role: "operator" | "node";
  /** What the connection was granted: a call's method is checked already, what it asks for within not. */
  scopes: readonly string[];
  nodeId?: string;
  /** Broadcast an event to every operator connection. */
  broadcast(event: string, payload: unknown): void;
  /** Run `fn` once this request is answered (its first answer, for `agent`): events follow their response. */
  afterResponse(fn: () => void): void;
  /** Aborted when the caller's connection closes: nothing waits on its behalf any longer. */
  signal: AbortSignal;
}

export interface TwoPhase {
  kind: "two-phase";
  first: unknown;
  final: Promise<{ ok: true; payload: unknown } | { ok: false; error: GatewayError; payload: unknown }>;
}

type Handler<M extends MethodName> = (params: MethodParams<M>, ctx: CallContext) => Promise<unknown | TwoPhase>;
export type Handlers = { [M in MethodName]: Handler<M> };

type ChatSendAnswer = { runId: string; status: "started" | "ok"; command?: true; reply?: string };
/** Chat command answers remembered for repeats (see chat.send); far more than 5 minutes' worth. */
const COMMAND_ANSWERS_KEPT = 10_000;

const POLICY_BLOCKED = "send blocked by session policy";
const DEFAULT_LIST_LIMIT = 200;

export function createHandlers(app: App, version: string): Handlers {
  const sessions = () => app.sessions;

  const resolveKey = (ref: string, agentId?: string) => {
    try {
      return app.resolveSessionRef(ref, agentId);
    } catch (err) {
      if (err instanceof SessionNotFoundError) throw new GatewayError("NOT_FOUND", err.message);
      throw err;
    }
  };
  /**
   * A session's key or sessionId; a name that is neither names a new session, as a key does: the
   * web chat's session box starts a conversation called "work" as readily as "agent:main:work".
   */
  const resolveOrNewKey = (ref: string) => {
    try {
      return resolveKey(ref);
    } catch (err) {
      if (err instanceof GatewayError && err.code === "NOT_FOUND" && ref.trim()) return app.canonicalKey(ref);
      throw err;
    }
  };
  const requireAgent = (raw: string | undefined): string => {
    if (raw === undefined) return app.defaultAgentId;
    const id = normalizeAgentId(raw);
    if (!app.config.agents.list.some((a) => normalizeAgentId(a.id) === id)) throw new GatewayError("INVALID_REQUEST", `unknown agent id "${raw}"`);
    return id;
  };
  const agentOfKey = (key: string) => agentIdFromKey(key, sessions().get(key)?.agentId ?? app.defaultAgentId);
  const checkPolicy = (key: string, channel?: string) => {
    const verdict = app.outbox.evaluateSession(key, channel);
    if (verdict.decision === "deny") throw new GatewayError("INVALID_REQUEST", POLICY_BLOCKED, { reason: verdict.reason });
  };
  /** Before anything is stored for a run: one the runtime would refuse leaves no session behind. */
  const refuseWhileDraining = () => {
    if (!app.runtime.accepting) throw new GatewayError("UNAVAILABLE", NOT_ACCEPTING);
  };
  /** chat.send answers not yet given, by idempotencyKey (see chat.send). */
  const chatSending = new Map<string, Promise<ChatSendAnswer>>();
  /**
   * Answers of chat commands, by idempotencyKey. A run is remembered by the runtime, a command is
   * not: a repeat (the web page sends again a request whose answer its lost connection took) would
   * run `/new` again — a second reset that hides the fresh conversation, and its text run twice.
   */
  const commandAnswers = new BoundedMap<string, ChatSendAnswer>(COMMAND_ANSWERS_KEPT);
  const row = (key: string) => {
    const entry = sessions().require(key);
    return toSessionRow(entry, sessions().transcriptPath(entry), app.models.defaultRef(entry.agentId));
  };

  return {
    async "sessions.list"(p) {
      const limit = Math.min(p.limit ?? DEFAULT_LIST_LIMIT, 10_000);
      // Entries carry normalised agent ids; an id as the config spells it ("Ops") finds them too.
      const agentId = p.agentId ? normalizeAgentId(p.agentId) : undefined;
      const entries = sessions().list({ ...p, limit, agentId, spawnedBy: p.spawnedBy ? app.canonicalKey(p.spawnedBy) : undefined, includeGlobal: p.includeGlobal ?? true });
      const rows = await Promise.all(
        entries.map(async (e) => {
          const r = toSessionRow(e, sessions().transcriptPath(e), app.models.defaultRef(e.agentId));
          if (p.messageLimit) r.messages = await app.transcripts.readMessagesWithoutToolResults(r.transcriptPath, p.messageLimit);
          return r;
        }),
      );
      return { ts: Date.now(), count: rows.length, sessions: rows };
    },

    async "sessions.resolve"(p) {
      const given = [p.key, p.sessionId, p.label].filter((v) => v !== undefined);
      if (given.length !== 1) throw new GatewayError("INVALID_REQUEST", given.length ? "Provide either key, sessionId, or label (not multiple)" : "Either key, sessionId, or label is required");
      if (p.label !== undefined) {
        const hits = sessions().list({ label: p.label, limit: 2, agentId: p.agentId ? normalizeAgentId(p.agentId) : undefined, spawnedBy: p.spawnedBy ? app.canonicalKey(p.spawnedBy) : undefined });
        if (!hits.length) throw new GatewayError("NOT_FOUND", `no session found with label: ${p.label}`);
        if (hits.length > 1) throw new GatewayError("INVALID_REQUEST", `multiple sessions found with label: ${p.label} (${hits.map((h) => h.key).join(", ")})`);
        return { ok: true, key: displayKey(hits[0].key) };
      }
      if (p.sessionId !== undefined) {
        const key = sessions().keyForSessionId(p.sessionId);
        if (!key) throw new GatewayError("NOT_FOUND", `no session found with sessionId: ${p.sessionId}`);
        return { ok: true, key: displayKey(key) };
      }
      const key = app.canonicalKey(p.key as string);
      if (!sessions().get(key)) throw new GatewayError("NOT_FOUND", `session not found: ${p.key}`);
      return { ok: true, key: displayKey(key) };
    },

    async "sessions.patch"(p) {
      const key = app.canonicalKey(p.key);
      const existing = sessions().get(key);
      if (p.label) {
        const clash = sessions().list({ label: p.label, limit: 2 }).find((e) => e.key !== key);
        if (clash) throw new GatewayError("INVALID_REQUEST", `label already in use: ${p.label} (${clash.key})`);
      }
      if (p.model) {
        try {
          app.models.resolve(p.model);
        } catch (err) {
          throw new GatewayError("INVALID_REQUEST", (err as Error).message);
        }
      }
      if (p.spawnedBy !== undefined) {
        requireSubagentKey(key);
        if (existing?.spawnedBy && existing.spawnedBy !== p.spawnedBy) throw new GatewayError("INVALID_REQUEST", `spawnedBy cannot be changed once set (${existing.spawnedBy})`);
      }
      const { key: _key, ...fields } = p;
      const entry = await sessions().upsert(key, agentOfKey(key), { ...fields, ...(p.spawnedBy ? { spawnedBy: app.canonicalKey(p.spawnedBy) } : {}) });
      return { ok: true, key: displayKey(key), entry: row(entry.key) };
    },

    async "sessions.reset"(p) {
      const key = app.canonicalKey(p.key);
      if (!sessions().get(key)) throw new GatewayError("NOT_FOUND", `session not found: ${p.key}`);
      const entry = await sessions().reset(key);
      return { ok: true, key: displayKey(key), entry: row(entry.key) };
    },

    async "sessions.delete"(p) {
      const key = app.canonicalKey(p.key);
      if (classifySessionKind(key) === "main" && !key.includes(":thread:")) throw new GatewayError("INVALID_REQUEST", `Cannot delete the main session (${displayKey(key)}).`);
      const entry = sessions().get(key);
      if (!entry) throw new GatewayError("NOT_FOUND", `session not found: ${p.key}`);
      app.runtime.abortSession(key, "session deleted");
      for (const hook of app.stopHooks) hook(key);
      await sessions().delete(key);
      const archived: string[] = [];
      if (p.deleteTranscript !== false) {
        const file = sessions().transcriptPath(entry);
        const dest = `${file}.deleted.${new Date().toISOString().replace(/[:.]/g, "-")}`;
        await app.transcripts.flush();
        if (await fs.rename(file, dest).then(() => true, () => false)) archived.push(dest);
      }
      return { ok: true, key: displayKey(key), deleted: true, archived };
    },

    async "chat.history"(p) {
      const key = resolveKey(p.sessionKey);
      const entry = sessions().get(key);
      if (!entry) throw new GatewayError("NOT_FOUND", `session not found: ${p.sessionKey}`);
      const messages = await app.transcripts.readMessages(sessions().transcriptPath(entry), p.limit ?? 200);
      return { sessionKey: displayKey(key), sessionId: entry.sessionId, messages, thinkingLevel: entry.thinkingLevel, verboseLevel: entry.verboseLevel };
    },

    async "chat.send"(p, ctx) {
      // Before any cached answer too: an admin's `/new` repeated by a write client is still refused.
      const command = parseCommand(p.message);
      if (command && !hasScope(ctx.scopes, COMMAND_SCOPES[command.name])) throw missingScope(`chat.send of /${command.name}`, COMMAND_SCOPES[command.name]);
      const key = resolveOrNewKey(p.sessionKey);
      const agentId = agentOfKey(key);
      const runId = p.idempotencyKey;
      // A retry racing its original: the run is not in the runtime until chatSend has stored the
      // entry and the user message, so the key is held (below) from before the first await.
      // An original that failed started nothing: then this one is a fresh attempt (unless another
      // repeat has taken its place meanwhile).
      for (let inFlight = chatSending.get(runId); inFlight; inFlight = chatSending.get(runId)) {
        const first = await inFlight.catch(() => undefined);
        if (first) return { ...first, cached: true };
      }
      const commandAnswer = commandAnswers.get(runId);
      if (commandAnswer) return { ...commandAnswer, cached: true };
      if (app.runtime.get(runId)) return { runId, status: "started", cached: true };
      // Owner commands run in a denied session too: `/send on` must be able to undo `/send off`.
      if (!command) checkPolicy(key, "webchat");
      const answer = (async (): Promise<ChatSendAnswer> => {
        const result = await app.router.chatSend({ sessionKey: key, agentId, text: p.message, runId, timeoutMs: p.timeoutMs });
        if (result.kind === "command") {
          ctx.afterResponse(() => ctx.broadcast("chat", { runId, sessionKey: displayKey(key), state: "final", message: { role: "assistant", content: [{ type: "text", text: result.reply }] } }));
          // The reply too: a client whose connection lost the `chat` event gets it from a repeat.
          const done: ChatSendAnswer = { runId, status: "ok", command: true, reply: result.reply };
          commandAnswers.set(runId, done);
          return done;
        }
        // Every run ends in a `chat` event: a reply shown in web chat is its `final` (sent by the
        // web chat adapter); a silent one (NO_REPLY) or one the outbox did not send still ends
        // with a `final`, without a message, or a client would wait for it forever.
        const sessionKey = displayKey(key);
        result.done.then(
          ({ outcome, shown }) => {
            if (outcome.status !== "ok") ctx.broadcast("chat", { runId, sessionKey, state: "error", errorMessage: outcome.error });
            else if (!shown) ctx.broadcast("chat", { runId, sessionKey, state: "final" });
          },
          (err: unknown) => {
            app.log.error({ err, runId, sessionKey }, "chat.send reply could not be queued for web chat");
            ctx.broadcast("chat", { runId, sessionKey, state: "error", errorMessage: `the reply could not be delivered: ${(err as Error).message}` });
          },
        );
        return { runId, status: "started" };
      })();
      chatSending.set(runId, answer);
      // Once settled the runtime knows the run (or nothing started), so the entry can go.
      void answer.then(
        () => chatSending.delete(runId),
        () => chatSending.delete(runId),
      );
      return answer;
    },

    async agent(p, ctx) {
      const runId = p.idempotencyKey;
      const known = app.runtime.get(runId);
      let sessionKey: string;
      let done: Promise<RunOutcome>;
      let acceptedAt: number;
      if (known) {
        sessionKey = known.sessionKey;
        acceptedAt = known.acceptedAt;
        done = app.runtime.wait(runId, 24 * 3600_000, ctx.signal).then(() => outcomeOf(app.runtime.get(runId)));
      } else {
        const agentId = requireAgent(p.agentId);
        sessionKey = p.sessionKey ? resolveKey(p.sessionKey, agentId) : p.sessionId ? resolveKey(p.sessionId, agentId) : app.canonicalKey(MAIN_KEY, agentId);
        const keyAgent = agentOfKey(sessionKey);
        if (p.agentId && keyAgent !== agentId && sessionKey.startsWith("agent:")) throw new GatewayError("INVALID_REQUEST", `agent "${agentId}" does not match session key agent "${keyAgent}"`);
        checkPolicy(sessionKey, p.channel === "last" ? undefined : p.channel);
        if (p.spawnedBy) requireSubagentKey(sessionKey);
        refuseWhileDraining();
        const existing = sessions().get(sessionKey);
        // Labels name one session (sessions.patch refuses a taken one): a label already in use goes
        // on as the display name, as sessions_spawn does, or resolving it would fail for both.
        const labelFree = p.label !== undefined && sessions().list({ label: p.label, limit: 1, includeArchived: true, where: (e) => e.key !== sessionKey }).length === 0;
        await sessions().upsert(sessionKey, keyAgent, {
          ...(p.label && !existing?.label ? (labelFree ? { label: p.label } : existing?.displayName ? {} : { displayName: p.label }) : {}),
          ...(p.spawnedBy && !existing?.spawnedBy ? { spawnedBy: app.canonicalKey(p.spawnedBy) } : {}),
        });
        // A delivered run's chat is where its reply goes: what it spawns is announced there too (R37).
        const route = p.deliver ? deliveryRoute(app, sessionKey, p) : undefined;
        const started = app.runtime.start({
          sessionKey,
          agentId: keyAgent,
          message: p.message,
          runId,
          lane: p.lane,
          extraSystemPrompt: p.extraSystemPrompt,
          provenance: p.inputProvenance,
          ...(p.timeout !== undefined ? { timeoutMs: p.timeout * 1000 } : {}),
          ...(route ? { origin: route } : {}),
        });
        acceptedAt = started.info.acceptedAt;
        done = started.done.then(async (outcome) => {
          if (p.deliver && outcome.status === "ok" && outcome.reply) await deliverReply(app, sessionKey, runId, deliveryRoute(app, sessionKey, p), outcome.reply);
          return outcome;
        });
      }
      return {
        kind: "two-phase",
        first: { runId, sessionKey: displayKey(sessionKey), status: "accepted", acceptedAt },
        final: done.then((outcome) =>
          outcome.status === "ok"
            ? { ok: true as const, payload: { runId, status: "ok", summary: "completed", result: { reply: outcome.reply, usage: outcome.usage, model: outcome.model } } }
            : {
                ok: false as const,
                error: new GatewayError(outcome.status === "timeout" ? "AGENT_TIMEOUT" : "UNAVAILABLE", outcome.error),
                payload: { runId, status: outcome.status, summary: outcome.error },
              },
        ),
      } satisfies TwoPhase;
    },

    async "agent.wait"(p, ctx) {
      return app.runtime.wait(p.runId, p.timeoutMs ?? 30_000, ctx.signal);
    },

    async send(p) {
      const accountId = p.accountId ?? app.defaultAccountId(p.channel);
      // Web chat addresses a chat by its session key: "main" is the main session's canonical key,
      // the `to` its route records, or that session's policy would not be found for it.
      const to = p.channel === "webchat" ? app.canonicalKey(p.to) : p.to;
      const target: OutboundTarget = { channel: p.channel, accountId, to, ...(p.threadId !== undefined ? { threadId: String(p.threadId) } : {}) };
      // Without a key, the session living at exactly this destination governs it: a forum topic's
      // session is not its group's, nor one bot account's chat another's.
      const sessionKey = p.sessionKey ? resolveKey(p.sessionKey) : sessions().list({ limit: 1, where: (e) => sameDestination(e.deliveryContext, target) })[0]?.key;
      const { done } = await app.outbox.enqueue({ id: `send:${p.idempotencyKey}`, sessionKey, target, text: p.message, kind: "send" });
      const result = await withTimeout(done, 30_000);
      if (!result) return { status: "queued", id: `send:${p.idempotencyKey}` };
      if (result.status === "suppressed") throw new GatewayError("INVALID_REQUEST", POLICY_BLOCKED, { reason: result.reason });
      if (result.status === "failed") throw new GatewayError("UNAVAILABLE", result.error);
      return { status: "sent", messageIds: result.messageIds, channel: p.channel, to: p.to };
    },

    async health() {
      const channels: Record<string, unknown> = {};
      for (const [name, adapter] of app.adapters) channels[name] = adapter.health();
      return { ok: true, ts: Date.now(), version, uptimeMs: Date.now() - app.startedAt, channels, runs: app.runtime.counts(), inbound: app.router.counts, outbox: { pending: app.outbox.pending, failed: app.outbox.failed, unknown: app.outbox.unknown }, sessions: sessions().size, model: app.models.configured ? app.models.defaultRef(app.defaultAgentId) ?? null : null, process: processStats() };
    },

    async status(p, ctx) {
      return this.health(p, ctx);
    },

    /**
     * A node's message (R5): runs in `node-<nodeId>` unless the node names a session. Answers
     * twice like `agent` — accepted, then the reply — because a node may call node methods only
     * and so cannot `agent.wait`. A repeated idempotencyKey answers from the first run, whose
     * runId is `node-key:<idempotencyKey>`.
     */
    async "node.event"(p, ctx) {
      // A namespace of their own, as hooks have: other runs' ids are guessable (an inbound
      // message's is its platform message id), and a repeat answers with the run's reply — a
      // node naming one would read a session no node may see.
      const runId = `node-key:${p.idempotencyKey}`;
      const known = app.runtime.get(runId);
      let sessionKey: string;
      let acceptedAt: number;
      let done: Promise<RunOutcome>;
      if (known) {
        sessionKey = known.sessionKey;
        acceptedAt = known.acceptedAt;
        done = app.runtime.wait(runId, 24 * 3600_000, ctx.signal).then(() => outcomeOf(app.runtime.get(runId)));
      } else {
        const nodeId = ctx.nodeId ?? ctx.connId;
        sessionKey = p.sessionKey ? resolveKey(p.sessionKey) : nodeSessionKey(nodeId);
        const agentId = agentOfKey(sessionKey);
        checkPolicy(sessionKey);
        refuseWhileDraining();
        if (!sessions().get(sessionKey)) await sessions().upsert(sessionKey, agentId, { displayName: `node ${nodeId}` });
        const started = app.runtime.start({ sessionKey, agentId, message: p.message, runId, provenance: { kind: "external_user" }, sender: { id: nodeId, channel: "node" } });
        acceptedAt = started.info.acceptedAt;
        done = started.done;
      }
      return {
        kind: "two-phase",
        first: { runId, sessionKey: displayKey(sessionKey), status: "accepted", acceptedAt },
        final: done.then((outcome) =>
          outcome.status === "ok"
            ? { ok: true as const, payload: { runId, status: "ok", reply: outcome.reply } }
            : { ok: false as const, error: new GatewayError(outcome.status === "timeout" ? "AGENT_TIMEOUT" : "UNAVAILABLE", outcome.error), payload: { runId, status: outcome.status, summary: outcome.error } },
        ),
      } satisfies TwoPhase;
    },
  };
}

/**
 * spawnedBy is what a sandboxed session sees by (R42): only a key sessions_spawn mints may carry
 * one, or an operator call could hand a sandboxed session any chat's history.
 */
function requireSubagentKey(key: string): void {
  if (!isSubagentKey(key)) throw new GatewayError("INVALID_REQUEST", `spawnedBy is only for sub-agent sessions (agent:<id>:subagent:<uuid>), not ${key}`);
}

function outcomeOf(info: ReturnType<App["runtime"]["get"]>): RunOutcome {
  const usage = info?.usage ?? { input: 0, output: 0 };
  if (info?.status === "ok") return { status: "ok", reply: info.reply ?? "", usage, model: info.model };
  if (info?.status === "error") return { status: "error", error: info.error ?? "agent error", usage };
  return { status: "timeout", error: info?.error ?? "run did not finish", usage };
}

async function deliverReply(app: App, sessionKey: string, runId: string, route: DeliveryContext | undefined, reply: string): Promise<void> {
  if (!route) {
    app.log.warn({ sessionKey, runId }, "agent deliver requested but no destination: the session has no route on that channel and no `to` was given");
    return;
  }
  await app.outbox.enqueue({ id: `agent:${runId}`, sessionKey, target: { channel: route.channel, accountId: route.accountId ?? app.defaultAccountId(route.channel), to: route.to, ...(route.threadId ? { threadId: route.threadId } : {}) }, text: replyText({ status: "ok", reply, usage: { input: 0, output: 0 } }), kind: "reply" });
}

/**
 * Where `agent` delivers, as the reference plans it: `channel` defaults to "last" (the session's
 * own); `to` is the one given, else the session's own chat when the channel is the session's.
 * A `to` given is never dropped for the session's chat, nor a channel given for its channel.
 */
function deliveryRoute(app: App, sessionKey: string, p: MethodParams<"agent">): DeliveryContext | undefined {
  const last = app.sessions.get(sessionKey)?.deliveryContext;
  const channel = p.channel && p.channel !== "last" ? p.channel : last?.channel;
  if (!channel) return undefined;
  const own = channel === last?.channel ? last : undefined;
  if (!p.to) return own;
  return normalizeDeliveryContext({ channel, to: p.to, accountId: p.accountId ?? own?.accountId, threadId: p.threadId === undefined ? undefined : String(p.threadId) });
}

function withTimeout<T>(p: Promise<T>, ms: number): Promise<T | undefined> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([p, new Promise<undefined>((r) => (timer = setTimeout(() => r(undefined), ms)))]).finally(() => clearTimeout(timer));
}
