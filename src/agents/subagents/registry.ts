/**
 * The sub-agent registry (R37–R41): every sessions_spawn run is recorded durably (keyv space
 * "subagents") until it has ended, been announced to the requester's chat, and been cleaned up.
 *
 * Life of a record: registered → the run ends (outcome recorded, archive clock started) →
 * announce step on the child session → announce enqueued in the outbox → marked announced →
 * cleanup: "delete" removes the child session now; "keep" archives it archiveAfterMinutes after
 * the run ended. Then the record is dropped.
 *
 * Restarts: a run that was in flight when the process went down cannot be resumed — it is
 * finished as an error ("interrupted by restart") and still announced. A record enqueued but
 * not yet marked announced announces again, and the outbox's deterministic id
 * (`subagent-announce:<runId>`) keeps that to one delivery, so each run is announced exactly once.
 */
import { promises as fs } from "node:fs";
import type pino from "pino";
import type { App } from "../../app.js";
import type { RunEvent, RunOutcome } from "../runtime.js";
import type { DeliveryContext } from "../../sessions/entry.js";
import type { KvSpace } from "../../store/kv.js";
import type { BackgroundTasks } from "../../tools/background.js";
import { retryIo } from "../../util/io-retry.js";
import { isSkipToken } from "../../util/skip-token.js";
import { outboundTargetOf } from "../../tools/delivery-route.js";
import { formatStatsLine, normalizeAnnounce, type SubagentStatus } from "./announce.js";
import { SUBAGENT_ANNOUNCE_MESSAGE, SUBAGENT_ANNOUNCE_SKIP, subagentAnnouncePrompt } from "./prompts.js";

/** An announce step may take this long; then the announce goes out with what is known. */
export const ANNOUNCE_STEP_TIMEOUT_MS = 120_000;
/** The archive sweeper never sleeps longer than this (setTimeout's range is ~24 days). */
const MAX_SWEEP_DELAY_MS = 3600_000;
/** Writes tried again while the store cannot write wait 1 s, doubling up to this. */

export interface SubagentRun {
  runId: string;
  childSessionKey: string;
  childAgentId: string;
  requesterSessionKey: string;
  requesterChannel: string;
  /** The requester's chat at spawn time: where the announce goes. */
  requesterOrigin?: DeliveryContext;
  task: string;
  label?: string;
  /** Model reference of the child's runs, when overridden. */
  model?: string;
  cleanup: "keep" | "delete";
  createdAt: number;
  startedAt?: number;
  endedAt?: number;
  outcome?: { status: SubagentStatus; error?: string; reply?: string; model?: string; usage?: { input: number; output: number } };
  /**
   * When the child session is to be archived (keep mode): counted from when the outcome was
   * recorded — the run's end, or for a run cut off by a restart, the restart, so that the
   * requester gets the whole window after the announce.
   */
  archiveAt?: number;
  announcedAt?: number;
}

export interface SubagentRegistryDeps {
  app: App;
  space: KvSpace<SubagentRun>;
  background: BackgroundTasks;
  log: pino.Logger;
}

export class SubagentRegistry {
  private readonly runs = new Map<string, SubagentRun>();
  private readonly announcing = new Set<string>();
  private readonly onRun = (ev: RunEvent) => this.onRunEvent(ev);
  private sweepTimer?: NodeJS.Timeout;
  /** Aborted by stop(): a write waiting for the store is left to the next process. */
  private readonly stopping = new AbortController();

  constructor(private readonly deps: SubagentRegistryDeps) {}

  /** Load persisted records and start listening for run ends (before any run can start). */
  async load(): Promise<void> {
    for (const [, run] of await this.deps.space.entries()) this.runs.set(run.runId, run);
    this.deps.app.runtime.events.on("run", this.onRun);
  }

  /** Pick up work left by the previous process; call once the outbox and channels are up. */
  async resume(): Promise<void> {
    const { runtime } = this.deps.app;
    for (const run of [...this.runs.values()]) {
      if (!run.outcome) {
        const info = runtime.get(run.runId);
        if (!info) await this.finish(run, { status: "error", error: "interrupted by restart" }, this.lastSignOfLife(run));
        else if (info.status === "ok" || info.status === "error" || info.status === "timeout") await this.finish(run, { status: info.status, error: info.error, reply: info.reply, model: info.model, usage: info.usage });
      } else if (!run.announcedAt) this.announceInBackground(run);
      else await this.cleanup(run);
    }
    this.scheduleSweep();
  }

  stop(): void {
    this.deps.app.runtime.events.off("run", this.onRun);
    clearTimeout(this.sweepTimer);
    this.stopping.abort();
  }

  async register(run: SubagentRun): Promise<void> {
    this.runs.set(run.runId, run);
    await this.persist(run);
  }

  /** Forget a run: one that never started, or one with nothing left to do. */
  async discard(runId: string): Promise<void> {
    this.runs.delete(runId);
    await this.deps.space.delete(runId);
  }

  get(runId: string): SubagentRun | undefined {
    return this.runs.get(runId);
  }

