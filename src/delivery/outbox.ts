/**
 * THE one outbound gate (DESIGN "One gate out"): every message that leaves the daemon — replies,
 * announces, gateway `send`, command answers — is written here first, checked against the send
 * policy, chunked, rate-limited, sent, and acknowledged.
 *
 * Durability per chunk: a chunk is marked `attempted` in the store before the platform call, a
 * line is written to the send journal the instant before the call (send-journal.ts), and the chunk
 * is marked `sent` after it. After a crash, a chunk left `attempted` without a journal line never
 * reached the platform and is sent; one with a line is repeated only where the platform dedupes by
 * our idempotency key (Discord nonces); elsewhere it is reconciled as `unknown_after_send` and
 * skipped — never re-sent blind, because a duplicate reply is the most common complaint of such
 * daemons — and the remaining chunks continue. Queued messages resume in order.
 */
import type pino from "pino";
import { lazyChild } from "../log.js";
import type { ChannelAdapter, OutboundTarget, RateLimit } from "../channels/types.js";
import { PlatformError } from "../channels/types.js";
import { resolveSendPolicy, type SendPolicyConfig, type SendPolicyResult } from "../policy/send-policy.js";
import { sameDestination } from "../sessions/entry.js";
import { displayKey } from "../sessions/keys.js";
import type { SessionStore } from "../sessions/session-store.js";
import type { TranscriptStore } from "../sessions/transcript.js";
import type { KvSpace } from "../store/kv.js";
import { chunkText } from "./chunk.js";
import { RateLimiter, type RateTicket } from "./rate-limiter.js";
import { conservativeJournal, type SendJournal } from "./send-journal.js";
import { BoundedMap } from "../util/bounded-map.js";
import { isIoError } from "../util/io-error.js";
import { retryIo } from "../util/io-retry.js";

export type OutboundKind = "reply" | "announce" | "send" | "command";

export interface OutboundRequest {
  /** Idempotency id: the same id is delivered at most once, across restarts. */
  id: string;
  /** The session the message belongs to: its override and chat type feed the policy. */
  sessionKey?: string;
  target: OutboundTarget;
  text: string;
  kind: OutboundKind;
  /**
   * The single policy exception (DESIGN): the answer to an owner's own command, so that
   * `/send off` can be confirmed in the chat it just silenced. Nothing else may set it.
   */
  ownerCommandAnswer?: boolean;
  /**
   * It answers a message of its session's own chat (the router's replies and notices): that
   * session's policy alone decides, without looking for other sessions at the destination — a
   * DM session shared by many peers (`dmScope: "main"`) records only its latest peer's route.
   */
  inChat?: boolean;
}

export type OutboxState = "queued" | "sending" | "sent" | "suppressed" | "failed";

export interface OutboxRecord {
  id: string;
  sessionKey?: string;
  target: OutboundTarget;
  kind: OutboundKind;
  ownerCommandAnswer?: boolean;
  inChat?: boolean;
  text: string;
  chunks?: string[];
  state: OutboxState;
  /** Index of the next chunk to send. */
  next: number;
  /** Chunk index whose platform call started but was never acknowledged. */
  attempted?: number;
  /** When the latest attempt at a chunk began (stored with its `attempted` mark). */
  lastAttemptAt?: number;
  /**
   * Where the platform dedupes (idempotentSends): when the current chunk's earliest attempt that
   * may have reached the platform began. Its dedupe window (IDEMPOTENCY_WINDOW_MS) counts from there.
   */
  reachedAt?: number;
  /** When the current chunk's first failed attempt began (see maxAttempts). */
  failingSince?: number;
  unknownChunks?: number[];
  messageIds: string[];
  /** Attempts at the current chunk (from 0 again once one is acknowledged): the backoff and the cap. */
  attempts: number;
  /** Starts that found the current chunk's send interrupted (MAX_INTERRUPTED_STARTS). */
  interruptions?: number;
  createdAt: number;
  updatedAt: number;
  error?: string;
  policy?: string;
}

export type OutboxResult =
  | { status: "sent"; id: string; messageIds: string[]; unknownChunks?: number[] }
  | { status: "suppressed"; id: string; reason: string }
  | { status: "failed"; id: string; error: string };

