/**
 * Work that outlives the tool call that started it (the agent-to-agent loop, sub-agent
 * announces): failures are logged, never thrown into a run, and shutdown can wait for it.
 */
import type pino from "pino";

export class BackgroundTasks {
  private readonly tasks = new Set<Promise<void>>();

  constructor(private readonly log: pino.Logger) {}

  /** Start `work` now; an error is logged with `context`. */
  run(what: string, context: Record<string, unknown>, work: () => Promise<void>): void {
    const task = Promise.resolve()
      .then(work)
      .catch((err: unknown) => this.log.warn({ ...context, err: err instanceof Error ? err.message : String(err) }, `${what} failed`));
    this.tasks.add(task);
    void task.finally(() => this.tasks.delete(task));
  }

  /** Resolves when nothing is running (work started meanwhile is awaited too), or at the deadline. */
  async idle(timeoutMs = Number.POSITIVE_INFINITY): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (this.tasks.size && Date.now() < deadline) {
      let timer: NodeJS.Timeout | undefined;
      const left = deadline - Date.now();
      await Promise.race([Promise.all(this.tasks), ...(Number.isFinite(left) ? [new Promise((r) => (timer = setTimeout(r, left)))] : [])]);
      clearTimeout(timer);
    }
  }
}
