/**
 * Channel-independent inbound flow (DESIGN "One picture"):
 *   InboundMessage → dedupe + durable accept → command? → key → entry touch → transcript →
 *   (policy allows?) run → reply through the outbox.
 *
 * Every inbound message is written to the `inbound` space before the adapter is told it was
 * accepted, and marked done after its reply is in the outbox; after a crash, unfinished ones are
 * processed again (one already in its transcript is not recorded twice, and one whose run had
 * already answered is not run again), and the deterministic outbox id (`reply:<inbound id>`)
 * keeps the reply single.
 * A denied session still records what was said (deny means "don't deliver", not "don't listen").
 */
import { setTimeout as sleep } from "node:timers/promises";
import type pino from "pino";
import { lazyChild } from "../log.js";
import { z } from "zod";
import { MAX_NAME_CHARS, MAX_TIMESTAMP_MS, type ChannelAdapter, type InboundMessage, type NativeCommand, type OutboundTarget } from "../channels/types.js";
import type { Config } from "../config/schema.js";
import { NOT_ACCEPTING, type AgentRuntime, type RunOutcome } from "../agents/runtime.js";
import type { Outbox } from "../delivery/outbox.js";
import type { SessionStore } from "../sessions/session-store.js";
import type { TranscriptMessage, TranscriptStore } from "../sessions/transcript.js";
import type { KvSpace } from "../store/kv.js";
import { normalizeDeliveryContext, type SessionEntry, type SessionPatch } from "../sessions/entry.js";
import { parseCommand, type ParsedCommand } from "./command-parse.js";
import { executeCommand, type CommandDeps, type CommandScope } from "./commands.js";
import { isOwner } from "./owners.js";
import { resolveRoute, type Route } from "./route.js";
import { BoundedMap } from "../util/bounded-map.js";
import { safeParse } from "../util/safe-parse.js";
import { isSkipToken } from "../util/skip-token.js";
import { isIoError } from "../util/io-error.js";

interface InboundRecord {
  id: string;
  msg: InboundMessage;
  state: "pending" | "done";
  receivedAt: number;
  /** How many starts have resumed it unfinished (counted before each resumed attempt). */
  resumes?: number;
  /** The last failure of its processing (a bug's, or I/O's once retries ran out), for the log. */
  lastError?: string;
  /** The session its chat had when it came (see sessionSaidIn). */
  session?: SaidIn;
}

/** A session as a message found it: its sessionId, and its entry's creation (which a reset keeps and a delete does not). */
type SaidIn = { sessionId: string; createdAt: number };

/**
 * A finished message is kept as its id alone: enough to ignore a platform redelivery. One given up
 * (see MAX_RESUMES) keeps what was said, for the operator, until it is pruned with the rest.
 */
type StoredInbound = InboundRecord | { id: string; state: "done"; receivedAt: number; givenUp?: GivenUp };
type GivenUp = { msg: InboundMessage; resumes: number; lastError?: string };

/** Ids end up in store keys and session keys: non-blank, and well-formed Unicode (see kv.ts). */
const Id = z
  .string()
  .min(1)
  .max(512)
  .refine((s) => s.trim().length > 0, "must not be blank")
  .refine((s) => !/\p{Cs}/u.test(s), "must be well-formed Unicode");

/**
 * The trust boundary for what adapters hand the core: anything else is rejected with the reason
 * (and never stored), so a buggy or hostile edge cannot write a malformed record or session key.
 * Unknown fields are dropped.
 */
export const InboundMessageSchema = z.object({
  channel: z.enum(["webchat", "telegram", "discord", "whatsapp"]),
  accountId: Id,
  chatType: z.enum(["direct", "group", "channel"]),
  peerId: Id,
  threadId: Id.optional(),
  parentPeerId: Id.optional(),
  senderId: z.string().max(512).refine((s) => !/\p{Cs}/u.test(s), "must be well-formed Unicode"),
  senderName: z.string().max(MAX_NAME_CHARS).optional(),
  groupName: z.string().max(MAX_NAME_CHARS).optional(),
  text: z.string().max(200_000),
  messageId: Id,
  wasMentioned: z.boolean(),
  to: Id,
  timestamp: z.number().min(0, "must be a time in ms since 1970 (or 0 for unknown)").max(MAX_TIMESTAMP_MS, `must be a time a Date can hold (at most ${MAX_TIMESTAMP_MS} ms)`),
  forwarded: z.boolean().optional(),
  edited: z.boolean().optional(),
});

