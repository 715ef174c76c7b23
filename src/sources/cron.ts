/**
 * cron.jobs (R3, R25): each enabled job runs its message in the `cron:<job.id>` session on its
 * schedule (croner syntax, seconds optional). The message is system input (provenance
 * internal_system); the reply is recorded in the transcript and delivered only when the session
 * has a chat route — through the outbox, like every other message. A tick that comes while the
 * job's previous run is still going is skipped (logged), so slow jobs never queue up behind themselves.
 * Each tick is recorded in the store as it starts and ends, so a tick missed while the daemon
 * was down or died mid-run is run at start-up while still nearly on time (cron-catch-up.ts).
 */
import { randomUUID } from "node:crypto";
import { Cron } from "croner";
import type pino from "pino";
import type { App } from "../app.js";
import type { RunOutcome } from "../agents/runtime.js";
import type { Config } from "../config/schema.js";
import { replyText } from "../inbound/router.js";
import { cronSessionKey, normalizeAgentId } from "../sessions/keys.js";
import { deliveryContextOf, outboundTargetOf } from "../tools/delivery-route.js";
import type { KvSpace } from "../store/kv.js";
import { catchUp, type TickRecord } from "./cron-catch-up.js";

export type CronJob = Config["cron"]["jobs"][number];

export class CronScheduler {
  private readonly timers: Cron[] = [];
  private readonly ticks: KvSpace<TickRecord>;

  constructor(
    private readonly app: App,
    private readonly log: pino.Logger,
  ) {
    this.ticks = app.kv.space<TickRecord>("cron");
  }

  /**
   * Schedule every enabled job (the config schema has checked each schedule, time zone and
   * agent). Resolves once missed ticks are started again (never rejects: a store failure there is
   * logged).
   */
  async start(): Promise<void> {
    const scheduled: Array<{ job: CronJob; timer: Cron; log: pino.Logger }> = [];
    for (const job of this.app.config.cron.jobs) {
      if (!job.enabled) continue;
      const log = this.log.child({ cronJob: job.id });
      const agentId = this.agentOf(job);
      const sessionAgent = this.app.sessions.get(cronSessionKey(job.id))?.agentId;
      if (sessionAgent && sessionAgent !== agentId) {
        // The session keeps the agent it was created with (its transcript lives under that agent).
        log.warn({ agentId, sessionAgent }, `cron job runs under its session's agent "${sessionAgent}", not "${agentId}": sessions.delete ${cronSessionKey(job.id)} to move it`);
      }
      const skipped = () => log.warn("cron job tick skipped: the previous run is still going");
      /** The latest tick started in this process. */
      let lastTick: string | undefined;
      const timer: Cron = new Cron(job.schedule, { timezone: job.timezone, protect: skipped, unref: true }, async () => {
        // The scheduled time, also when a missed tick is run late by trigger(): the latest not
        // after now (previousRuns excludes its reference, and croner may fire in the tick's own ms).
        const now = new Date();
        const tick = (timer.previousRuns(1, new Date(now.getTime() + 1))[0] ?? now).toISOString();
        // croner schedules from the wall clock: set back (an NTP correction), it comes round to
        // ticks that already ran, and every report due in the hours repeated went out twice.
        if (lastTick !== undefined && tick <= lastTick) {
          log.warn({ tick, lastTick }, "cron job tick skipped: the clock was set back, and this tick already ran");
          return;
        }
        lastTick = tick;
        await this.record(job, { tick, done: false }, log);
        const run = await this.fire(job).catch((err: unknown) => void log.error({ err: (err as Error).message }, "cron job run failed to start"));
        if (!run) return;
        // Awaited to the end of the run: croner's protect skips the ticks that come meanwhile,
        // so a job slower than its schedule does not pile up runs behind itself.
        const ended = await run.done.then(
          () => true,
          (err: unknown) => void log.error({ err: (err as Error).message }, "cron job run failed"),
        );
        // A run cut short by shutdown stays not done: the next start runs the tick again.
        if (ended && this.app.runtime.accepting) await this.record(job, { tick, done: true }, log);
      });
      this.timers.push(timer);
      scheduled.push({ job, timer, log });
      log.info({ schedule: job.schedule, next: timer.nextRun()?.toISOString() }, "cron job scheduled");
    }
    await Promise.all(scheduled.map(({ job, timer, log }) => this.catchUp(job, timer, log)));
  }

  /** Runs the tick the daemon missed, if it is still nearly on time (cron-catch-up.ts). */
  private async catchUp(job: CronJob, timer: Cron, log: pino.Logger): Promise<void> {
    let record: TickRecord | undefined;
    try {
      record = await this.ticks.get(cronSessionKey(job.id));
    } catch (err) {
      log.warn({ err: (err as Error).message }, "cron job's last tick could not be read: a tick missed while the daemon was down is not run");
      return;
    }
    const now = new Date();
    const due = catchUp(record, timer.previousRuns(1, now)[0], timer.nextRun(now) ?? undefined, now.getTime());
    if (!due) return;
    if ("late" in due) {
      log.info({ missed: due.late.toISOString(), lateMinutes: Math.round(due.lateMs / 60_000) }, "cron job tick missed while the daemon was down: too late to run now, waiting for the next");
      return;
    }
    log.info({ missed: due.run.toISOString() }, "cron job tick missed while the daemon was down (or cut short): running it now");
    if (!timer.isStopped()) void timer.trigger();
  }

  private async record(job: CronJob, record: TickRecord, log: pino.Logger): Promise<void> {
    await this.ticks.set(cronSessionKey(job.id), record).catch((err: unknown) => log.warn({ err: (err as Error).message }, "cron job tick not recorded: if the daemon stops now, it may be missed or run twice"));
  }

  /** The agent a job names, or the default one. */
  private agentOf(job: CronJob): string {
    return normalizeAgentId(job.agentId ?? this.app.defaultAgentId);
  }

  stop(): void {
    for (const timer of this.timers.splice(0)) timer.stop();
  }

  /** Run a job now (also what the schedule calls); resolves once the run is queued. */
  async fire(job: CronJob): Promise<{ runId: string; sessionKey: string; done: Promise<RunOutcome> }> {
    const { app } = this;
    const sessionKey = cronSessionKey(job.id);
    // Checked before anything is stored, as hooks do: a tick refused at shutdown leaves no session behind.
    if (!app.runtime.accepting) throw new Error(`cron job "${job.id}" not run: the daemon is shutting down`);
    const entry = app.sessions.get(sessionKey) ?? (await app.sessions.upsert(sessionKey, this.agentOf(job)));
    const route = deliveryContextOf(entry);
    const runId = `cron-${job.id}-${randomUUID()}`;
    const { done } = app.runtime.start({
      sessionKey,
      agentId: entry.agentId,
      message: job.message,
      runId,
      provenance: { kind: "internal_system" },
      ...(route ? { origin: route } : {}),
    });
    const delivered = done.then(async (outcome) => {
      const text = replyText(outcome);
      if (route && text) await app.outbox.enqueue({ id: `cron:${runId}`, sessionKey, target: outboundTargetOf(route), text, kind: "reply" });
      return outcome;
    });
    return { runId, sessionKey, done: delivered };
  }
}
