/**
 * Long-polling loop with a durable offset.
 *
 * Telegram forgets an update once getUpdates is called with a higher offset, so the offset is the
 * acknowledgement: it moves past an update only after `handle(update)` resolved (the core accepted
 * it). A batch is handed to the core at once, in order — the core keeps that order per session and
 * stores the batch in one commit — and the offset moves past the longest accepted prefix and is
 * persisted once per batch. A crash therefore re-delivers at most the batch in flight (the core
 * dedupes it by messageId) and never skips an update. Handing over one update at a time, each
 * waiting for its commit, capped inbound at ~700 updates/s (measured in bench/).
 */
import type { AdapterKv } from "../../src/channels/types.js";
import { RunAbort, type AbortLike } from "../../src/util/run-abort.js";
import { within } from "../../src/util/within.js";
import { type BackoffOptions, backoffDelay, retryDelay, sleep } from "./backoff.js";
import type { TgUpdate } from "./wire.js";

export interface GetUpdatesParams {
  offset?: number;
  timeout: number;
  allowed_updates: readonly string[];
}

export type PollPhase = "prepare" | "poll" | "handle" | "persist";

export interface PollerDeps {
  /** Runs before the first poll and is retried with backoff until it succeeds (getMe etc.). */
  prepare(): Promise<void>;
  getUpdates(params: GetUpdatesParams, signal: AbortLike): Promise<TgUpdate[]>;
  /** Rejecting leaves the update unacknowledged: it is fetched again after a backoff. */
  handle(update: TgUpdate): Promise<void>;
  kv: AdapterKv;
  offsetKey: string;
  timeoutSeconds: number;
  allowedUpdates: readonly string[];
  backoff: BackoffOptions;
  random?: () => number;
  onPollOk(): void;
  onError(err: unknown, phase: PollPhase, retryInMs: number): void;
}

/**
 * Slack on top of the server-side long-poll timeout before a silent connection (NAT drop, proxy
 * black hole) is declared dead; telegraf's own fetch timeout is 500 s.
 */
const WATCHDOG_SLACK_MS = 15_000;
/** With timeout 0 (short polling) an empty answer comes back at once; don't spin on it. */
const SHORT_POLL_IDLE_MS = 1000;

export class Poller {
  private readonly stopper = new RunAbort();
  private loop: Promise<void> | undefined;
  private offset: number | undefined;

  constructor(private readonly deps: PollerDeps) {}

  start(): void {
    this.loop ??= this.run().catch((err: unknown) => this.deps.onError(err, "poll", 0));
  }

  /**
   * Aborts the in-flight long poll and waits for the loop to wind down, but at most `graceMs`:
   * a slow onInbound must not hold up shutdown (its update is simply re-delivered next time).
   */
  async stop(graceMs: number): Promise<void> {
    this.stopper.abort();
    if (this.loop) await within(this.loop, graceMs);
  }

  private get stopped(): boolean {
    return this.stopper.aborted;
  }

  private async run(): Promise<void> {
    await this.retrying("prepare", async () => {
      await this.deps.prepare();
      const saved = await this.deps.kv.get<number>(this.deps.offsetKey);
      this.offset = typeof saved === "number" && Number.isFinite(saved) ? saved : undefined;
    });
    let pollFailures = 0;
    let handleFailures = 0;
    while (!this.stopped) {
      let updates: TgUpdate[];
      try {
        // After a failure the first poll is a short one: it answers at once, so a restored
        // connection shows as connected now rather than when a quiet long poll ends (30 s).
        updates = await this.fetch(pollFailures > 0 ? 0 : this.deps.timeoutSeconds);
        this.deps.onPollOk();
        pollFailures = 0;
      } catch (err) {
        if (this.stopped) return;
        await this.pause(err, "poll", pollFailures++);
        continue;
      }
      if (updates.length === 0 && this.deps.timeoutSeconds === 0) await sleep(SHORT_POLL_IDLE_MS, this.stopper);
      if (this.stopped) return;
      if (updates.length === 0) continue;
      // Every update in an answer is one Telegram still holds unconfirmed, even below our offset:
      // after a week without updates it numbers new ones from a random start, and it answers an
      // offset beyond its numbering from the head of its queue (telegram-bot-api do_get_updates).
      // Skipping those would never confirm them — each poll would return them at once, a busy
      // loop in which no message reaches the core. So the offset follows Telegram's ids, even
      // back; an update handed over twice (a replaying proxy) is deduped by the core.
      const outcomes = await Promise.allSettled(updates.map((update) => this.deps.handle(update)));
      const failed = outcomes.findIndex((o) => o.status === "rejected");
      const accepted = failed < 0 ? updates.length : failed;
      if (accepted > 0) {
        this.offset = updates[accepted - 1].update_id + 1;
        // Not awaited: the next poll need not wait for it (writes land in order).
        void this.persist(this.offset);
      }
      if (failed >= 0) {
        if (this.stopped) return;
        // The next poll starts again from the first update not accepted; later ones of the batch
        // come again too, in order (the core dedupes those it already holds).
        await this.pause((outcomes[failed] as PromiseRejectedResult).reason, "handle", handleFailures++);
      } else handleFailures = 0;
    }
  }

  private async fetch(timeoutSeconds: number): Promise<TgUpdate[]> {
    // Not an AbortController: on Node 20 an AbortSignal per poll is one more object promoted to
    // the old generation each time (src/util/run-abort.ts); the stopper is no AbortSignal either,
    // so adding and removing this poll's listener on it leaves nothing behind.
    const request = new RunAbort();
    const onStop = (): void => request.abort();
    this.stopper.addEventListener("abort", onStop, { once: true });
    const watchdog = setTimeout(() => request.abort(), timeoutSeconds * 1000 + WATCHDOG_SLACK_MS);
    try {
      const params: GetUpdatesParams = { timeout: timeoutSeconds, allowed_updates: this.deps.allowedUpdates };
      if (this.offset !== undefined) params.offset = this.offset;
      const result = await this.deps.getUpdates(params, request);
      return Array.isArray(result) ? result : [];
    } catch (err) {
      if (request.aborted && !this.stopped) {
        throw new Error(`getUpdates: no answer within ${timeoutSeconds}s + ${WATCHDOG_SLACK_MS / 1000}s, connection presumed dead`, { cause: err });
      }
      throw err;
    } finally {
      clearTimeout(watchdog);
      this.stopper.removeEventListener("abort", onStop);
    }
  }

  /**
   * The in-memory offset has already moved (the core holds the update), so a failed write only
   * means a crash before the next successful write re-delivers a few updates, which the core's
   * dedupe absorbs. Not worth stalling the loop over.
   */
  private async persist(offset: number): Promise<void> {
    try {
      await this.deps.kv.set(this.deps.offsetKey, offset);
    } catch (err) {
      this.deps.onError(err, "persist", 0);
    }
  }

  private async retrying(phase: PollPhase, step: () => Promise<void>): Promise<void> {
    for (let attempt = 0; !this.stopped; attempt++) {
      try {
        return await step();
      } catch (err) {
        if (this.stopped) return;
        await this.pause(err, phase, attempt);
      }
    }
  }

  private async pause(err: unknown, phase: PollPhase, attempt: number): Promise<void> {
    const delay =
      phase === "poll" || phase === "prepare"
        ? retryDelay(err, attempt, this.deps.backoff, this.deps.random)
        : backoffDelay(attempt, this.deps.backoff, this.deps.random);
    this.deps.onError(err, phase, delay);
    await sleep(delay, this.stopper);
  }
}