export type AcceptOutcome = { status: "accepted" | "duplicate" } | { status: "rejected"; error: string };

export interface RouterDeps extends CommandDeps {
  config: Config;
  sessions: SessionStore;
  transcripts: TranscriptStore;
  runtime: AgentRuntime;
  outbox: Outbox;
  space: KvSpace<StoredInbound>;
  adapter: (channel: string, accountId: string) => ChannelAdapter | undefined;
  log: pino.Logger;
  /** Telegram/Discord bot usernames, for `/cmd@BotName`. */
  botUsername?: (channel: string, accountId: string) => string | undefined;
}

const DONE_RETENTION_MS = 24 * 3600_000;
/**
 * Waits before processing a message again after an I/O failure (a full disk, a store that cannot
 * write): about four minutes in all, then it is left to the next start.
 */
const RETRY_DELAYS_MS = [1000, 2000, 4000, 8000, 15_000, 30_000, 60_000, 120_000];
/**
 * A message whose processing began again after this many starts without finishing is given up:
 * it failed every time (a bug it triggers) or the process died during it every time (a crash it
 * causes — left alone, the daemon would crash at every start). The chat gets a notice instead of
 * a reply. Kills that merely happen to land while it is in flight stay well below this (the crash
 * test's twelve kills in fifteen seconds: at most 4 in a row — see README).
 */
export const MAX_RESUMES = 10;
export const GIVEN_UP_NOTICE = "⚠️ This message could not be processed: it failed every time it was tried. The operator's log has the details.";
/** A run still going after this long shows the typing indicator… */
const TYPING_DELAY_MS = 500;
/** …at most once per chat in this long (Telegram shows it for 5 s, Discord for 10 s). */
const TYPING_MIN_GAP_MS = 4000;
/** How far back a resumed message (and its run's answer) is looked for in its transcript. */
const RESUME_LOOKBACK = 50;
/** Done inbound ids remembered in memory for dedupe (at least half as many; the store keeps a day). */
const MAX_DONE_IDS = 200_000;

export class InboundRouter {
  private readonly records = new Map<string, InboundRecord>();
  /** The accept write of each message still being stored. */
  private readonly accepting = new Map<string, Promise<void>>();
  /** Ids of finished messages (bounded), so a platform redelivery stays a no-op. */
  private readonly doneIds = new BoundedMap<string, true>(MAX_DONE_IDS);
  private readonly lanes = new Map<string, Promise<void>>();
  private readonly inflight = new Set<Promise<void>>();
  /** Messages accepted before a restart and not finished (their transcript line may exist). */
  private readonly resumed = new Set<string>();
  private lastReceivedAt = 0;
  /** Aborted by stop(): a message waiting to be retried is left to the next start. */
  private readonly stopping = new AbortController();
  /** Messages waiting to be processed again after an I/O failure (`health`). */
  private waitingToRetry = 0;
  /** Messages whose processing failed for good in this process: pending until the next start (`health`). */
  private readonly failed = new Set<string>();
  /** Messages given up in this process (MAX_RESUMES; `health`). */
  private givenUp = 0;
  /** When each chat last got a typing indicator, on the monotonic clock (bounded). */
  private readonly lastTyping = new BoundedMap<string, number>(10_000);
  /** Per session, the receivedAt up to which its messages were stopped by a `/stop` (bounded). */
  private readonly stoppedUpTo = new BoundedMap<string, number>(10_000);

  constructor(private readonly deps: RouterDeps) {}

  /** Resume messages accepted before a restart but not finished. */
  async start(): Promise<void> {
    const rows = await this.deps.space.entries();
    rows.sort((a, b) => a[1].receivedAt - b[1].receivedAt);
    const now = Date.now();
    const expired: Array<Promise<void>> = [];
    for (const [, rec] of rows) {
      if (rec.state === "done") {
        // Done ids are remembered for a day so a platform redelivery stays a no-op. Expired ones
        // are deleted together: the store runs consecutive deletes as one statement.
        if (now - rec.receivedAt > DONE_RETENTION_MS) expired.push(this.deps.space.delete(rec.id));
        else this.doneIds.set(rec.id, true);
        continue;
      }
      this.records.set(rec.id, rec);
      this.resumed.add(rec.id);
      this.deps.log.info({ inboundId: rec.id, resumes: rec.resumes ?? 0 }, "resuming inbound message accepted before restart");
      this.schedule(rec, Promise.resolve(), { countResume: true });
    }
    await Promise.all(expired);
  }

