/**
 * A run's hold on a slot of its lane kind's pool (agents.defaults.maxConcurrent and its sub-agent
 * twin). The pool is a p-queue; a slot is a queue task that lasts until the lease gives it back,
 * so a run can give its slot back halfway and take one again. A run parked on another run's
 * answer (sessions_send waiting for the reply) does so for the wait: holding it, a chain of waits
 * one longer than the pool (A waits on B, B on C at maxConcurrent 1) could never start its last
 * run, and every wait in it would sit out its whole timeout.
 */
import type PQueue from "p-queue";
import type { RunAbort } from "../util/run-abort.js";

/** Queue priority of a run taking its slot again after a wait: ahead of runs not yet started. */
const RESUMING = 1;

export class SlotLease {
  private release: (() => void) | undefined;
  private readonly onAbort = () => this.give();

  constructor(
    private readonly pool: PQueue,
    private readonly abort: RunAbort,
  ) {}

  /**
   * Waits for a slot. Aborted before one is free (/stop, the run's time limit, shutdown), it
   * returns without one — p-queue drops the waiting task — and the run, under the aborted signal,
   * must not go on working. Aborted while held, the slot is freed at once.
   */
  async take(priority = 0): Promise<void> {
    if (this.abort.aborted) return;
    // A task that will wait in the queue must leave it when the run is aborted, which p-queue does
    // for an AbortSignal only: one is made for it then. A free slot is taken synchronously.
    const waits = this.pool.isPaused || this.pool.size > 0 || this.pool.pending >= this.pool.concurrency;
    await new Promise<void>((settled) => {
      this.pool
        .add(
          () =>
            new Promise<void>((release) => {
              this.release = release;
              settled();
            }),
          waits ? { priority, signal: this.abort.toSignal() } : { priority },
        )
        .catch(() => settled());
    });
    if (this.release) this.abort.addEventListener("abort", this.onAbort);
  }

  give(): void {
    const release = this.release;
    this.release = undefined;
    this.abort.removeEventListener("abort", this.onAbort);
    release?.();
  }

  /**
   * Awaits `wait` without the slot, then takes one again ahead of runs not yet started: a run
   * already half done finishes before new work begins. Aborted meanwhile, it returns at once
   * without a slot: the run's next step, under the aborted signal, ends it instead of calling
   * the model.
   */
  async park<T>(wait: Promise<T>): Promise<T> {
    this.give();
    try {
      return await wait;
    } finally {
      await this.take(RESUMING);
    }
  }
}
