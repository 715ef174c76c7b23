/**
 * BackgroundTasks: work that outlives the tool call that started it. Shutdown relies on idle()
 * to wait for all of it — including work that running work starts (an announce after a run end).
 */
import pino from "pino";
import { describe, expect, it } from "vitest";
import { BackgroundTasks } from "../../src/tools/background.js";

describe("BackgroundTasks", () => {
  it("idle() also waits for work started by work it was already waiting for", async () => {
    const background = new BackgroundTasks(pino({ level: "silent" }));
    const done: string[] = [];
    background.run("first", {}, async () => {
      await new Promise((resolve) => setTimeout(resolve, 20));
      background.run("second", {}, async () => {
        await new Promise((resolve) => setTimeout(resolve, 20));
        done.push("second");
      });
      done.push("first");
    });
    await background.idle();
    expect(done).toEqual(["first", "second"]);
  });

  it("idle(timeoutMs) gives up at its deadline: work that never ends cannot hold a shutdown forever", async () => {
    const background = new BackgroundTasks(pino({ level: "silent" }));
    let ended = false;
    background.run("stuck announce", {}, () => new Promise<void>(() => undefined).finally(() => (ended = true)));
    // A deadline-blind idle() never returns here, and the test times out.
    await background.idle(50);
    expect(ended).toBe(false);
  });

  it("a failure is logged with its context, not thrown; idle() still resolves", async () => {
    const lines: Array<Record<string, unknown>> = [];
    const log = pino({ level: "warn" }, { write: (line: string) => void lines.push(JSON.parse(line)) });
    const background = new BackgroundTasks(log);
    background.run("sub-agent announce", { runId: "r-1" }, async () => {
      throw new Error("outbox closed");
    });
    await background.idle();
    expect(lines).toEqual([expect.objectContaining({ runId: "r-1", err: "outbox closed", msg: "sub-agent announce failed" })]);
  });
});