  /**
   * Adapter entry point: resolves once the message is durably accepted (or known). A malformed
   * message resolves `rejected` (logged, nothing stored): redelivering it could never succeed, so
   * an adapter that retries rejections (the Telegram offset) must not be told to. A failed store
   * write rejects, and the message may be delivered again.
   *
   * Messages take their place in their session's lane in call order, before the write completes,
   * so an adapter may accept a whole batch concurrently (one group commit) and keep its order.
   */
  async accept(input: InboundMessage): Promise<AcceptOutcome> {
    const parsed = safeParse(InboundMessageSchema, input);
    if (!parsed.success) {
      const error = `invalid inbound message: ${parsed.error.issues.map((i) => `${i.path.join(".") || "message"}: ${i.message}`).join("; ")}`;
      this.deps.log.warn({ err: error }, "inbound message rejected");
      return { status: "rejected", error };
    }
    const msg = parsed.data as InboundMessage;
    const id = `${msg.channel}:${msg.accountId}:${msg.messageId}`;
    if (this.records.has(id) || this.doneIds.has(id)) {
      // Known only once the first delivery's write has stored it: if that fails, so does this one.
      await this.accepting.get(id);
      this.deps.log.debug({ inboundId: id }, "duplicate inbound ignored");
      return { status: "duplicate" };
    }
    // Strictly increasing, so messages resumed after a restart keep their order even when a
    // batch was accepted within one millisecond (ties used to fall back to the store's key order,
    // where "…:10" sorts before "…:9").
    this.lastReceivedAt = Math.max(Date.now(), this.lastReceivedAt + 0.001);
    const route = resolveRoute(this.deps.config, msg);
    const current = this.deps.sessions.get(route.sessionKey);
    const rec: InboundRecord = { id, msg, state: "pending", receivedAt: this.lastReceivedAt, ...(current ? { session: { sessionId: current.sessionId, createdAt: current.createdAt } } : {}) };
    this.records.set(id, rec);
    const durable = this.deps.space.set(id, rec).catch((err: unknown) => {
      // Not accepted: forget it, so that the platform's redelivery is processed, not deduped.
      if (this.records.get(id) === rec) this.records.delete(id);
      throw err;
    });
    this.accepting.set(id, durable);
    this.schedule(rec, durable, {}, route);
    try {
      await durable;
    } finally {
      this.accepting.delete(id);
    }
    return { status: "accepted" };
  }

  /**
   * Accepted messages not yet finished; of them, those waiting to be retried after an I/O failure
   * and those whose processing failed, left to the next start (only the log said so before).
   */
  get counts(): { pending: number; retrying: number; failed: number; givenUp: number } {
    return { pending: this.records.size, retrying: this.waitingToRetry, failed: this.failed.size, givenUp: this.givenUp };
  }

  /** No more retries (shutdown): a message waiting for one stays pending, resumed at the next start. */
  stop(): void {
    this.stopping.abort();
  }

  /** Wait for everything accepted so far to finish (tests, shutdown). */
  async idle(): Promise<void> {
    while (this.inflight.size) await Promise.all(this.inflight);
  }

  /**
   * Deletes "done" records older than the dedupe window from the store; the daemon runs it every
   * hour, so the store of a daemon that runs for weeks stays a day deep. Returns how many.
   */
  async prune(now = Date.now()): Promise<number> {
    const expired: string[] = [];
    await this.deps.space.scan((id, rec) => {
      if (rec.state === "done" && now - rec.receivedAt > DONE_RETENTION_MS) expired.push(id);
    });
    await Promise.all(expired.map((id) => this.deps.space.delete(id)));
    return expired.length;
  }

