import { describe, expect, it } from "vitest";
import { createLogger, lazyChild } from "../src/log.js";

/** A logger at `level` writing its JSON lines into an array. */
function capturing(level: string) {
  const lines: string[] = [];
  const log = createLogger({ level, destination: { write: (line: string) => void lines.push(line) } });
  return { log, records: () => lines.map((l) => JSON.parse(l) as Record<string, unknown>) };
}

describe("lazyChild", () => {
  it("a lazy child's lines carry its bindings (runId, sessionKey), as a child logger's would", () => {
    const { log, records } = capturing("info");
    lazyChild(log, { runId: "run-1", sessionKey: "agent:main:main" }).warn({ err: "boom" }, "run failed");
    expect(records()).toMatchObject([{ msg: "run failed", err: "boom", runId: "run-1", sessionKey: "agent:main:main" }]);
  });

  it("a lazy child writes nothing at a level its parent leaves out", () => {
    const { log, records } = capturing("warn");
    const child = lazyChild(log, { runId: "run-2" });
    child.debug("not shown");
    child.info("not shown either");
    child.error("shown");
    expect(records().map((r) => r.msg)).toEqual(["shown"]);
  });
});