  /** Runs spawned by a session (newest last). */
  spawnedBy(requesterSessionKey: string): SubagentRun[] {
    return [...this.runs.values()].filter((r) => r.requesterSessionKey === requesterSessionKey);
  }

  /** `/stop` in the requester session: abort its sub-agents still running; their runIds. */
  stopFor(requesterSessionKey: string): string[] {
    const aborted: string[] = [];
    for (const run of this.spawnedBy(requesterSessionKey)) {
      if (!run.outcome && this.deps.app.runtime.abort(run.runId, "stopped by /stop in the requester session")) aborted.push(run.runId);
    }
    return aborted;
  }

  private onRunEvent(ev: RunEvent): void {
    if (ev.phase !== "end") return;
    const run = this.runs.get(ev.runId);
    if (!run || run.outcome) return;
    // A run cut short by the shutdown did not fail on its own: the next process reports it
    // as interrupted (and announces it) instead.
    if (!this.deps.app.runtime.accepting && ev.outcome.status !== "ok") return;
    const info = this.deps.app.runtime.get(ev.runId);
    if (info?.startedAt) run.startedAt = info.startedAt;
    if (info?.endedAt) run.endedAt = info.endedAt;
    this.deps.background.run("sub-agent completion", { runId: run.runId, sessionKey: run.childSessionKey }, () => this.finish(run, toOutcome(ev.outcome)));
  }

  /**
   * When a run cut off by a restart was last seen working: its child session's last update (each
   * model call's usage, the abort mark of a clean stop). The downtime is not the run's runtime.
   */
  private lastSignOfLife(run: SubagentRun): number | undefined {
    const updatedAt = this.deps.app.sessions.get(run.childSessionKey)?.updatedAt;
    return updatedAt !== undefined && updatedAt >= run.createdAt ? updatedAt : undefined;
  }

  private async finish(run: SubagentRun, outcome: NonNullable<SubagentRun["outcome"]>, endedAt?: number): Promise<void> {
    const child = this.deps.app.sessions.get(run.childSessionKey);
    const now = Date.now();
    run.endedAt ??= endedAt ?? now;
    // Without a run result (restart), the child's counters are its tokens so far.
    run.outcome = { ...outcome, usage: outcome.usage ?? (child ? { input: child.inputTokens ?? 0, output: child.outputTokens ?? 0 } : undefined) };
    const archiveAfterMinutes = this.deps.app.config.agents.defaults.subagents.archiveAfterMinutes;
    if (run.cleanup === "keep" && archiveAfterMinutes > 0) run.archiveAt = now + archiveAfterMinutes * 60_000;
    await this.untilStored(run, "outcome", () => this.persist(run));
    this.deps.log.info({ runId: run.runId, sessionKey: run.childSessionKey, status: outcome.status }, "sub-agent run ended");
    this.announceInBackground(run);
    this.scheduleSweep();
  }

  private announceInBackground(run: SubagentRun): void {
    if (this.announcing.has(run.runId)) return;
    this.announcing.add(run.runId);
    this.deps.background.run("sub-agent announce", { runId: run.runId, sessionKey: run.childSessionKey }, async () => {
      try {
        await this.announce(run);
      } finally {
        this.announcing.delete(run.runId);
      }
    });
  }

  private async announce(run: SubagentRun): Promise<void> {
    const { app, log } = this.deps;
    const outcome = run.outcome;
    if (!outcome || run.announcedAt) return;
    // A child deleted meanwhile (sessions.delete) is not recreated by its announce step: the
    // announce then says what the outcome says.
    const step: RunOutcome = app.sessions.get(run.childSessionKey)
      ? await app.runtime.start({
          sessionKey: run.childSessionKey,
          agentId: run.childAgentId,
          message: SUBAGENT_ANNOUNCE_MESSAGE,
          runId: `${run.runId}:announce`,
          // Not the sub-agent lane: there a finished child's announce would wait for a slot behind
          // the children still working, and its result would reach the chat only once they end.
          lane: "nested",
          extraSystemPrompt: subagentAnnouncePrompt({ task: run.task, label: run.label, requesterKey: run.requesterSessionKey, requesterChannel: run.requesterChannel, childKey: run.childSessionKey, status: outcome.status, error: outcome.error, finalReply: outcome.reply }),
          provenance: { kind: "internal_system" },
          timeoutMs: ANNOUNCE_STEP_TIMEOUT_MS,
          ...(run.model ? { model: run.model } : {}),
        }).done
      : { status: "error", error: "child session deleted", usage: { input: 0, output: 0 } };
    // Shutting down: leave the announce to the next process rather than post a degraded one.
    if (!app.runtime.accepting) return;
    const reply = step.status === "ok" ? step.reply : "";
    if (step.status === "ok" && isSkipToken(reply, SUBAGENT_ANNOUNCE_SKIP)) {
      log.info({ runId: run.runId }, "sub-agent announce skipped (ANNOUNCE_SKIP)");
    } else if (!run.requesterOrigin) {
      log.info({ runId: run.runId, requester: run.requesterSessionKey }, "sub-agent announce not posted: the requester had no chat route at spawn time");
    } else {
      const text = `${normalizeAnnounce({ reply, status: outcome.status, error: outcome.error, fallbackResult: outcome.reply })}\n${this.statsLine(run)}`;
      const announce = { id: `subagent-announce:${run.runId}`, sessionKey: run.requesterSessionKey, target: outboundTargetOf(run.requesterOrigin), text, kind: "announce" as const };
      await this.untilStored(run, "announce", () => app.outbox.enqueue(announce).then(() => undefined));
    }
    run.announcedAt = Date.now();
    await this.untilStored(run, "announce mark", () => this.persist(run));
    await this.cleanup(run);
  }