  /** A native slash command: answered to the invoker only, acting on the chat it was used in. */
  async nativeCommand(cmd: NativeCommand): Promise<string> {
    const { config, log } = this.deps;
    const origin = { ...cmd.origin, text: cmd.text, wasMentioned: true } as InboundMessage;
    const route = resolveRoute(config, origin);
    const parsed = parseCommand(cmd.text);
    if (!parsed) return `Unknown command: ${cmd.text}`;
    if (!isOwner(config, origin.channel, origin.senderId)) {
      log.warn({ channel: origin.channel, senderId: origin.senderId, sessionKey: route.sessionKey, command: parsed.name }, "native command from non-owner refused");
      return "⛔ Not allowed: only owners can use this command.";
    }
    await this.touch(route, origin);
    const result = await this.command(parsed, { sessionKey: route.sessionKey, agentId: route.agentId, channel: origin.channel }, this.lastReceivedAt);
    if (result.continueWith) await this.accept({ ...origin, text: result.continueWith, messageId: `${origin.messageId}:continue` });
    return result.reply;
  }

  /**
   * Web chat / operator `chat.send` (the gateway already checked the token, scope and R29). The
   * operator is authenticated, so commands are allowed; the reply goes back to web chat through
   * the outbox, addressed to the session, with the runId as the message it answers. A run's `done`
   * says whether its reply reached web chat (`shown`): a silent or suppressed one did not.
   */
  async chatSend(p: { sessionKey: string; agentId: string; text: string; runId: string; timeoutMs?: number }): Promise<{ kind: "command"; reply: string } | { kind: "run"; done: Promise<{ outcome: RunOutcome; shown: boolean }> }> {
    const { outbox } = this.deps;
    const command = parseCommand(p.text);
    const scope = { sessionKey: p.sessionKey, agentId: p.agentId, channel: "webchat" as const };
    if (command) {
      const result = await this.command(command, scope, this.lastReceivedAt);
      if (result.continueWith) {
        const next = { ...p, text: result.continueWith, runId: `${p.runId}:continue` };
        // The gateway let the command through a denied session (so that `/send on` works); its
        // text is a message like any other there: recorded, no agent run (R29, as from a chat).
        const denied = outbox.evaluateSession(p.sessionKey).decision === "deny";
        (denied ? this.recordWebchat(next) : this.chatSend(next)).catch((err: unknown) => this.deps.log.error({ err }, "continuing /new failed"));
      }
      return { kind: "command", reply: result.reply };
    }
    // Refused before it is recorded: the client's retry after the restart is then its only copy.
    if (!this.deps.runtime.accepting) throw new Error(NOT_ACCEPTING);
    const { sessionId } = await this.recordWebchat(p);
    const { done } = this.deps.runtime.start({ sessionKey: p.sessionKey, agentId: p.agentId, message: p.text, runId: p.runId, userMessageRecorded: true, sessionId, origin: { channel: "webchat", to: p.sessionKey, accountId: "default" }, ...(p.timeoutMs !== undefined ? { timeoutMs: p.timeoutMs } : {}) });
    const delivered = done.then(async (outcome) => {
      if (outcome.status !== "ok" || !replyText(outcome)) return { outcome, shown: false };
      const sent = await outbox.enqueue({ id: `reply:webchat:${p.runId}`, sessionKey: p.sessionKey, target: { channel: "webchat", accountId: "default", to: p.sessionKey, replyToMessageId: p.runId }, text: outcome.reply, kind: "reply", inChat: true });
      return { outcome, shown: (await sent.done).status === "sent" };
    });
    return { kind: "run", done: delivered };
  }

  /** The entry and transcript line of an operator's web chat message; returns the session it was recorded in. */
  private async recordWebchat(p: { sessionKey: string; agentId: string; text: string }): Promise<{ sessionId: string }> {
    const { sessions, transcripts } = this.deps;
    const existing = sessions.get(p.sessionKey);
    // Only a web-chat-born session takes web chat as its route; an operator typing into a
    // Telegram group's session must not redirect that group's replies to the browser.
    const ownRoute = !existing?.deliveryContext || existing.deliveryContext.channel === "webchat";
    const entry = await sessions.upsert(
      p.sessionKey,
      p.agentId,
      ownRoute ? { lastChannel: "webchat", lastTo: p.sessionKey, lastAccountId: "default", deliveryContext: { channel: "webchat", to: p.sessionKey, accountId: "default" }, ...(existing?.chatType ? {} : { chatType: "direct" as const }) } : {},
    );
    await transcripts.appendMessage(
      { path: sessions.transcriptPath(entry), sessionId: entry.sessionId, key: entry.key },
      { role: "user", content: p.text, timestamp: Date.now(), provenance: { kind: "external_user" }, sender: { id: "operator", channel: "webchat" } },
    );
    return { sessionId: entry.sessionId };
  }

