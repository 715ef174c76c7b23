/**
 * The services of one daemon, wired once: store, sessions, transcripts, outbox, runtime, router.
 * No platform SDK is imported here (the composition root `daemon.ts` adds adapters).
 */
import path from "node:path";
import type pino from "pino";
import type { AdapterKv, ChannelAdapter } from "./channels/types.js";
import type { Config } from "./config/schema.js";
import { AgentRuntime } from "./agents/runtime.js";
import { ModelRegistry } from "./agents/models/registry.js";
import type { ModelProvider } from "./agents/models/provider.js";
import { Outbox, type OutboxRecord } from "./delivery/outbox.js";
import { openSendJournal, type SendJournal } from "./delivery/send-journal.js";
import { InboundRouter } from "./inbound/router.js";
import { defaultAgentId, resolveRoute } from "./inbound/route.js";
import { canonicalizeKey, DEFAULT_ACCOUNT_ID, looksLikeSessionKey, type SessionKey } from "./sessions/keys.js";
import type { SessionEntry } from "./sessions/entry.js";
import { SessionNotFoundError, SessionStore } from "./sessions/session-store.js";
import { TranscriptStore } from "./sessions/transcript.js";
import { asAdapterKv } from "./store/adapter-kv.js";
import { openKvStore, type KvSpace, type KvStore } from "./store/kv.js";
import { lockStateDir, type StateLock } from "./store/state-lock.js";
import type { AgentTool, ToolFilter, ToolScope, ToolSource } from "./tools/types.js";
import { observeGc } from "./util/process-stats.js";

export interface AppOptions {
  config: Config;
  log: pino.Logger;
  env?: NodeJS.ProcessEnv;
  /** Replace a configured model provider (tests). */
  modelProvider?: (id: string) => ModelProvider | undefined;
  /**
   * false: do not take the state directory's lock. Only for in-process tests that play a daemon
   * killed mid-work and start its successor beside it; a real kill releases the lock itself.
   */
  lockState?: boolean;
  /**
   * The outbox's clock (its rate limiter, backoff and retention): tests share an accelerated
   * clock with a platform fake, so hours of rate-limited sending run in seconds.
   */
  outboxClock?: { now(): number; sleep(ms: number): Promise<void> };
}

export class App {
  readonly config: Config;
  readonly log: pino.Logger;
  readonly stateDir: string;
  readonly adapters = new Map<string, ChannelAdapter>();
  readonly startedAt = Date.now();
  kv!: KvStore;
  sessions!: SessionStore;
  readonly transcripts: TranscriptStore;
  outbox!: Outbox;
  /** Kept beside a durable store only: with a memory store nothing survives a restart anyway. */
  private journal: SendJournal | undefined;
  private lock: StateLock | undefined;
  runtime!: AgentRuntime;
  router!: InboundRouter;
  models: ModelRegistry;
  /** Tool sources; session tools and others register here before start. */
  private readonly toolSources: ToolSource[] = [];
  /** Applied to the union of all sources, so a restriction also covers tools added by others. */
  private readonly toolFilters: ToolFilter[] = [];
  /** Hooks run by `/stop` (sub-agents). */
  readonly stopHooks: Array<(sessionKey: string) => string[]> = [];

  constructor(private readonly opts: AppOptions) {
    this.config = opts.config;
    this.log = opts.log;
    this.transcripts = new TranscriptStore({ log: this.log.child({ component: "transcripts" }) });
    this.stateDir = path.resolve(opts.config.stateDir);
    this.models = new ModelRegistry(opts.config, opts.env ?? process.env, opts.modelProvider);
    observeGc();
  }

  get defaultAgentId(): string {
    return defaultAgentId(this.config);
  }

  async open(): Promise<void> {
    // Before anything reads or resumes state: a second daemon on it would send every pending reply again.
    if (this.opts.lockState !== false) this.lock = await lockStateDir(this.stateDir, { log: this.log.child({ component: "state-lock" }) });
    try {
      await this.openLocked();
    } catch (err) {
      await this.kv?.close().catch(() => undefined);
      await this.lock?.release();
      throw err;
    }
  }