export interface OutboxDeps {
  space: KvSpace<OutboxRecord>;
  sessions: SessionStore;
  transcripts: TranscriptStore;
  policy: () => SendPolicyConfig;
  adapter: (channel: string, accountId: string) => ChannelAdapter | undefined;
  log: pino.Logger;
  now?: () => number;
  sleep?: (ms: number) => Promise<void>;
  /**
   * Attempts for a message whose failures are retryable (rate limits, transport), counted while
   * the platform takes other sends of the same account; during an outage maxAgeMs alone applies.
   */
  maxAttempts?: number;
  /** A retryable failure keeps retrying until the message is this old (platform outages). */
  maxAgeMs?: number;
  /** Keep finished records this long so a repeated id stays a no-op (ms). */
  retentionMs?: number;
  /** Which interrupted sends may have reached the platform; without one, any may have. */
  journal?: SendJournal;
  /**
   * The keys the chat at a destination has as a group or channel session, so that a policy set
   * for it before it first spoke (`sessions.patch` creates the entry, no route recorded yet)
   * governs deliveries there too (see evaluateDelivery).
   */
  chatSessionKeys?: (target: OutboundTarget) => string[];
}

const TERMINAL: ReadonlySet<OutboxState> = new Set(["sent", "suppressed", "failed"]);

/**
 * A chunk whose send was interrupted at this many starts in a row is failed rather than tried
 * again: a send that kills the process (in an adapter, before or during its platform call) would
 * otherwise crash the daemon at every start. Kills that merely land during a send stay far below
 * (as the inbound side's MAX_RESUMES).
 */
export const MAX_INTERRUPTED_STARTS = 10;

/**
 * How long after a send that may have reached it a platform that dedupes by idempotency key is
 * trusted to still dedupe a repeat. Discord checks a nonce (enforce_nonce) only "in the past few
 * minutes" (Create Message): a chunk repeated later — by a restart long after the send it
 * interrupted, or by retries through an outage that outlasts the window — would be posted twice.
 * Past this, such a chunk is settled as on a platform without keys: `unknown_after_send`, not
 * re-sent. Two minutes stays inside "a few"; a send that never reached the platform (no journal
 * line, a refused connection, a 429) is sent however late.
 */
export const IDEMPOTENCY_WINDOW_MS = 2 * 60_000;

/**
 * Finished messages kept whole in memory (`get`). Older ones are remembered by outcome only: a
 * daemon that kept every record it ever sent grew by ~700 bytes a message, and the collector's
 * full passes over that heap were the longest pauses on the inbound path (bench/). Few: a record
 * kept for a thousand messages (half a second at 2,000 msg/s) outlived the young generation and
 * died in the old one, ~700 bytes of it a message, bringing the next full collection closer.
 */
const RECENT_FINISHED = 100;
/** Finished messages whose outcome answers a repeated enqueue of their id (at least half as many kept, newest). */
const MAX_FINISHED = 100_000;

export class Outbox {
  /** Unfinished messages and the RECENT_FINISHED most recently finished. */
  private readonly records = new Map<string, OutboxRecord>();
  /**
   * Each outcome as its JSON: one string instead of an object, its message ids and their array —
   * a hundred thousand of them are live heap that every full collection walks, and each was
   * promoted there on its way out (bench/). Read back only for a repeated id.
   */
  private readonly finished = new BoundedMap<string, string>(MAX_FINISHED);
  /** Ids of the finished records still in `records`, oldest first. */
  private readonly recentlyFinished = new Set<string>();
  private readonly waiters = new Map<string, Array<(r: OutboxResult) => void>>();
  private readonly lanes = new Map<string, Promise<void>>();
  /** When a send of each bot account (`channel:accountId`) last went through. */
  private readonly deliveredAt = new Map<string, number>();
  private readonly limiter: RateLimiter;
  private readonly now: () => number;
  private readonly sleep: (ms: number) => Promise<void>;
  private readonly journal: SendJournal;
  private stopped = false;
  private inflight = 0;
  private failedHere = 0;
  private unknownHere = 0;
  private lastCreatedAt = 0;
  /** The accepting write of a message just enqueued, until it has committed. */
  private readonly accepting = new Map<string, Promise<void>>();
  private release!: () => void;
  /** Sending waits for this: at start-up, until the adapters are connected. */
  private readonly gate = new Promise<void>((resolve) => (this.release = resolve));

  constructor(private readonly deps: OutboxDeps) {
    this.now = deps.now ?? Date.now;
    this.sleep = deps.sleep ?? ((ms) => new Promise((r) => setTimeout(r, ms)));
    this.journal = deps.journal ?? conservativeJournal;
    // Windows and retry-afters are durations: on the wall clock, one set back by hours (an NTP
    // correction, a VM resumed) held every chat that had just sent for those hours.
    this.limiter = new RateLimiter(deps.now ?? (() => performance.now()), this.sleep);
  }