  private statsLine(run: SubagentRun): string {
    const { app } = this.deps;
    const child = app.sessions.get(run.childSessionKey);
    const usage = run.outcome?.usage;
    const modelRef = run.outcome?.model ?? run.model ?? app.models.defaultRef(run.childAgentId);
    let cost: { input: number; output: number } | undefined;
    try {
      cost = modelRef ? app.models.resolve(modelRef).cost : undefined;
    } catch {
      cost = undefined;
    }
    return formatStatsLine({
      runtimeMs: run.endedAt !== undefined ? run.endedAt - (run.startedAt ?? run.createdAt) : undefined,
      inputTokens: usage?.input,
      outputTokens: usage?.output,
      cost,
      sessionKey: run.childSessionKey,
      sessionId: child?.sessionId ?? "n/a",
      transcriptPath: child ? app.sessions.transcriptPath(child) : "n/a",
    });
  }

  /** After the announce: delete mode removes the child now; keep mode waits for the archive time. */
  private async cleanup(run: SubagentRun): Promise<void> {
    if (run.cleanup === "delete") {
      await this.deleteChild(run);
      await this.discard(run.runId);
    } else if (run.archiveAt === undefined) {
      await this.discard(run.runId);
    }
    this.scheduleSweep();
  }

  private async deleteChild(run: SubagentRun): Promise<void> {
    const { app } = this.deps;
    const entry = app.sessions.get(run.childSessionKey);
    if (!entry) return;
    await app.sessions.delete(entry.key);
    await app.transcripts.flush();
    const file = app.sessions.transcriptPath(entry);
    // Renamed, not removed: the transcript stays inspectable (reference §3.6).
    await fs.rename(file, `${file}.deleted.${new Date().toISOString().replace(/[:.]/g, "-")}`).catch((err: NodeJS.ErrnoException) => {
      if (err.code !== "ENOENT") throw err;
    });
    this.deps.log.info({ runId: run.runId, sessionKey: entry.key }, "sub-agent session deleted (cleanup: delete)");
  }

  /** Archive every announced keep-mode child whose time has come; re-arm for the next one. */
  private async sweep(): Promise<void> {
    const { app } = this.deps;
    const now = Date.now();
    for (const run of [...this.runs.values()]) {
      if (run.archiveAt === undefined || run.archiveAt > now || !run.announcedAt) continue;
      const entry = app.sessions.get(run.childSessionKey);
      if (entry && entry.archivedAt === undefined) await app.sessions.upsert(entry.key, entry.agentId, { archivedAt: now });
      this.deps.log.info({ runId: run.runId, sessionKey: run.childSessionKey }, "sub-agent session archived");
      await this.discard(run.runId);
    }
    this.scheduleSweep();
  }

  private scheduleSweep(): void {
    clearTimeout(this.sweepTimer);
    const due = [...this.runs.values()].filter((r) => r.archiveAt !== undefined && r.announcedAt).map((r) => r.archiveAt as number);
    if (!due.length) return;
    const delay = Math.min(Math.max(Math.min(...due) - Date.now(), 0), MAX_SWEEP_DELAY_MS);
    this.sweepTimer = setTimeout(() => this.deps.background.run("sub-agent archive sweep", {}, () => this.sweep()), delay);
    this.sweepTimer.unref();
  }

  /**
   * A write that records a run's end or its announce, tried again while the store cannot write (a
   * full disk, a read-only state directory). Given up at once, the requester heard nothing until
   * a restart, which then reported a run that had finished as "interrupted by restart". Rejects
   * once the registry stops: the next process resumes from what the store holds.
   */
  private async untilStored(run: SubagentRun, what: string, write: () => Promise<void>): Promise<void> {
    await retryIo(write, {
      signal: this.stopping.signal,
      // One line per outage of the store, not one per try.
      onRetry: (err, failures, retryInMs) => failures === 1 && this.deps.log.warn({ runId: run.runId, err: (err as Error).message, retryInMs }, `sub-agent ${what} could not be stored; retrying until the store writes again`),
      onRecovered: (failures) => this.deps.log.info({ runId: run.runId, failures }, `sub-agent ${what} stored: the store writes again`),
    });
  }

  private async persist(run: SubagentRun): Promise<void> {
    if (this.runs.has(run.runId)) await this.deps.space.set(run.runId, run);
  }
}

function toOutcome(outcome: RunOutcome): NonNullable<SubagentRun["outcome"]> {
  return outcome.status === "ok"
    ? { status: "ok", reply: outcome.reply, model: outcome.model, usage: outcome.usage }
    : { status: outcome.status, error: outcome.error, usage: outcome.usage };
}