  private async openLocked(): Promise<void> {
    const url = this.config.store.url ?? `sqlite://${path.join(this.stateDir, "switchboard.sqlite")}`;
    this.kv = await openKvStore(url, this.stateDir, { log: this.log.child({ component: "store" }) });
    this.sessions = new SessionStore(this.kv.space<SessionEntry>("sessions"), this.stateDir);
    await this.sessions.load();
    if (this.kv.durable) this.journal = openSendJournal(path.join(this.stateDir, "outbox-journal.jsonl"));
    this.outbox = new Outbox({
      space: this.kv.space<OutboxRecord>("outbox"),
      sessions: this.sessions,
      transcripts: this.transcripts,
      policy: () => this.config.session.sendPolicy,
      adapter: (channel, accountId) => this.adapter(channel, accountId),
      log: this.log.child({ component: "outbox" }),
      journal: this.journal,
      // A group's or channel's session is keyed by the chat (its `to`): what the router would derive.
      chatSessionKeys: (target) =>
        target.channel === "webchat"
          ? []
          : (["group", "channel"] as const).map((chatType) => resolveRoute(this.config, { channel: target.channel, accountId: target.accountId, chatType, peerId: target.to, ...(target.threadId ? { threadId: target.threadId } : {}) }).sessionKey),
      ...(this.opts.outboxClock ? { now: this.opts.outboxClock.now, sleep: this.opts.outboxClock.sleep } : {}),
    });
    this.runtime = new AgentRuntime({
      config: this.config,
      sessions: this.sessions,
      transcripts: this.transcripts,
      models: this.models,
      tools: (scope) => this.toolsFor(scope),
      log: this.log.child({ component: "runtime" }),
    });
    this.router = new InboundRouter({
      config: this.config,
      sessions: this.sessions,
      transcripts: this.transcripts,
      runtime: this.runtime,
      outbox: this.outbox,
      space: this.kv.space("inbound"),
      adapter: (channel, accountId) => this.adapter(channel, accountId),
      log: this.log.child({ component: "router" }),
      stopSubagents: (key) => this.stopHooks.flatMap((hook) => hook(key)),
      botUsername: (channel, accountId) => (this.adapter(channel, accountId) as { botUsername?: () => string | undefined } | undefined)?.botUsername?.(),
    });
  }

  addTools(source: ToolSource | AgentTool[]): void {
    this.toolSources.push(typeof source === "function" ? source : () => source);
  }

  addToolFilter(filter: ToolFilter): void {
    this.toolFilters.push(filter);
  }

  /** Every registered tool a run in `scope` may use. */
  toolsFor(scope: ToolScope): AgentTool[] {
    return this.toolSources.flatMap((source) => source(scope)).filter((tool) => this.toolFilters.every((keep) => keep(scope, tool)));
  }

  registerAdapter(adapter: ChannelAdapter): void {
    this.adapters.set(`${adapter.channel}:${adapter.accountId}`, adapter);
  }

  /** The adapter for a channel/account; an unknown account falls back to the channel's only one. */
  adapter(channel: string, accountId: string): ChannelAdapter | undefined {
    const exact = this.adapters.get(`${channel}:${accountId}`);
    if (exact) return exact;
    const same = [...this.adapters.values()].filter((a) => a.channel === channel);
    return same.length === 1 ? same[0] : undefined;
  }

  /**
   * The bot account a caller means on `channel` when it names none: "default", or the channel's
   * only account whatever its configured id (`channels.<name>.accountId`). Sessions record the
   * account their chat came through, so policy lookups and per-account rate limits must use the
   * same id as the replies of that chat do.
   */
  defaultAccountId(channel: string): string {
    return this.adapter(channel, DEFAULT_ACCOUNT_ID)?.accountId ?? DEFAULT_ACCOUNT_ID;
  }

  /** A durable key/value space for an adapter (offsets, registered commands). */
  adapterKv(channel: string, accountId: string): AdapterKv {
    return asAdapterKv(this.adapterSpace(channel, accountId));
  }

  /** The store space behind adapterKv. */
  adapterSpace(channel: string, accountId: string): KvSpace<unknown> {
    return this.kv.space<unknown>(`adapter:${channel}:${accountId}`);
  }

  /** Canonical key of a caller-supplied key (R1, R6). */
  canonicalKey(raw: string, agentId = this.defaultAgentId): SessionKey {
    return canonicalizeKey(raw, { agentId, scope: this.config.session.scope });
  }

  /**
   * A session key or sessionId → the stored key (R12). Keys that look like keys are canonicalised
   * (and need not exist); anything else must be a known key or sessionId.
   */
  resolveSessionRef(ref: string, agentId = this.defaultAgentId): SessionKey {
    const trimmed = ref.trim();
    if (!trimmed) throw new SessionNotFoundError(ref);
    if (looksLikeSessionKey(trimmed)) return this.canonicalKey(trimmed, agentId);
    const asKey = this.canonicalKey(trimmed, agentId);
    if (this.sessions.get(asKey)) return asKey;
    const byId = this.sessions.keyForSessionId(trimmed);
    if (byId) return byId as SessionKey;
    throw new SessionNotFoundError(trimmed, "sessionId");
  }

  async close(): Promise<void> {
    await this.sessions?.flush();
    await this.transcripts.close();
    this.journal?.close();
    await this.kv?.close();
    await this.lock?.release();
  }
}