  /**
   * Load records, reconcile interrupted sends and queue unfinished ones. With `hold`, nothing is
   * sent until `open()` — the daemon opens once the platform adapters have started.
   */
  async start(opts: { hold?: boolean } = {}): Promise<void> {
    if (!opts.hold) this.open();
    const retention = this.retentionMs;
    const rows = await this.deps.space.entries();
    rows.sort((a, b) => a[1].createdAt - b[1].createdAt);
    // Deleted together: the store runs consecutive deletes as one statement, where one commit
    // each made a restart after weeks of uptime spend minutes pruning.
    const expired: Array<Promise<void>> = [];
    for (const [, record] of rows) {
      if (TERMINAL.has(record.state)) {
        if (this.now() - record.updatedAt > retention) expired.push(this.deps.space.delete(record.id));
        else this.retire(record);
        continue;
      }
      this.records.set(record.id, record);
      this.schedule(record);
    }
    this.journal.retain((id, chunk) => this.records.get(id)?.attempted === chunk);
    await Promise.all(expired);
  }

  open(): void {
    this.release();
  }

  /**
   * Deletes finished records older than the retention from the store; the daemon runs it every
   * hour, so the store of a daemon that runs for weeks stays a day deep. Returns how many.
   */
  async prune(): Promise<number> {
    const cutoff = this.now() - this.retentionMs;
    const expired: string[] = [];
    await this.deps.space.scan((id, record) => {
      if (TERMINAL.has(record.state) && record.updatedAt < cutoff) expired.push(id);
    });
    // Deleted together: the store runs consecutive deletes as one statement.
    await Promise.all(expired.map((id) => this.deps.space.delete(id)));
    return expired.length;
  }

  private get retentionMs(): number {
    return this.deps.retentionMs ?? 24 * 3600_000;
  }

  /** Messages whose delivery failed in this process (`health`, `status`): the log says why. */
  get failed(): number {
    return this.failedHere;
  }

  /**
   * Messages finished in this process with a chunk that may or may not have arrived (a send cut
   * off after it reached the platform, or by a restart), not sent again (`health`, `status`).
   */
  get unknown(): number {
    return this.unknownHere;
  }

  /** Messages not yet finished (queue depth for `status`). */
  get pending(): number {
    let n = 0;
    for (const r of this.records.values()) if (!TERMINAL.has(r.state)) n++;
    return n;
  }

  /** A message not yet finished, or one of the last RECENT_FINISHED finished in this process. */
  get(id: string): OutboxRecord | undefined {
    return this.records.get(id);
  }

  /** Whether a message with this id was accepted (and not forgotten: see MAX_FINISHED). */
  has(id: string): boolean {
    return this.records.has(id) || this.finished.has(id);
  }

  /**
   * Durably accept a message (resolves once it is written) and return a promise of its outcome.
   * A repeated id returns the first message's outcome and sends nothing.
   */
  async enqueue(req: OutboundRequest): Promise<{ id: string; done: Promise<OutboxResult> }> {
    const existing = this.records.get(req.id);
    if (existing) {
      // Accepted only once the first enqueue's write is: if it fails, so does this one.
      await this.accepting.get(req.id);
      return { id: req.id, done: this.outcome(existing) };
    }
    const outcome = this.finished.get(req.id);
    if (outcome !== undefined) return { id: req.id, done: Promise.resolve(JSON.parse(outcome) as OutboxResult) };
    // Strictly increasing, so queued messages resume in the order they were enqueued.
    const t = (this.lastCreatedAt = Math.max(this.now(), this.lastCreatedAt + 0.001));
    const record: OutboxRecord = {
      id: req.id,
      sessionKey: req.sessionKey,
      target: req.target,
      kind: req.kind,
      ...(req.ownerCommandAnswer ? { ownerCommandAnswer: true } : {}),
      ...(req.inChat ? { inChat: true } : {}),
      text: req.text,
      state: "queued",
      next: 0,
      messageIds: [],
      attempts: 0,
      createdAt: t,
      updatedAt: t,
    };
    this.records.set(record.id, record);
    const done = this.outcome(record);
    // Scheduled before this write completes, so that the first chunk's `attempted` write usually
    // lands in the same commit (one commit fewer before the send); nothing is sent until this
    // write, issued first, has committed (see sendChunk).
    const written = this.persist(record).catch((err: unknown) => {
      // Not accepted: forgotten (before anyone awaiting this write resumes), so that the caller's
      // retry of this id is a message of its own, not this one's outcome, and its processing
      // stops having sent nothing. A first chunk's `attempted` mark issued meanwhile may have
      // committed on its own: the row is deleted after it (the store keeps issue order), or a
      // restart would send what the caller was told was not accepted.
      if (this.records.get(record.id) === record) {
        this.records.delete(record.id);
        this.deps.space.delete(record.id).catch((cause: unknown) => this.deps.log.error({ err: cause, outboxId: record.id }, "could not remove the record of a message not accepted"));
      }
      throw err;
    });
    this.accepting.set(record.id, written);
    this.schedule(record);
    try {
      await written;
    } finally {
      if (this.accepting.get(record.id) === written) this.accepting.delete(record.id);
    }
    return { id: record.id, done };
  }

