/**
 * Order across a restart: messages (and their replies) that were accepted but not finished when
 * the daemon went down are resumed in arrival order — also when a whole batch was accepted
 * within one millisecond (a Telegram getUpdates batch), where ids like "…:10" sort before "…:9".
 * And what is forgotten after a day — inbound ids done and replies delivered (kept that long for
 * dedupe) — at start-up and, while the daemon runs, on its pruning interval.
 */
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterEach, describe, expect, it, vi } from "vitest";
import { inbound, startHarness, type Harness } from "../helpers/harness.js";
import { RecordingAdapter } from "../helpers/recording-adapter.js";

const harnesses: Harness[] = [];
const dirs: string[] = [];
afterEach(async () => {
  for (const h of harnesses.splice(0).reverse()) await h.stop({ keepState: true }).catch(() => undefined);
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

describe("restart keeps arrival order", () => {
  it("restart-order: a batch accepted within one millisecond resumes after a restart in arrival order, each message recorded once", async () => {
    const stateDir = mkdtempSync(path.join(os.tmpdir(), "sb-order-"));
    dirs.push(stateDir);
    // Daemon A accepts twelve messages of one chat at once, then hangs in its first model call:
    // all twelve are durably accepted and none is finished (as if it had been killed now).
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const a = await startHarness({ stateDir, killedLater: true, adapters: [new RecordingAdapter("telegram")], responder: async () => (await gate, { content: "late" }) });
    harnesses.push(a);
    const batch = Array.from({ length: 12 }, (_, i) => inbound({ peerId: "4242", to: "4242", senderId: "4242", text: `n${i + 1}`, messageId: `4242:${i + 1}` }));
    await Promise.all(batch.map((m) => a.app.router.accept(m)));
    const stored = (await a.app.kv.space<{ id: string; receivedAt: number }>("inbound").entries()).map(([, r]) => r);
    const byArrival = batch.map((m) => stored.find((r) => r.id === `telegram:default:${m.messageId}`)?.receivedAt ?? Number.NaN);
    expect(byArrival.every((t, i) => i === 0 || t > byArrival[i - 1])).toBe(true);

    // Daemon B starts on the same state directory and resumes them: replies in arrival order.
    const adapter = new RecordingAdapter("telegram");
    const b = await startHarness({ stateDir, adapters: [adapter] });
    harnesses.push(b);
    await vi.waitFor(() => expect(adapter.textsTo("4242")).toHaveLength(12), { timeout: 10_000 });
    expect(adapter.textsTo("4242")).toEqual(batch.map((m) => `echo: ${m.text}`));
    // Daemon A had already written the first message into the transcript before it "died": the
    // resumed message is not recorded a second time (each message once, in order).
    await b.app.transcripts.flush();
    const entry = b.app.sessions.require("agent:main:main");
    const said = (await b.app.transcripts.readMessages(b.app.sessions.transcriptPath(entry))).filter((m) => m.role === "user").map((m) => m.content);
    expect(said).toEqual(batch.map((m) => m.text));
    release();
  });

  it("restart: a message whose run had answered before the process died is answered with that answer, without a second model call or a second answer in its transcript", async () => {
    const stateDir = mkdtempSync(path.join(os.tmpdir(), "sb-answered-"));
    dirs.push(stateDir);
    // Daemon A accepts two messages and hangs in its model calls. Before it "dies", the first
    // run's final answer reaches the transcript (as when a kill lands between the run's last
    // append and the reply's outbox record); the second run only got as far as a tool call.
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    // One session per chat, so that the two runs are under way at once.
    const config = { session: { dmScope: "per-channel-peer" as const } };
    const a = await startHarness({ stateDir, config, killedLater: true, adapters: [new RecordingAdapter("telegram")], responder: async () => (await gate, { content: "late" }) });
    harnesses.push(a);
    const answered = inbound({ peerId: "51", to: "51", senderId: "51", text: "what is 6×7?", messageId: "51:1" });
    const midTools = inbound({ peerId: "52", to: "52", senderId: "52", text: "look it up", messageId: "52:1" });
    await Promise.all([a.app.router.accept(answered), a.app.router.accept(midTools)]);
    await vi.waitFor(() => expect(a.model.requests).toHaveLength(2));
    const refOf = (key: string) => {
      const entry = a.app.sessions.require(key);
      return { path: a.app.sessions.transcriptPath(entry), sessionId: entry.sessionId, key };
    };
    await a.app.transcripts.appendMessage(refOf("agent:main:telegram:direct:51"), { role: "assistant", content: [{ type: "text", text: " 42, as before the crash " }], timestamp: Date.now(), stopReason: "stop" });
    await a.app.transcripts.appendMessage(refOf("agent:main:telegram:direct:52"), { role: "assistant", content: [{ type: "toolCall", id: "call-1", name: "sessions_list", arguments: {} }], timestamp: Date.now(), stopReason: "toolUse" });

    // Daemon B resumes both: the first is answered from its transcript, the second runs again.
    const adapter = new RecordingAdapter("telegram");
    const b = await startHarness({ stateDir, config, adapters: [adapter] });
    harnesses.push(b);
    await vi.waitFor(() => expect(adapter.sent).toHaveLength(2), { timeout: 10_000 });
    expect(adapter.textsTo("51")).toEqual(["42, as before the crash"]);
    expect(adapter.textsTo("52")).toEqual(["echo: look it up"]);
    expect(b.model.requests.map((r) => r.messages.filter((m) => m.role === "user").at(-1)?.content)).toEqual(["look it up"]);
    await b.app.transcripts.flush();
    const roles = async (key: string) => (await b.app.transcripts.readMessages(b.app.sessions.transcriptPath(b.app.sessions.require(key)))).map((m) => m.role);
    expect(await roles("agent:main:telegram:direct:51")).toEqual(["user", "assistant"]);
    expect(await roles("agent:main:telegram:direct:52")).toEqual(["user", "assistant", "assistant"]);
    release();
  });

  it("at start, inbound ids done more than a day ago are pruned — all of them — and newer ones still dedupe a redelivery", async () => {
    const stateDir = mkdtempSync(path.join(os.tmpdir(), "sb-prune-"));
    dirs.push(stateDir);
    const a = await startHarness({ stateDir, adapters: [new RecordingAdapter("telegram")] });
    harnesses.push(a);
    const space = a.app.kv.space<{ id: string; state: string; receivedAt: number }>("inbound");
    const dayAgo = Date.now() - 24 * 3600_000;
    await Promise.all(Array.from({ length: 1500 }, (_, i) => space.set(`telegram:default:old${i}`, { id: `telegram:default:old${i}`, state: "done", receivedAt: dayAgo - 60_000 })));
    await space.set("telegram:default:recent", { id: "telegram:default:recent", state: "done", receivedAt: dayAgo + 60_000 });
    await a.stop({ keepState: true });
    harnesses.splice(harnesses.indexOf(a), 1);

    const adapter = new RecordingAdapter("telegram");
    const b = await startHarness({ stateDir, adapters: [adapter] });
    harnesses.push(b);
    const left = (await b.app.kv.space("inbound").entries()).map(([k]) => k);
    expect(left).toEqual(["telegram:default:recent"]);
    expect(await b.app.router.accept(inbound({ messageId: "recent", text: "again" }))).toEqual({ status: "duplicate" });
    expect(await b.app.router.accept(inbound({ messageId: "old7", text: "pruned id, a new message" }))).toEqual({ status: "accepted" });
    await vi.waitFor(() => expect(adapter.sent.map((m) => m.text)).toEqual(["echo: pruned id, a new message"]));
  });

  it("while running, the daemon prunes expired records on its interval: old delivered replies and done ids go, unfinished and recent ones stay", async () => {
    const stateDir = mkdtempSync(path.join(os.tmpdir(), "sb-prune-live-"));
    dirs.push(stateDir);
    const h = await startHarness({ stateDir, adapters: [new RecordingAdapter("telegram")], pruneIntervalMs: 100 });
    harnesses.push(h);
    const dayAgo = Date.now() - 24 * 3600_000;
    const inboundSpace = h.app.kv.space<{ id: string; state: string; receivedAt: number }>("inbound");
    await Promise.all([
      inboundSpace.set("telegram:default:old", { id: "telegram:default:old", state: "done", receivedAt: dayAgo - 60_000 }),
      inboundSpace.set("telegram:default:recent", { id: "telegram:default:recent", state: "done", receivedAt: dayAgo + 60_000 }),
    ]);
    const target = { channel: "telegram", accountId: "default", to: "1" };
    const record = (id: string, state: string, age: number) => ({ id, target, kind: "reply", text: id, state, next: 0, messageIds: [], attempts: 0, createdAt: Date.now() - age, updatedAt: Date.now() - age });
    const outboxSpace = h.app.kv.space<ReturnType<typeof record>>("outbox");
    await Promise.all([
      outboxSpace.set("old-sent", record("old-sent", "sent", 25 * 3600_000)),
      outboxSpace.set("old-failed", record("old-failed", "failed", 25 * 3600_000)),
      outboxSpace.set("recent-sent", record("recent-sent", "sent", 3600_000)),
      // Unfinished, however old: never pruned (it is resumed at the next start).
      outboxSpace.set("old-queued", record("old-queued", "queued", 25 * 3600_000)),
    ]);
    await vi.waitFor(async () => expect((await outboxSpace.entries()).map(([k]) => k).sort()).toEqual(["old-queued", "recent-sent"]), { timeout: 5000 });
    await vi.waitFor(async () => expect((await inboundSpace.entries()).map(([k]) => k)).toEqual(["telegram:default:recent"]), { timeout: 5000 });
  });
});
