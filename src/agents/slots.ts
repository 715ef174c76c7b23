/**
 * A run's hold on a slot of its lane kind's pool (agents.defaults.maxConcurrent and its sub-agent
 * twin). The pool is a p-queue; a slot is a queue task that lasts until the lease gives it back,
 * so a run can give its slot back halfway and take one again. A run parked on another run's
 * answer (sessions_send waiting for the reply) does so for the wait: holding it, a chain of waits
 * one longer than the pool (A waits on B, B on C at maxConcurrent 1) could never start its last
 * run, and every wait in it would sit out its whole timeout.
 */
import type PQueue from "p-queue";

/** Queue priority of a run taking its slot again after a wait: ahead of runs not yet started. */
const RESUMING = 1;

export class SlotLease {
  private release: (() => void) | undefined;

  constructor(
    private readonly pool: PQueue,
    private readonly signal: AbortSignal,
  ) {}

  /**
   * Waits for a slot. Aborted before one is free (/stop, the run's time limit, shutdown), it
   * returns without one — p-queue drops the waiting task — and the run, under the aborted signal,
   * must not go on working. Aborted while held, p-queue frees the slot at once.
   */
  async take(priority = 0): Promise<void> {
    if (this.signal.aborted) return;
    await new Promise<void>((settled) => {
      this.pool
        .add(
          () =>
            new Promise<void>((release) => {
              this.release = release;
              settled();
            }),
          { priority, signal: this.signal },
        )
        .catch(() => settled());
    });
  }

  give(): void {
    const release = this.release;
    this.release = undefined;
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