  /**
   * `durable`: the accept write; the message is processed only once it is stored. `countResume`:
   * a message resumed at start, whose attempt is counted (durably, before it begins: a message
   * that crashes the process is counted too) — when it begins, not at start-up, so that a process
   * killed while starting does not count against the messages it had not reached.
   */
  private schedule(rec: InboundRecord, durable: Promise<void> = Promise.resolve(), opts: { countResume?: boolean } = {}, route: Route = resolveRoute(this.deps.config, rec.msg)): void {
    // Commands bypass the session lane: `/stop` must not wait behind the run it stops.
    const command = this.commandOf(rec.msg);
    const isCommand = command !== null;
    const prev = isCommand ? Promise.resolve() : this.lanes.get(route.sessionKey) ?? Promise.resolve();
    const stored = durable.then(
      () => true,
      () => false,
    );
    const run = prev.then(async () => {
      if (!(await stored)) return;
      if (opts.countResume) {
        rec.resumes = (rec.resumes ?? 0) + 1;
        await this.deps.space.set(rec.id, rec).catch((err: unknown) => this.deps.log.error({ err, inboundId: rec.id }, "could not count the resume of an inbound message"));
      }
      await this.processRetrying(rec, route, command);
    }).catch((err: unknown) => {
      this.failed.add(rec.id);
      this.deps.log.error({ err, inboundId: rec.id, sessionKey: route.sessionKey, resumes: rec.resumes ?? 0 }, "inbound processing failed; the message stays pending, to be resumed at the next start");
      rec.lastError = errorText(err);
      this.deps.space.set(rec.id, rec).catch(() => undefined);
    });
    if (!isCommand) this.lanes.set(route.sessionKey, run);
    this.inflight.add(run);
    void run.finally(() => {
      this.inflight.delete(run);
      if (this.lanes.get(route.sessionKey) === run) this.lanes.delete(route.sessionKey);
    });
  }

  /**
   * An owner's command. `/stop` stops the session's messages accepted up to `upTo` too: those
   * waiting behind the run it aborts have no run yet, and would each start one after it.
   */
  private command(cmd: ParsedCommand, scope: CommandScope, upTo: number) {
    if (cmd.name === "stop") this.stoppedUpTo.set(scope.sessionKey, upTo);
    return executeCommand(cmd, scope, this.deps);
  }

  private commandOf(msg: InboundMessage) {
    if (msg.forwarded || msg.edited) return null;
    return this.commandText(msg);
  }

  /** The command the text reads as, whoever sent it and however. */
  private commandText(msg: InboundMessage) {
    return parseCommand(msg.text, { botUsername: this.deps.botUsername?.(msg.channel, msg.accountId) });
  }

  /**
   * An I/O failure (a full disk, the store refusing a write) is retried in the message's lane —
   * later messages of the session wait, as they would fail the same way — so that the message is
   * answered once the fault clears, not only at the next start. It goes through the path of a
   * message resumed after a restart: its transcript line may be written, its run may have answered.
   * Any other failure is a bug that would fail the same way again: it is thrown at once.
   */
  private async processRetrying(rec: InboundRecord, route: Route, command: ParsedCommand | null): Promise<void> {
    for (let attempt = 0; ; attempt++) {
      try {
        return await this.process(rec, route, command);
      } catch (err) {
        const delay = RETRY_DELAYS_MS[attempt];
        if (!isIoError(err) || delay === undefined || this.stopping.signal.aborted) throw err;
        this.deps.log.warn({ err, inboundId: rec.id, sessionKey: route.sessionKey, attempt: attempt + 1, retryInMs: delay }, "inbound processing failed on I/O; retrying");
        this.resumed.add(rec.id);
        this.waitingToRetry++;
        try {
          await sleep(delay, undefined, { signal: this.stopping.signal }).catch(() => undefined);
        } finally {
          this.waitingToRetry--;
        }
        if (this.stopping.signal.aborted) throw err;
      }
    }
  }

