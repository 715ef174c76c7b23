/**
 * A node (role "node": a sensor, a phone app) holds no operator scope (interfaces §3): it may post
 * its own events, never read the operators' sessions. Runs have ids a node can guess — an inbound
 * message's run is `in-<channel>:<account>:<platform message id>`, and Telegram's message ids
 * count up per chat — so naming one as `node.event`'s idempotencyKey must not hand the node that
 * run's session and reply as if it were a repeat of its own event.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { inbound, startHarness, type Harness } from "../helpers/harness.js";
import { RecordingAdapter } from "../helpers/recording-adapter.js";

let h: Harness;
const telegram = new RecordingAdapter("telegram");
beforeAll(async () => {
  h = await startHarness({ adapters: [telegram] });
});
afterAll(async () => {
  await h?.stop();
});

describe("node role", () => {
  it("security: a node naming another session's run as its idempotencyKey gets neither that run's reply nor its session", async () => {
    // The owner's private chat with the bot: its run and reply.
    const dm = inbound({ chatType: "direct", peerId: "5550001", senderId: "5550001", to: "5550001", messageId: "5550001:17", text: "my bank PIN is 4321" });
    await h.app.router.accept(dm);
    const dmRunId = `in-telegram:default:${dm.messageId}`;
    expect(await h.app.runtime.wait(dmRunId, 10_000)).toMatchObject({ status: "ok" });
    await h.app.router.idle();
    expect(telegram.textsTo("5550001")).toEqual(["echo: my bank PIN is 4321"]);

    const node = await h.client({ role: "node", nodeId: "sensor-1" });
    const answer = await node.request("node.event", { message: "door opened", idempotencyKey: dmRunId }, { expectFinal: true });
    expect(JSON.stringify(answer)).not.toContain("4321");
    // It is the node's own event, run in its own session like any other.
    expect(answer).toMatchObject({ status: "ok", reply: "echo: door opened" });
    expect(h.app.sessions.get("node-sensor-1")).toBeDefined();
  });
});
