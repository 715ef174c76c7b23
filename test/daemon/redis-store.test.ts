/**
 * The whole daemon on a Redis store (store.url = redis://…, against FakeRedisServer): sessions
 * live in Redis, so a daemon stopped and started again on the same server finds them — with what
 * an operator patched — and the SQLite file is never created.
 */
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterEach, describe, expect, it, vi } from "vitest";
import { FakeRedisServer } from "../fakes/redis-server.js";
import { inbound, startHarness, type Harness } from "../helpers/harness.js";
import { RecordingAdapter } from "../helpers/recording-adapter.js";

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function daemon(opts: { stateDir: string; storeUrl: string; adapter: RecordingAdapter }): Promise<Harness> {
  const h = await startHarness({ stateDir: opts.stateDir, storeUrl: opts.storeUrl, adapters: [opts.adapter] });
  let stopped = false;
  cleanups.push(() => (stopped ? undefined : h.stop({ keepState: true })));
  return { ...h, stop: async (o) => ((stopped = true), h.stop(o)) };
}

describe("daemon on a Redis store", () => {
  it("a chat message creates a session in Redis; after a stop and a start on the same Redis the session is there, with the sendPolicy sessions.patch gave it", async () => {
    const redis = new FakeRedisServer({ requirepass: "daemon-pw" });
    await redis.start();
    cleanups.push(() => redis.stop());
    const storeUrl = redis.url({ password: "daemon-pw", db: 4 });
    const stateDir = mkdtempSync(path.join(os.tmpdir(), "sb-redis-daemon-"));
    cleanups.push(() => rmSync(stateDir, { recursive: true, force: true }));

    const telegram = new RecordingAdapter("telegram");
    const a = await daemon({ stateDir, storeUrl, adapter: telegram });
    expect(a.app.kv.description).toBe(`redis:127.0.0.1:${redis.port}/4`);
    await a.app.router.accept(inbound({ peerId: "777", to: "777", senderId: "777", text: "hello over redis", messageId: "777:1" }));
    await vi.waitFor(() => expect(telegram.textsTo("777")).toEqual(["echo: hello over redis"]), { timeout: 10_000 });
    const admin = await a.client();
    const before = (await admin.request("sessions.list", {})).sessions.find((s: any) => s.key === "agent:main:main");
    expect(before).toMatchObject({ channel: "telegram", sessionId: expect.any(String) });
    await admin.request("sessions.patch", { key: "agent:main:main", sendPolicy: "deny" });
    await a.stop({ keepState: true });
    expect(redis.keys(4)).toContain("sessions::agent:main:main");

    const b = await daemon({ stateDir, storeUrl, adapter: new RecordingAdapter("telegram") });
    const after = (await (await b.client()).request("sessions.list", {})).sessions.find((s: any) => s.key === "agent:main:main");
    expect(after).toMatchObject({ sessionId: before.sessionId, channel: "telegram", sendPolicy: "deny" });
    expect(b.app.sessions.require("agent:main:main").sendPolicy).toBe("deny");
    // Transcripts and the send journal stay files under stateDir; the entries were never in SQLite.
    expect(existsSync(path.join(stateDir, "switchboard.sqlite"))).toBe(false);
    expect(existsSync(b.app.sessions.transcriptPath(b.app.sessions.require("agent:main:main")))).toBe(true);
  });
});