  private async process(rec: InboundRecord, route: Route, command: ParsedCommand | null): Promise<void> {
    const { msg } = rec;
    const { config, sessions, transcripts, outbox } = this.deps;
    const log = lazyChild(this.deps.log, { channel: msg.channel, accountId: msg.accountId, sessionKey: route.sessionKey, inboundId: rec.id });
    const target: OutboundTarget = { channel: msg.channel, accountId: msg.accountId, to: msg.to, ...(msg.threadId ? { threadId: msg.threadId } : {}) };
    if ((rec.resumes ?? 0) > MAX_RESUMES) return this.giveUp(rec, route, command, target, log);
    if (command) {
      if (!isOwner(config, msg.channel, msg.senderId)) {
        // Ignored, never answered, never run as a prompt (interfaces §5).
        log.warn({ senderId: msg.senderId, command: command.name }, "command from non-owner ignored");
        return this.finish(rec);
      }
      await this.touch(route, msg);
      const result = await this.command(command, { sessionKey: route.sessionKey, agentId: route.agentId, channel: msg.channel }, rec.receivedAt);
      await outbox.enqueue({ id: `cmd:${rec.id}`, sessionKey: route.sessionKey, target, text: result.reply, kind: "command", ownerCommandAnswer: true, inChat: true });
      // The command addressed the bot (commands pass mention gating), so its text is answered
      // in a group that requires a mention as a mention would be.
      if (result.continueWith) await this.accept({ ...msg, text: result.continueWith, messageId: `${msg.messageId}:continue`, wasMentioned: true });
      return this.finish(rec);
    }

    if (msg.edited) {
      // An edit is not a new prompt: a user who fixes a typo would get a second answer. Nor is it
      // recorded: the transcript keeps the message as first said, and the fixed text as a user
      // turn of its own would read to the model as one more message, still to be answered.
      if (!this.commandText(msg)) {
        log.debug("edited message ignored: an edit is not a new prompt");
        return this.finish(rec);
      }
      // Nor does an edit run a command (an old message edited into "/send off" would be a
      // spoofing vector): the owner is told to send it anew, anyone else is ignored as their
      // commands are (interfaces §5).
      if (!isOwner(config, msg.channel, msg.senderId)) {
        log.warn({ senderId: msg.senderId }, "edited message reading as a command ignored");
        return this.finish(rec);
      }
      await outbox.enqueue({ id: `cmd:${rec.id}`, sessionKey: route.sessionKey, target, text: EDITED_COMMAND_REPLY, kind: "command", ownerCommandAnswer: true, inChat: true });
      return this.finish(rec);
    }

    // The entry write is not on the reply's path: the store commits in issue order, so the reply
    // cannot be sent (its outbox record committed) before the entry is stored; finish() awaits it
    // so that a failed write leaves the message pending, to be resumed.
    const { entry, written: entryWritten } = this.stageTouch(route, msg);
    entryWritten.catch(() => undefined);
    const sessionId = sessionSaidIn(rec, entry);
    const ref = { path: sessions.transcriptPath({ agentId: entry.agentId, sessionId }), sessionId, key: entry.key };
    const said: TranscriptMessage & { role: "user" } = { role: "user", content: msg.text, timestamp: msg.timestamp || Date.now(), provenance: { kind: "external_user" }, sender: { id: msg.senderId, ...(msg.senderName ? { name: msg.senderName } : {}), channel: msg.channel } };
    // A message resumed after a crash may already be in the transcript, and answered there.
    const prior = this.resumed.has(rec.id) ? await this.priorRun(ref.path, said) : { recorded: false as const };
    if (!prior.recorded) await transcripts.appendMessage(ref, said);

    if (this.unmentioned(msg)) {
      log.debug("group message recorded; not mentioned, no run");
      return this.finish(rec, entryWritten);
    }
    if (rec.receivedAt <= (this.stoppedUpTo.get(route.sessionKey) ?? -Infinity)) {
      log.info("inbound recorded; no run (a /stop came after it)");
      return this.finish(rec, entryWritten);
    }
    const verdict = outbox.evaluate(route.sessionKey, target.channel);
    if (verdict.decision === "deny") {
      log.info({ reason: verdict.reason }, "inbound recorded; no run (send policy deny)");
      return this.finish(rec, entryWritten);
    }
    const replyId = `reply:${rec.id}`;
    if (!outbox.has(replyId)) {
      // A run that had finished when the process died answers as it did: asking the model again
      // would record a second answer (and could give a different one).
      const outcome = prior.recorded && prior.reply !== undefined ? ({ status: "ok", reply: prior.reply, usage: { input: 0, output: 0 } } as const) : await this.runWithTyping(route, msg, rec.id, target, sessionId);
      // A run cut short by the shutdown did not fail on its own: rather than tell the chat so
      // and drop the question, the message stays pending and is answered after the restart (as
      // the sub-agent registry leaves such a run to the next process).
      if (outcome.status !== "ok" && !this.deps.runtime.accepting) {
        log.info({ err: outcome.error }, "run cut short by the shutdown; the message stays pending, to be answered after the restart");
        return;
      }
      const text = replyText(outcome);
      if (text) await outbox.enqueue({ id: replyId, sessionKey: route.sessionKey, target, text, kind: "reply", inChat: true });
    }
    return this.finish(rec, entryWritten);
  }

