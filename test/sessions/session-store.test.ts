import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { openKvStore, type KvStore } from "../../src/store/kv.js";
import type { SessionEntry } from "../../src/sessions/entry.js";
import { SessionStore } from "../../src/sessions/session-store.js";

const dirs: string[] = [];
const stores: KvStore[] = [];
afterEach(async () => {
  for (const s of stores.splice(0)) await s.close();
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

async function open(dir?: string, now?: () => number) {
  const stateDir = dir ?? mkdtempSync(path.join(os.tmpdir(), "sb-store-"));
  if (!dir) dirs.push(stateDir);
  const kv = await openKvStore(`sqlite://${path.join(stateDir, "s.sqlite")}`, stateDir);
  stores.push(kv);
  const store = new SessionStore(kv.space<SessionEntry>("sessions"), stateDir, now);
  await store.load();
  return { store, kv, stateDir };
}

describe("session store (SQLite through keyv)", () => {
  it.each(["", " ", "\t\n"])("a blank session key (%j) is refused with a clear error, and nothing is stored", async (key) => {
    const { store, kv } = await open();
    await expect(store.upsert(key, "main", { label: "x" })).rejects.toThrow(/session key must not be blank/);
    expect(store.size).toBe(0);
    expect(await kv.space("sessions").entries()).toEqual([]);
  });

  it("persists every row field and reloads it from SQLite", async () => {
    const { store, kv, stateDir } = await open();
    const created = await store.upsert("agent:main:telegram:group:-1", "main", {
      chatType: "group",
      channel: "telegram",
      displayName: "Team",
      lastChannel: "telegram",
      lastTo: "-1",
      deliveryContext: { channel: "telegram", to: "-1", accountId: "default" },
      sendPolicy: "deny",
    });
    await store.flush();
    await kv.close();
    stores.pop();
    const { store: again } = await open(stateDir);
    expect(again.get(created.key)).toEqual(created);
  });

  it("null clears a field (R27 inherit) and sessionId stays stable across patches", async () => {
    const { store } = await open();
    const a = await store.upsert("agent:main:main", "main", { sendPolicy: "deny" });
    const b = await store.upsert("agent:main:main", "main", { sendPolicy: null });
    expect(b.sendPolicy).toBeUndefined();
    expect(b.sessionId).toBe(a.sessionId);
    expect(b.updatedAt).toBeGreaterThan(a.updatedAt);
  });

  it("entry writes are issued at once, in call order — never chained behind the previous write's commit", async () => {
    const { kv, stateDir } = await open();
    const space = kv.space<SessionEntry>("sessions");
    const issued: string[] = [];
    const store = new SessionStore({ ...space, set: (key, value) => (issued.push(`${key}=${value.label}`), space.set(key, value)) }, stateDir);
    await store.load();
    const first = store.stage("agent:main:main", "main", { label: "one" }).written;
    const second = store.stage("agent:main:main", "main", { label: "two" }).written;
    // Synchronously issued, so the store commits them before any write issued later — the
    // inbound router and the runtime rely on that: a reply's outbox record (written later) is
    // never durable before the entry writes that preceded it (kv.ts commits in issue order).
    expect(issued).toEqual(["agent:main:main=one", "agent:main:main=two"]);
    await Promise.all([first, second]);
    expect((await space.get("agent:main:main"))?.label).toBe("two");
  });

  it("R12 a sessionId resolves to its key; reset mints a new id and forgets the old one", async () => {
    const { store } = await open();
    const e = await store.upsert("agent:main:main", "main", { sendPolicy: "deny", totalTokens: 30 });
    expect(store.keyForSessionId(e.sessionId)).toBe("agent:main:main");
    const fresh = await store.reset("agent:main:main");
    expect(fresh.sessionId).not.toBe(e.sessionId);
    expect(fresh.sendPolicy).toBe("deny");
    expect(fresh.totalTokens).toBeUndefined();
    expect(store.keyForSessionId(e.sessionId)).toBeUndefined();
    expect(store.keyForSessionId(fresh.sessionId)).toBe("agent:main:main");
  });

  it("lists newest first, applies filters before the limit, and skips unknown", async () => {
    const { store } = await open();
    for (const key of ["agent:main:main", "cron:a", "agent:main:telegram:group:1", "unknown", "agent:main:telegram:group:2"]) await store.upsert(key, "main");
    expect(store.list({ limit: 2, kinds: ["group"] }).map((e) => e.key)).toEqual(["agent:main:telegram:group:2", "agent:main:telegram:group:1"]);
    expect(store.list().map((e) => e.key)).not.toContain("unknown");
    await store.upsert("agent:main:main", "main", { displayName: "x" });
    expect(store.list({ limit: 1 })[0].key).toBe("agent:main:main");
  });

  it("transcriptPath is the per-agent JSONL file of the sessionId", async () => {
    const { store, stateDir } = await open();
    const e = await store.upsert("agent:ops:main", "ops");
    expect(store.transcriptPath(e)).toBe(path.join(stateDir, "agents", "ops", "sessions", `${e.sessionId}.jsonl`));
    // An entry stored with a path for its agent id (before keys' agent ids were normalised) stays inside.
    expect(store.transcriptPath({ agentId: "../../x", sessionId: e.sessionId })).toBe(path.join(stateDir, "agents", "x", "sessions", `${e.sessionId}.jsonl`));
    expect(store.transcriptPath({ agentId: "Ops", sessionId: e.sessionId })).toBe(path.join(stateDir, "agents", "Ops", "sessions", `${e.sessionId}.jsonl`));
  });

  it("after a restart, list is still newest first — also for entries written within one clock tick", async () => {
    // A frozen clock: every write lands in the same millisecond, as a burst of inbound messages does.
    const { store, kv, stateDir } = await open(undefined, () => 1_000);
    for (const key of ["agent:main:telegram:group:3", "agent:main:telegram:group:1", "agent:main:telegram:group:2"]) await store.upsert(key, "main");
    const order = store.list().map((e) => e.key);
    expect(order).toEqual(["agent:main:telegram:group:2", "agent:main:telegram:group:1", "agent:main:telegram:group:3"]);
    await kv.close();
    stores.pop();
    const { store: again } = await open(stateDir, () => 1_000);
    expect(again.list().map((e) => e.key)).toEqual(order);
  });

  it("after a restart with the clock set back, a new write still stamps later than every stored entry", async () => {
    const { store, kv, stateDir } = await open(undefined, () => 5_000);
    const old = await store.upsert("agent:main:telegram:group:1", "main");
    await kv.close();
    stores.pop();
    const { store: again, kv: kv2 } = await open(stateDir, () => 1_000);
    const fresh = await again.upsert("agent:main:telegram:group:2", "main");
    expect(fresh.updatedAt).toBeGreaterThan(old.updatedAt);
    await kv2.close();
    stores.pop();
    const { store: third } = await open(stateDir, () => 1_000);
    expect(third.list().map((e) => e.key)).toEqual(["agent:main:telegram:group:2", "agent:main:telegram:group:1"]);
  });

  it("a deleted session is gone for good: its sessionId no longer resolves, and it stays deleted after a restart", async () => {
    const { store, kv, stateDir } = await open();
    const e = await store.upsert("agent:main:telegram:group:-9", "main", { label: "team" });
    await store.upsert("agent:main:main", "main");
    expect(await store.delete(e.key)).toEqual(e);
    expect(store.get(e.key)).toBeUndefined();
    expect(store.keyForSessionId(e.sessionId)).toBeUndefined();
    expect(await store.delete(e.key)).toBeUndefined();
    await kv.close();
    stores.pop();
    const { store: again } = await open(stateDir);
    expect(again.get(e.key)).toBeUndefined();
    expect(again.keyForSessionId(e.sessionId)).toBeUndefined();
    expect(again.list().map((x) => x.key)).toEqual(["agent:main:main"]);
  });

  it("a store write that fails rejects the upsert, reset or delete that issued it — the caller is not told it was saved", async () => {
    const { store, kv } = await open();
    await store.upsert("agent:main:main", "main");
    await store.upsert("agent:main:telegram:group:1", "main");
    await kv.close();
    await expect(store.upsert("agent:main:main", "main", { label: "x" })).rejects.toThrow(/store is closed/);
    await expect(store.reset("agent:main:main")).rejects.toThrow(/store is closed/);
    await expect(store.delete("agent:main:telegram:group:1")).rejects.toThrow(/store is closed/);
  });

  it("a patch field that is undefined leaves the stored value alone; only null clears it", async () => {
    const { store } = await open();
    await store.upsert("agent:main:main", "main", { label: "ops", sendPolicy: "deny" });
    const e = await store.upsert("agent:main:main", "main", { label: undefined, sendPolicy: undefined, model: "fake/m" });
    expect(e).toMatchObject({ label: "ops", sendPolicy: "deny", model: "fake/m" });
  });

  it("reset clears every token counter, systemSent and abortedLastRun, keeps policy and label, counts as the newest touch, and survives a restart", async () => {
    const { store, kv, stateDir } = await open();
    const before = await store.upsert("agent:main:main", "main", { label: "ops", sendPolicy: "deny", inputTokens: 1, outputTokens: 2, totalTokens: 3, contextTokens: 4, systemSent: true, abortedLastRun: true });
    const other = await store.upsert("agent:main:telegram:group:1", "main");
    const fresh = await store.reset("agent:main:main");
    expect(fresh).toMatchObject({ label: "ops", sendPolicy: "deny", systemSent: false, abortedLastRun: false, createdAt: before.createdAt });
    expect(fresh.updatedAt).toBeGreaterThan(other.updatedAt);
    for (const counter of ["inputTokens", "outputTokens", "totalTokens", "contextTokens"]) expect(fresh).not.toHaveProperty(counter);
    await kv.close();
    stores.pop();
    const { store: again } = await open(stateDir);
    expect(again.get("agent:main:main")).toEqual(fresh);
    expect(again.keyForSessionId(before.sessionId)).toBeUndefined();
    expect(again.keyForSessionId(fresh.sessionId)).toBe("agent:main:main");
    expect(again.list().map((e) => e.key)).toEqual(["agent:main:main", "agent:main:telegram:group:1"]);
  });

  it("an upsert naming another agent does not move an existing session: its agentId, and so its transcript, stay", async () => {
    const { store } = await open();
    // A cron job re-pointed at another agent still runs in its old session (cron:<job> keys name no agent).
    const e = await store.upsert("cron:daily", "ops");
    const again = await store.upsert("cron:daily", "research", { label: "daily" });
    expect(again.agentId).toBe("ops");
    expect(store.transcriptPath(again)).toBe(store.transcriptPath(e));
  });
});