  /** The policy verdict the outbox would apply to a message for this session on `channel`. */
  evaluate(sessionKey: string | undefined, channel: string): SendPolicyResult {
    const entry = sessionKey ? this.deps.sessions.get(sessionKey) : undefined;
    return resolveSendPolicy(this.deps.policy(), {
      sessionKey,
      override: entry?.sendPolicy,
      channel,
      chatType: entry?.chatType,
    });
  }

  /**
   * The verdict for a request made in a session (`chat.send`, `agent`, the text after `/new`):
   * judged on the channel the session lives on, else `channel`, else the web chat.
   */
  evaluateSession(sessionKey: string, channel?: string): SendPolicyResult {
    const entry = this.deps.sessions.get(sessionKey);
    return this.evaluate(sessionKey, entry?.channel ?? entry?.deliveryContext?.channel ?? entry?.lastChannel ?? channel ?? "webchat");
  }

  /**
   * The verdict for one delivery. To its session's own chat: that session's (evaluate). Anywhere
   * else — a hook's or `agent`'s `channel`/`to`, a gateway `send` naming some other session or
   * none — the delivery belongs to a session of its own (the hook's, the caller's), but what it
   * shows lands in that chat, so the chat's side counts too, as the reference system's deny did
   * not against its other send paths (ecosystem §0.2):
   * - `chatType` rules match the destination's type where the platform's ids tell it (a Telegram
   *   group's negative id), also for a chat that has never spoken;
   * - every other session living at the destination (by the route it recorded, or — set up before
   *   the chat first spoke — by the key the chat has there) must allow it: a `/send off` there holds.
   */
  evaluateDelivery(sessionKey: string | undefined, target: OutboundTarget, inChat = false): SendPolicyResult {
    const entry = sessionKey ? this.deps.sessions.get(sessionKey) : undefined;
    if (inChat || (entry && sameDestination(entry.deliveryContext, target))) return this.evaluate(sessionKey, target.channel);
    const chatType = this.deps.adapter(target.channel, target.accountId)?.chatTypeOf?.(target) ?? entry?.chatType;
    const own = resolveSendPolicy(this.deps.policy(), { sessionKey, override: entry?.sendPolicy, channel: target.channel, chatType });
    if (own.decision === "deny") return own;
    for (const key of this.residents(sessionKey, target)) {
      const theirs = this.evaluate(key, target.channel);
      if (theirs.decision === "deny") return { decision: "deny", reason: `${theirs.reason} of ${displayKey(key)}, the session at the destination` };
    }
    return own;
  }

  /** Sessions other than `sessionKey` living at the destination (under any target the platform delivers there). */
  private residents(sessionKey: string | undefined, target: OutboundTarget): string[] {
    const { sessions } = this.deps;
    const targets = [target, ...(this.deps.adapter(target.channel, target.accountId)?.sameChatTargets?.(target) ?? [])];
    const keys = new Set<string>();
    // By its key only while it has no route: once the chat has spoken, its route says which bot
    // account's chat it is (one account's chat is not another's).
    for (const key of targets.flatMap((t) => this.deps.chatSessionKeys?.(t) ?? [])) {
      const entry = key === sessionKey ? undefined : sessions.get(key);
      if (entry && !entry.deliveryContext) keys.add(key);
    }
    for (const entry of sessions.list({ where: (e) => e.key !== sessionKey && targets.some((t) => sameDestination(e.deliveryContext, t)) })) keys.add(entry.key);
    return [...keys];
  }