  /**
   * The chat is told, where the message would have been answered at all (not a non-owner's
   * command, not an unmentioned group message; the outbox applies the send policy as ever), and
   * the message is finished with what was said kept in its record.
   */
  private async giveUp(rec: InboundRecord, route: Route, command: ParsedCommand | null, target: OutboundTarget, log: pino.Logger): Promise<void> {
    const { msg } = rec;
    const resumes = rec.resumes ?? 0;
    log.error({ resumes, lastError: rec.lastError ?? "none recorded (the process died during it)" }, "inbound message given up: its processing did not finish in any of its attempts; the chat gets a notice instead of a reply");
    const answered = command ? isOwner(this.deps.config, msg.channel, msg.senderId) : !this.unmentioned(msg);
    const noticeId = `reply:${rec.id}`;
    if (answered && !this.deps.outbox.has(noticeId)) await this.deps.outbox.enqueue({ id: noticeId, sessionKey: route.sessionKey, target, text: GIVEN_UP_NOTICE, kind: "reply", inChat: true });
    await this.finish(rec, undefined, { msg, resumes, ...(rec.lastError ? { lastError: rec.lastError } : {}) });
    this.givenUp++;
  }

  /** `sessionId`: the session whose transcript holds the message (a `/new` may come before its run starts). */
  private async runWithTyping(route: Route, msg: InboundMessage, inboundId: string, target: OutboundTarget, sessionId: string): Promise<RunOutcome> {
    const adapter = this.deps.adapter(msg.channel, msg.accountId);
    // Only a run that takes a noticeable time shows the indicator: a faster reply would just
    // flicker it, and every indicator is one more platform API call competing with replies for
    // the bot's rate limits (an extra HTTP call per message cost ~12% of inbound throughput, bench/).
    // And at most one per chat every few seconds (the platforms show it that long): under load
    // every reply is slow, and an indicator per message added a third more API calls exactly
    // when the daemon could least afford them.
    const chat = `${target.channel}|${target.accountId}|${target.to}|${target.threadId ?? ""}`;
    const typing = () => {
      // The indicator is output the chat sees: once the owner silences the chat mid-run
      // (`/send off`, which does not wait behind the run), it stops with everything else (D2).
      if (this.deps.outbox.evaluate(route.sessionKey, target.channel).decision === "deny") return;
      // A gap is a duration: on the wall clock, one set back by hours hid the indicator for those hours.
      const now = performance.now();
      if (now - (this.lastTyping.get(chat) ?? -Infinity) < TYPING_MIN_GAP_MS) return;
      this.lastTyping.set(chat, now);
      void adapter?.typing?.(target).catch(() => undefined);
    };
    let timer: NodeJS.Timeout | undefined;
    const first = setTimeout(() => {
      typing();
      timer = setInterval(typing, 6000);
    }, TYPING_DELAY_MS);
    try {
      const { done } = this.deps.runtime.start({
        sessionKey: route.sessionKey,
        agentId: route.agentId,
        message: msg.text,
        runId: `in-${inboundId}`,
        userMessageRecorded: true,
        sessionId,
        origin: normalizeDeliveryContext(target),
      });
      return await done;
    } finally {
      clearTimeout(first);
      clearInterval(timer);
    }
  }

  /** A group message that is only recorded: its chat requires a mention and it has none. */
  private unmentioned(msg: InboundMessage): boolean {
    return msg.chatType !== "direct" && this.requiresMention(msg) && !msg.wasMentioned;
  }

