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

async function open(dir?: string) {
  const stateDir = dir ?? mkdtempSync(path.join(os.tmpdir(), "sb-store-"));
  if (!dir) dirs.push(stateDir);
  const kv = await openKvStore(`sqlite://${path.join(stateDir, "s.sqlite")}`, stateDir);
  stores.push(kv);
  const store = new SessionStore(kv.space<SessionEntry>("sessions"), stateDir);
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
  });
});