  /** Stop taking new work; wait for in-flight platform calls to finish. */
  async stop(): Promise<void> {
    this.stopped = true;
    // Sends waiting for their rate limit end now, unsent.
    this.limiter.close();
    const deadline = this.now() + 5000;
    while (this.inflight > 0 && this.now() < deadline) await new Promise((r) => setTimeout(r, 10));
  }

  private outcome(record: OutboxRecord): Promise<OutboxResult> {
    if (TERMINAL.has(record.state)) return Promise.resolve(toResult(record));
    return new Promise((resolve) => {
      const list = this.waiters.get(record.id) ?? [];
      list.push(resolve);
      this.waiters.set(record.id, list);
    });
  }

  /** One FIFO lane per destination keeps chunks and consecutive replies in order. */
  private schedule(record: OutboxRecord): void {
    const lane = `${record.target.channel}|${record.target.accountId}|${record.target.to}|${record.target.threadId ?? ""}`;
    const prev = this.lanes.get(lane) ?? Promise.resolve();
    const run = prev.then(() => this.process(record)).catch((err: unknown) => {
      this.deps.log.error({ err, outboxId: record.id }, "outbox processing crashed");
    });
    this.lanes.set(lane, run);
    void run.finally(() => {
      if (this.lanes.get(lane) === run) this.lanes.delete(lane);
    });
  }

  private async process(record: OutboxRecord): Promise<void> {
    await this.gate;
    if (this.stopped || TERMINAL.has(record.state) || this.records.get(record.id) !== record) return;
    const log = lazyChild(this.deps.log, { outboxId: record.id, sessionKey: record.sessionKey, channel: record.target.channel, accountId: record.target.accountId });
    if (record.state === "queued") {
      const verdict = this.evaluateDelivery(record.sessionKey, record.target, record.inChat);
      record.policy = verdict.reason;
      if (verdict.decision === "deny" && !record.ownerCommandAnswer) {
        if (!(await this.accepted(record))) return;
        log.info({ kind: record.kind, reason: verdict.reason }, "delivery suppressed by send policy");
        await this.finish(record, "suppressed", log);
        await this.recordDelivery(record, "suppressed", `send policy deny (${verdict.reason})`);
        return;
      }
      const adapter = this.deps.adapter(record.target.channel, record.target.accountId);
      if (!adapter) {
        if (!(await this.accepted(record))) return;
        record.error = `channel not connected: ${record.target.channel} (account ${record.target.accountId})`;
        log.warn(record.error);
        await this.finish(record, "failed", log);
        await this.recordDelivery(record, "failed", record.error);
        return;
      }
      record.chunks = chunkText(record.text, adapter.textChunkLimit, record.target.channel === "discord" ? { maxLines: 17 } : undefined);
      // Persisted with the first chunk's `attempted` mark (one write, not two); a crash before
      // that leaves the record queued, and it is simply chunked again.
      record.state = "sending";
    }
    await this.sendChunks(record, log);
  }

  private async sendChunks(record: OutboxRecord, log: pino.Logger): Promise<void> {
    const chunks = record.chunks ?? [];
    if (record.attempted !== undefined && !(await this.reconcile(record, log))) return;
    while (record.next < chunks.length) {
      if (this.stopped) return;
      const adapter = this.deps.adapter(record.target.channel, record.target.accountId);
      if (!adapter) {
        record.error = `channel not connected: ${record.target.channel}`;
        await this.finish(record, "failed", log);
        await this.recordDelivery(record, "failed", record.error);
        return;
      }
      // Limits are per bot account: two adapters' "global" (or the same chat id on two
      // platforms) must not share a bucket.
      const scope = `${record.target.channel}:${record.target.accountId}|`;
      const limits: RateLimit[] = (adapter.rateLimitsFor?.(record.target) ?? []).map((l) => ({ ...l, key: scope + l.key }));
      const ticket = await this.limiter.acquire(limits);
      if (!ticket) return;
      // The policy again as each chunk's turn comes: an owner's `/send off` while a long reply was
      // going out (or waiting out a rate limit, an outage, a restart) stops the rest of it (D2).
      const verdict = record.ownerCommandAnswer ? undefined : this.evaluateDelivery(record.sessionKey, record.target, record.inChat);
      if (verdict?.decision === "deny") {
        this.limiter.settle(ticket);
        return this.suppressRest(record, verdict, chunks.length, log);
      }
      // Settled at its answer inside; here too for the ways out with none (stopped before the
      // call, a failed write), where the send would otherwise keep its place in every bucket for good.
      const next = await this.sendChunk(record, adapter, limits, ticket, log).finally(() => this.limiter.settle(ticket));
      if (next === "stop") return;
    }
    const inDoubt = !!record.unknownChunks?.length;
    if (inDoubt) this.unknownHere++;
    await this.finish(record, "sent", log);
    await this.recordDelivery(record, inDoubt ? "unknown_after_send" : "sent");
  }