  private requiresMention(msg: InboundMessage): boolean {
    if (msg.channel === "webchat") return false;
    const ch = this.deps.config.channels[msg.channel];
    if (!ch) return true;
    if (msg.channel === "telegram") {
      const groups = this.deps.config.channels.telegram?.groups ?? {};
      const perGroup = groups[msg.peerId]?.requireMention ?? groups["*"]?.requireMention;
      if (perGroup !== undefined) return perGroup;
    }
    return ch.requireMention;
  }

  /** Record where the conversation is and who it is (lastChannel, lastTo, deliveryContext…). */
  private async touch(route: Route, msg: InboundMessage) {
    const { entry, written } = this.stageTouch(route, msg);
    await written;
    return entry;
  }

  /**
   * What the transcript's recent messages hold of a resumed inbound message (same sender, time and
   * text): whether it is recorded, and the answer of its run when that run got as far as a final
   * reply (the last message before the next user turn, without tool calls).
   */
  private async priorRun(file: string, said: TranscriptMessage & { role: "user" }): Promise<{ recorded: false } | { recorded: true; reply?: string }> {
    const recent = await this.deps.transcripts.readMessages(file, RESUME_LOOKBACK);
    const at = recent.findLastIndex((m) => m.role === "user" && m.content === said.content && m.timestamp === said.timestamp && m.sender?.id === said.sender?.id);
    if (at < 0) return { recorded: false };
    let last: TranscriptMessage | undefined;
    for (let i = at + 1; i < recent.length && recent[i].role !== "user"; i++) last = recent[i];
    if (last?.role !== "assistant" || last.stopReason !== "stop") return { recorded: true };
    const reply = last.content.flatMap((b) => (b.type === "text" ? [b.text] : [])).join("");
    return { recorded: true, reply: reply.trim() };
  }

  private stageTouch(route: Route, msg: InboundMessage) {
    const deliveryContext = normalizeDeliveryContext({ channel: msg.channel, to: msg.to, accountId: msg.accountId, threadId: msg.threadId });
    const patch: SessionPatch = {
      chatType: msg.chatType,
      lastChannel: msg.channel,
      lastTo: msg.to,
      lastAccountId: msg.accountId,
      ...(msg.threadId ? { lastThreadId: msg.threadId } : {}),
      ...(deliveryContext ? { deliveryContext } : {}),
    };
    if (msg.chatType !== "direct") {
      patch.channel = msg.channel;
      if (msg.groupName) patch.displayName = msg.groupName;
    } else if (msg.senderName) {
      patch.displayName = msg.senderName;
    }
    return this.deps.sessions.stage(route.sessionKey, route.agentId, patch);
  }

  /** `after`: a write of this message's processing that must be stored before it counts as done. */
  private async finish(rec: InboundRecord, after?: Promise<void>, givenUp?: GivenUp): Promise<void> {
    await after;
    rec.state = "done";
    this.resumed.delete(rec.id);
    await this.deps.space.set(rec.id, { id: rec.id, state: "done", receivedAt: rec.receivedAt, ...(givenUp ? { givenUp } : {}) });
    this.records.delete(rec.id);
    this.doneIds.set(rec.id, true);
  }
}

/**
 * The session a message belongs to: the one its chat had when it came. A `/new` (or
 * sessions.reset) while it waited behind the chat's running turn does not move it into the fresh
 * session, which starts empty; a session deleted meanwhile is gone, and its chat starts anew.
 */
function sessionSaidIn(rec: InboundRecord, entry: SessionEntry): string {
  return rec.session?.createdAt === entry.createdAt ? rec.session.sessionId : entry.sessionId;
}

/** An error's message, bounded (it is stored with the record). */
function errorText(err: unknown): string {
  return (err instanceof Error ? err.message : String(err)).slice(0, 1000);
}

/** The reply that stays silent (dressed in punctuation or markup too: see isSkipToken). */
const NO_REPLY = "NO_REPLY";

/** What the chat sees: the reply, or a short notice when the run failed (never silence). */
export const EDITED_COMMAND_REPLY = "⚙️ An edited message does not run commands: send the command again as a new message.";

export function replyText(outcome: RunOutcome): string {
  if (outcome.status === "ok") return isSkipToken(outcome.reply, NO_REPLY) ? "" : outcome.reply;
  // The /stop that ended it was answered ("Stopped 1 run(s)."): a second notice says nothing new.
  if (outcome.status === "timeout" && outcome.stopped) return "";
  return `⚠️ ${outcome.error}`;
}
