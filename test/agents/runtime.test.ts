import { afterEach, describe, expect, it } from "vitest";
import { echoLastUser, type ModelRequest } from "../fakes/model-server.js";
import { startHarness, type Harness } from "../helpers/harness.js";

let h: Harness | undefined;
afterEach(async () => {
  await h?.stop();
  h = undefined;
});

const lastUserText = (req: ModelRequest): string => {
  const m = [...req.messages].reverse().find((x) => x?.role === "user");
  return typeof m?.content === "string" ? m.content : JSON.stringify(m?.content);
};

describe("agent runtime lanes", () => {
  it("DESIGN one lane per session: a second run of the same key starts only after the first ended; another key runs meanwhile", async () => {
    // The first run's model call is held open until the test releases it, so "meanwhile" is an
    // observable state rather than a race: whatever else ran while it was held ran concurrently with it.
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    h = await startHarness({
      responder: async (req, i) => {
        if (lastUserText(req) === "first") await gate;
        return echoLastUser(req, i);
      },
    });
    const rt = h.app.runtime;
    const first = rt.start({ sessionKey: "agent:main:main", agentId: "main", message: "first" });
    const second = rt.start({ sessionKey: "agent:main:main", agentId: "main", message: "second" });
    const other = rt.start({ sessionKey: "agent:main:telegram:group:-7", agentId: "main", message: "other" });
    try {
      // Two model calls in flight at once (first's is parked): a lane shared across keys would stall here, and waitForRequests says so.
      await h.model.waitForRequests(2);
      // The other key's run completes while the first run is still parked in its model call: lanes are per key, not global.
      expect(await other.done).toMatchObject({ status: "ok", reply: "echo: other" });
      expect(first.info.status).toBe("running");
      // …but the same key's second run has not even started: it waits in the lane behind the first.
      expect(second.info.status).toBe("queued");
      expect(second.info.startedAt).toBeUndefined();
      expect(h.model.requests.map(lastUserText)).not.toContain("second");
    } finally {
      release();
    }
    expect(await first.done).toMatchObject({ status: "ok", reply: "echo: first" });
    expect(await second.done).toMatchObject({ status: "ok", reply: "echo: second" });
    expect(second.info.startedAt).toBeGreaterThanOrEqual(first.info.endedAt!);
    // Run in order, the second run's model call sees the first exchange in its history.
    const secondReq = h.model.requests.find((r) => lastUserText(r) === "second")!;
    expect(secondReq.messages.some((m) => m.role === "assistant" && JSON.stringify(m.content).includes("echo: first"))).toBe(true);
  });
});