  /** A message being sent that the send policy now denies: the rest of it is not sent, and it is finished, suppressed. */
  private async suppressRest(record: OutboxRecord, verdict: SendPolicyResult, chunkCount: number, log: pino.Logger): Promise<void> {
    if (!(await this.accepted(record))) return;
    record.policy = verdict.reason;
    log.info({ kind: record.kind, reason: verdict.reason, chunksSent: record.next, chunks: chunkCount }, "rest of the delivery suppressed by send policy");
    await this.finish(record, "suppressed", log);
    await this.recordDelivery(record, "suppressed", `send policy deny (${verdict.reason}) after ${record.next} of ${chunkCount} chunks`);
  }

  /** One attempt at the record's next chunk, its rate-limit place granted: "stop" ends the record's sending. */
  private async sendChunk(record: OutboxRecord, adapter: ChannelAdapter, limits: RateLimit[], ticket: RateTicket, log: pino.Logger): Promise<"next" | "stop"> {
    const chunks = record.chunks ?? [];
    // Never send a message whose enqueue write failed (the caller was told it was not accepted):
    // checked before the mark is issued (a write after enqueue's delete would bring the row back)
    // and after it (the enqueue write, issued first, may still fail).
    if (this.records.get(record.id) !== record) return "stop";
    if (adapter.idempotentSends && record.reachedAt !== undefined && this.now() - record.reachedAt > IDEMPOTENCY_WINDOW_MS) {
      log.warn({ chunk: record.next, sinceMs: this.now() - record.reachedAt }, "send may have reached the platform longer ago than it dedupes repeats; chunk not re-sent (unknown_after_send)");
      return this.inDoubt(record, chunks.length, log);
    }
    record.attempted = record.next;
    record.lastAttemptAt = this.now();
    record.attempts++;
    const marked = this.persist(record);
    // Observed at once (it is awaited only once acceptance is known): not an unhandled rejection.
    marked.catch(() => undefined);
    if (!(await this.accepted(record)) || !(await this.persistRetrying(record, log, marked))) {
      record.attempted = undefined;
      return "stop";
    }
    this.inflight++;
    try {
      await adapter.prepareSend?.(record.target);
      if (this.stopped) {
        record.attempted = undefined;
        return "stop";
      }
      const chunk = record.next;
      // Also where the platform dedupes by idempotency key: it does so for minutes only, so a
      // restart needs to know whether the send may have started (IDEMPOTENCY_WINDOW_MS).
      const onWire = () => this.journalStarting(record.id, chunk, log);
      // Else the adapter writes the line at the last moment (ChannelAdapter.reportsWire).
      if (!adapter.reportsWire) onWire();
      const receipt = await adapter.send(record.target, chunks[chunk], { idempotencyKey: `${record.id}#${chunk}`, ...(adapter.reportsWire ? { onWire } : {}) });
      this.limiter.settle(ticket);
      this.deliveredAt.set(accountOf(record), this.now());
      record.messageIds.push(receipt.messageId);
      record.attempted = undefined;
      record.error = undefined;
      toNextChunk(record);
      // The last chunk's acknowledgement is persisted by finish() (one write, not two).
      if (record.next < chunks.length && !(await this.persistRetrying(record, log))) return "stop";
      return "next";
    } catch (err) {
      this.limiter.settle(ticket);
      record.attempted = undefined;
      const perr = err instanceof PlatformError ? err : new PlatformError(record.target.channel, "transport", errorMessage(err), { cause: err });
      record.error = perr.message;
      // As after a crash mid-send (reconcile): a chunk that may have arrived is not sent again
      // where the platform would not dedupe it — a duplicate is worse than a reply marked unknown.
      if (perr.outcomeUnknown && !adapter.idempotentSends) {
        log.warn({ err: perr.message, chunk: record.next }, "send failed after it reached the platform; chunk not re-sent (unknown_after_send)");
        return this.inDoubt(record, chunks.length, log);
      }
      // Repeated under the same key, but only while the platform still dedupes it (see above).
      if (perr.outcomeUnknown) record.reachedAt ??= record.lastAttemptAt;
      // Outages are retried (capped backoff) for hours: a reply is worth more late than lost.
      // maxAttempts (~20 minutes of 30 s retries) would end that long before maxAgeMs, so it
      // counts only while the platform takes the account's other sends — this send alone is
      // failing (a poison send holding up its chat); while nothing gets through, only age ends it.
      record.failingSince ??= record.lastAttemptAt ?? this.now();
      const platformUp = (this.deliveredAt.get(accountOf(record)) ?? -Infinity) >= record.failingSince;
      if (!perr.retryable || (record.attempts >= (this.deps.maxAttempts ?? 50) && platformUp) || this.now() - record.createdAt > (this.deps.maxAgeMs ?? 6 * 3600_000)) {
        log.error({ err: perr.message, code: perr.code, attempts: record.attempts }, "delivery failed");
        await this.finish(record, "failed", log);
        await this.recordDelivery(record, "failed", perr.message);
        return "stop";
      }
      const backoff = perr.retryAfterMs ?? Math.min(30_000, 500 * 2 ** (record.attempts - 1));
      if (perr.code === "rate_limited") this.limiter.penalize(limits, backoff);
      log.warn({ err: perr.message, code: perr.code, retryInMs: backoff }, "delivery retry scheduled");
      if (!(await this.persistRetrying(record, log))) return "stop";
      await this.sleep(backoff);
      return "next";
    } finally {
      this.inflight--;
    }
  }

