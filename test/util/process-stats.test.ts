import v8 from "node:v8";
import vm from "node:vm";
import { describe, expect, it, vi } from "vitest";
import { observeGc, processStats } from "../../src/util/process-stats.js";

/** A full collection on demand, without starting the test process with --expose-gc. */
function fullGc(): void {
  v8.setFlagsFromString("--expose-gc");
  (vm.runInNewContext("gc") as () => void)();
}

describe("process stats (health.process)", () => {
  it("counts full collections and their pauses, young ones apart, and reports the process's memory", async () => {
    observeGc();
    const before = processStats();
    fullGc();
    await vi.waitFor(() => expect(processStats().gc.full).toBeGreaterThan(before.gc.full), { timeout: 2000, interval: 5 });
    let sink: unknown[] = [];
    for (let i = 0; i < 200_000; i++) sink = [{ i }, ...sink.slice(0, 10)];
    await vi.waitFor(() => expect(processStats().gc.young).toBeGreaterThan(before.gc.young), { timeout: 2000, interval: 5 });
    const after = processStats();
    expect(after.gc.fullPauseMs).toBeGreaterThan(before.gc.fullPauseMs);
    expect(after.gc.youngPauseMs).toBeGreaterThan(before.gc.youngPauseMs);
    expect(after.rssMb).toBeGreaterThan(after.heapUsedMb);
    expect(after.heapUsedMb).toBeGreaterThan(0);
    expect(sink.length).toBe(11);
  });
});