  /** The record's next chunk may have arrived and is not sent again: `unknown_after_send`, and on to the rest. */
  private async inDoubt(record: OutboxRecord, chunkCount: number, log: pino.Logger): Promise<"next" | "stop"> {
    skipInDoubt(record);
    if (record.next < chunkCount && !(await this.persistRetrying(record, log))) return "stop";
    return "next";
  }

  /**
   * The journal line of a chunk about to go out. Adapters call it from deep inside their transport
   * (reportsWire), where a throw would crash the process: a failed write is logged instead.
   */
  private journalStarting(id: string, chunk: number, log: pino.Logger): void {
    try {
      this.journal.starting(id, chunk);
    } catch (err) {
      log.error({ err, chunk }, "send journal not written: a crash before this send is acknowledged could repeat it");
    }
  }

  /**
   * A chunk whose send was interrupted by a restart: repeat it only where that is safe, and not
   * for ever (MAX_INTERRUPTED_STARTS). False when the record is finished here.
   */
  private async reconcile(record: OutboxRecord, log: pino.Logger): Promise<boolean> {
    const index = record.attempted as number;
    record.attempted = undefined;
    const neverStarted = !this.journal.mayHaveStarted(record.id, index);
    const idempotent = !!this.deps.adapter(record.target.channel, record.target.accountId)?.idempotentSends;
    // The platform's dedupe counts from the earliest attempt that may have reached it.
    if (!neverStarted && idempotent) record.reachedAt ??= record.lastAttemptAt ?? record.updatedAt;
    const deduped = idempotent && record.reachedAt !== undefined && this.now() - record.reachedAt <= IDEMPOTENCY_WINDOW_MS;
    if (neverStarted || deduped) {
      const interruptions = (record.interruptions ?? 0) + 1;
      if (interruptions >= MAX_INTERRUPTED_STARTS) {
        record.error = `send of chunk ${index} interrupted by a restart at ${interruptions} starts in a row: given up (a send that kills the process would crash the daemon at every start)`;
        log.error({ chunk: index, interruptions }, record.error);
        await this.finish(record, "failed", log);
        await this.recordDelivery(record, "failed", record.error);
        return false;
      }
      record.next = index;
      record.interruptions = interruptions;
      log.info({ chunk: index, interruptions }, neverStarted ? "send interrupted by a restart before it reached the platform; sending it" : "send interrupted by a restart; repeating it under the same idempotency key");
    } else {
      record.next = index;
      skipInDoubt(record);
      log.warn({ chunk: index }, idempotent ? "send interrupted by a restart longer ago than the platform dedupes repeats; chunk not re-sent (unknown_after_send)" : "send interrupted by a restart; chunk not re-sent (unknown_after_send)");
    }
    return this.persistRetrying(record, log);
  }

  /**
   * Whether the record's enqueue write committed, once it has settled: nothing is sent or decided
   * for a message the caller was told was not accepted (enqueue forgets it when the write fails).
   */
  private async accepted(record: OutboxRecord): Promise<boolean> {
    await this.accepting.get(record.id)?.catch(() => undefined);
    return this.records.get(record.id) === record;
  }

  private async finish(record: OutboxRecord, state: OutboxState, log: pino.Logger): Promise<void> {
    record.state = state;
    if (state === "failed") this.failedHere++;
    if (!(await this.persistRetrying(record, log))) return;
    const result = this.retire(record);
    for (const resolve of this.waiters.get(record.id) ?? []) resolve(result);
    this.waiters.delete(record.id);
  }

  /** A finished record: kept whole among the most recent, then by outcome only. */
  private retire(record: OutboxRecord): OutboxResult {
    const result = toResult(record);
    this.finished.set(record.id, JSON.stringify(result));
    this.records.set(record.id, record);
    this.recentlyFinished.delete(record.id);
    this.recentlyFinished.add(record.id);
    if (this.recentlyFinished.size > RECENT_FINISHED) {
      const oldest = this.recentlyFinished.values().next().value as string;
      this.recentlyFinished.delete(oldest);
      this.records.delete(oldest);
    }
    return result;
  }

  private async recordDelivery(record: OutboxRecord, status: "sent" | "suppressed" | "failed" | "unknown_after_send", reason?: string): Promise<void> {
    const entry = record.sessionKey ? this.deps.sessions.get(record.sessionKey) : undefined;
    if (!entry) return;
    const ref = { path: this.deps.sessions.transcriptPath(entry), sessionId: entry.sessionId, key: entry.key };
    await this.deps.transcripts
      .appendDelivery(ref, { status, outboxId: record.id, channel: record.target.channel, to: record.target.to, ...(reason ? { reason } : {}), ...(status === "suppressed" ? { text: record.text } : {}) })
      .catch((err: unknown) => this.deps.log.error({ err, outboxId: record.id }, "could not record delivery in transcript"));
  }

  /**
   * A write of an accepted message's progress (`first`: one already issued), tried again while
   * the store cannot write (a full disk, a read-only state directory): nothing of the message is
   * sent meanwhile, and its chat's later messages wait behind it. A failed write used to end the
   * message's processing, which left it unsent until a restart, overtaken by the chat's next
   * reply. False once the outbox stops first: the store holds the last state written, which
   * the next start resumes.
   */
  private async persistRetrying(record: OutboxRecord, log: pino.Logger, first?: Promise<void>): Promise<boolean> {
    try {
      await retryIo((failures) => (failures === 0 && first ? first : this.persist(record)), {
        stopped: () => this.stopped,
        sleep: this.sleep,
        // One line per outage of the store, not one per try.
        onRetry: (err, failures, retryInMs) => failures === 1 && log.warn({ err, retryInMs }, "outbox: the store cannot write; this delivery waits for it (nothing is sent meanwhile)"),
        onRecovered: (failures) => log.info({ failures }, "outbox: the store writes again; delivery resumes"),
      });
      return true;
    } catch (err) {
      if (this.stopped && isIoError(err)) return false;
      throw err;
    }
  }

  private async persist(record: OutboxRecord): Promise<void> {
    record.updatedAt = this.now();
    // Decided now: set() serialises the record as it is at this call.
    const settles = record.attempted === undefined;
    await this.deps.space.set(record.id, record);
    // Once the store shows no send in progress, no journal line of the record is needed.
    if (settles) this.journal.settled(record.id);
  }
}

/** On to the record's next chunk, which gets its own tries, backoff and dedupe window. */
function toNextChunk(record: OutboxRecord): void {
  record.next++;
  record.attempts = 0;
  record.interruptions = undefined;
  record.reachedAt = undefined;
  record.failingSince = undefined;
}

/** The record's next chunk may have arrived: recorded as such (`unknown_after_send`) and not sent again. */
function skipInDoubt(record: OutboxRecord): void {
  record.unknownChunks = [...(record.unknownChunks ?? []), record.next];
  toNextChunk(record);
}

function accountOf(record: OutboxRecord): string {
  return `${record.target.channel}:${record.target.accountId}`;
}

function toResult(record: OutboxRecord): OutboxResult {
  switch (record.state) {
    case "sent":
      return { status: "sent", id: record.id, messageIds: record.messageIds, ...(record.unknownChunks?.length ? { unknownChunks: record.unknownChunks } : {}) };
    case "suppressed":
      return { status: "suppressed", id: record.id, reason: record.policy ?? "send policy" };
    default:
      return { status: "failed", id: record.id, error: record.error ?? "delivery failed" };
  }
}

function errorMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
