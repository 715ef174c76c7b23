import { existsSync, mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import Keyv from "keyv";
import KeyvSqlite from "@keyv/sqlite";
import { createKeyv } from "@keyv/redis";
import { afterEach, describe, expect, it } from "vitest";
import { openKvStore, type KvStore } from "../../src/store/kv.js";
import { FakeRedisServer } from "../fakes/redis-server.js";

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

interface Opened {
  kv: KvStore;
  /** The same store opened again (as by a restarted daemon). */
  reopen(): Promise<KvStore>;
  /** A plain keyv client on the same data (what any other keyv user would read). */
  plainKeyv(namespace: string): Keyv;
}

async function openSqlite(): Promise<Opened & { file: string; stateDir: string }> {
  const stateDir = mkdtempSync(path.join(os.tmpdir(), "sb-kv-"));
  cleanups.push(() => rmSync(stateDir, { recursive: true, force: true }));
  const file = path.join(stateDir, "s.sqlite");
  const kv = await openKvStore(`sqlite://${file}`, stateDir);
  cleanups.push(() => kv.close());
  return {
    kv,
    file,
    stateDir,
    async reopen() {
      const again = await openKvStore(`sqlite://${file}`, stateDir);
      cleanups.push(() => again.close());
      return again;
    },
    plainKeyv(namespace) {
      const keyv = new Keyv({ store: new KeyvSqlite({ uri: `sqlite://${file}`, table: "keyv" }), namespace });
      cleanups.push(() => keyv.disconnect());
      return keyv;
    },
  };
}

/** A Redis store on a fake of its own (db 3, so SELECT is exercised too). */
async function openRedis(): Promise<Opened> {
  const fake = new FakeRedisServer();
  await fake.start();
  cleanups.push(() => fake.stop());
  const url = fake.url({ db: 3 });
  const kv = await openKvStore(url, os.tmpdir());
  cleanups.push(() => kv.close());
  return {
    kv,
    async reopen() {
      const again = await openKvStore(url, os.tmpdir());
      cleanups.push(() => again.close());
      return again;
    },
    plainKeyv(namespace) {
      const keyv = createKeyv(url, { namespace });
      cleanups.push(() => keyv.disconnect());
      return keyv;
    },
  };
}

const backends = [
  { name: "SQLite", open: openSqlite },
  { name: "Redis", open: openRedis },
];

describe.each(backends)("kv store contract ($name)", ({ open }) => {
  it("sets and deletes issued together land in issue order, per key and across keys", async () => {
    const { kv } = await open();
    const space = kv.space<{ n: number }>("t");
    const writes = [
      space.set("a", { n: 1 }),
      space.delete("a"),
      space.set("a", { n: 2 }),
      space.set("b", { n: 1 }),
      space.delete("b"),
      space.delete("c"),
      space.set("c", { n: 3 }),
      ...Array.from({ length: 900 }, (_, i) => space.set(`k${i}`, { n: i })),
      ...Array.from({ length: 900 }, (_, i) => (i % 3 === 0 ? space.delete(`k${i}`) : Promise.resolve())),
    ];
    await Promise.all(writes);
    expect(await space.get("a")).toEqual({ n: 2 });
    expect(await space.get("b")).toBeUndefined();
    expect(await space.get("c")).toEqual({ n: 3 });
    const rows = new Map(await space.entries());
    expect([...rows.keys()].filter((k) => k.startsWith("k"))).toHaveLength(600);
    expect(rows.get("k1")).toEqual({ n: 1 });
    expect(rows.has("k3")).toBe(false);
  });

  it("values read back through plain keyv exactly as written (keyv's format, ':'-strings and Buffers included)", async () => {
    const { kv, plainKeyv } = await open();
    const value = { text: ":starts with a colon", nested: { list: [":x", "y"] }, blob: Buffer.from("hi"), n: 1.5 };
    await kv.space<typeof value>("t").set("v", value);
    const keyv = plainKeyv("t");
    expect(await keyv.get("v")).toEqual(value);
    expect(await kv.space<typeof value>("t").get("v")).toEqual(value);
  });

  it("a value whose only keyv-escaped part is a ':'-string (no Buffer) reads back as written, through keyv and through entries() after a reopen", async () => {
    const { kv, plainKeyv, reopen } = await open();
    const value = { text: ":)", list: ["::double", "plain"] };
    await kv.space<typeof value>("t").set("smile", value);
    expect(await plainKeyv("t").get("smile")).toEqual(value);
    await kv.close();
    const again = await reopen();
    expect(await again.space<typeof value>("t").entries()).toEqual([["smile", value]]);
  });

  it("any text survives the writer's batches: quotes, backslashes, escapes, emoji, control characters, keys with spaces", async () => {
    const { kv, reopen } = await open();
    const space = kv.space<{ text: string }>("t");
    const texts = ['"quoted" \\ back\\slash \\u0041 not an escape', "emoji 🦊 and é, ß, 中文", "tab\tnewline\nnul\u0000end", "\ud800 lone surrogate", "{\"json\":[1,2]}", "x".repeat(100_000)];
    const keys = ["plain", "with space", 'quote"key', "back\\slash", "日本", "k:colon"];
    // More writes than one batch takes, all issued together.
    const extra = Array.from({ length: 2500 }, (_, i) => space.set(`bulk-${i}`, { text: `t${i}` }));
    await Promise.all([...keys.map((k, i) => space.set(k, { text: texts[i] })), ...extra]);
    for (const [i, k] of keys.entries()) expect(await space.get(k)).toEqual({ text: texts[i] });
    await kv.close();
    const again = await reopen();
    const rows = new Map(await again.space<{ text: string }>("t").entries());
    expect(rows.size).toBe(keys.length + 2500);
    for (const [i, k] of keys.entries()) expect(rows.get(k)).toEqual({ text: texts[i] });
    expect(rows.get("bulk-2499")).toEqual({ text: "t2499" });
  });

  it("a write to a closed store is refused with an error, not lost silently", async () => {
    const { kv } = await open();
    const space = kv.space<{ n: number }>("t");
    await space.set("a", { n: 1 });
    await kv.close();
    await expect(space.set("b", { n: 2 })).rejects.toThrow(/store is closed: write of t:b refused/);
  });

  it.each([
    ["a lone high surrogate", "k\ud800", false],
    ["a lone low surrogate", "\udc00k", false],
    ["a reversed pair", "\udc00\ud800", false],
    ["a well-formed pair (emoji)", "🦊", true],
    ["plain text", "agent:main:telegram:group:42", true],
    ["a NUL inside (kept whole, not cut at the NUL)", "agent:main:x:direct:a\u0000:thread:7", true],
  ])("keys: %s → stored only if well-formed Unicode (SQLite and Redis would turn a lone surrogate into U+FFFD)", async (_label, key, ok) => {
    const { kv } = await open();
    const write = kv.space<{ n: number }>("t").set(key, { n: 1 });
    if (ok) {
      await write;
      expect(await kv.space<{ n: number }>("t").get(key)).toEqual({ n: 1 });
    } else await expect(write).rejects.toThrow(/key is not well-formed Unicode/);
  });

  it("a delete by a key with a lone surrogate is refused too: it would delete the row of the U+FFFD key the store turns it into", async () => {
    const { kv } = await open();
    const space = kv.space<{ n: number }>("t");
    await space.set("k\ufffd", { n: 1 });
    await expect(space.delete("k\ud800")).rejects.toThrow(/key is not well-formed Unicode/);
    expect(await space.get("k\ufffd")).toEqual({ n: 1 });
  });

  it("entries() and scan() over several pages visit every row once, in key order", async () => {
    const { kv } = await open();
    const space = kv.space<{ n: number }>("t");
    // More than two pages' worth (a page is 2,000 rows; Redis SCANs 1,000 keys a call), so page
    // boundaries are crossed.
    const keys = Array.from({ length: 4500 }, (_, i) => `k${String(i).padStart(5, "0")}`);
    await Promise.all(keys.map((k, i) => space.set(k, { n: i })));
    const entries = await space.entries();
    expect(entries.map(([k]) => k)).toEqual(keys);
    expect(entries[4499]).toEqual(["k04499", { n: 4499 }]);
    const scanned: string[] = [];
    await space.scan((k) => scanned.push(k));
    expect(scanned).toEqual(keys);
  });

  it("a space never sees the rows of another namespace that starts with its name", async () => {
    const { kv } = await open();
    // Real namespaces share prefixes ("adapter:telegram:a" and "adapter:telegram:ab").
    await Promise.all([
      kv.space<{ n: number }>("adapter:telegram:a").set("offset", { n: 1 }),
      kv.space<{ n: number }>("adapter:telegram:ab").set("offset", { n: 2 }),
      kv.space<{ n: number }>("adapter:telegram:a-2").set("offset", { n: 3 }),
    ]);
    expect(await kv.space<{ n: number }>("adapter:telegram:a").entries()).toEqual([["offset", { n: 1 }]]);
    expect(await kv.space<{ n: number }>("adapter:telegram:ab").entries()).toEqual([["offset", { n: 2 }]]);
  });

  it("a key that starts with its space's own name reads back what was written (keyv leaves such a key unprefixed)", async () => {
    const { kv } = await open();
    const space = kv.space<{ n: number }>("cron");
    await space.set("cron:daily", { n: 1 });
    expect(await space.get("cron:daily")).toEqual({ n: 1 });
    expect(await space.entries()).toEqual([["cron:daily", { n: 1 }]]);
    await space.delete("cron:daily");
    expect(await space.get("cron:daily")).toBeUndefined();
  });

  it("close() commits the writes issued before it, awaited or not, so they survive a reopen", async () => {
    const { kv, reopen } = await open();
    const space = kv.space<{ n: number }>("t");
    await space.set("before", { n: 0 });
    // Shutdown does not wait for every write it races with (a late outbox mark, an adapter offset).
    const pending = [space.set("a", { n: 1 }), space.delete("before"), space.set("b", { n: 2 })];
    await kv.close();
    await Promise.all(pending);
    const again = await reopen();
    expect(new Map(await again.space<{ n: number }>("t").entries())).toEqual(new Map([["a", { n: 1 }], ["b", { n: 2 }]]));
  });

  it("a burst of writes larger than one statement can bind (17,000 sets, then as many deletes) commits whole", async () => {
    const { kv } = await open();
    const space = kv.space<{ n: number }>("t");
    // 17,000 rows are 34,000 bound values: over SQLite's limit (32,766) for one statement.
    const keys = Array.from({ length: 17_000 }, (_, i) => `k${i}`);
    await Promise.all(keys.map((k, i) => space.set(k, { n: i })));
    expect(await space.get("k16999")).toEqual({ n: 16999 });
    await Promise.all(keys.map((k) => space.delete(k)));
    expect(await space.entries()).toEqual([]);
  });
});

describe("kv store (keyv + SQLite, group-committed writes)", () => {
  it('"sqlite://" without a file keeps the database in the state directory', async () => {
    const stateDir = mkdtempSync(path.join(os.tmpdir(), "sb-kv-"));
    cleanups.push(() => rmSync(stateDir, { recursive: true, force: true }));
    const kv = await openKvStore("sqlite://", stateDir);
    cleanups.push(() => kv.close());
    const file = path.join(stateDir, "switchboard.sqlite");
    expect(kv.description).toBe(`sqlite:${file}`);
    await kv.space<{ n: number }>("t").set("a", { n: 1 });
    expect(existsSync(file)).toBe(true);
  });

  it("a write whose commit fails rejects — with the writes committed alongside it — and later writes still commit", async () => {
    const { kv, file } = await openSqlite();
    const space = kv.space<{ n: number }>("t");
    // Another connection makes SQLite refuse one key, so the commit that carries it fails.
    const other = new KeyvSqlite({ uri: `sqlite://${file}`, table: "keyv" }) as KeyvSqlite & { query(sql: string): Promise<unknown> };
    cleanups.push(() => other.disconnect());
    await other.query("CREATE TRIGGER refuse BEFORE INSERT ON keyv WHEN NEW.key = 't:bad' BEGIN SELECT RAISE(ABORT, 'refused by test'); END");
    const bad = space.set("bad", { n: 1 });
    const mate = space.set("mate", { n: 2 });
    await expect(bad).rejects.toThrow(/refused by test/);
    await expect(mate).rejects.toThrow(/refused by test/);
    expect(await space.get("mate")).toBeUndefined();
    await space.set("after", { n: 3 });
    expect(await space.get("after")).toEqual({ n: 3 });
  });
});

describe("kv store (memory://)", () => {
  it("memory:// neither keeps nor hands out live objects: changing a value after set, or one got back from get, leaves the stored value alone", async () => {
    const kv = await openKvStore("memory://", os.tmpdir());
    const space = kv.space<{ list: number[] }>("t");
    const value = { list: [1] };
    await space.set("a", value);
    value.list.push(2);
    expect(await space.get("a")).toEqual({ list: [1] });
    (await space.get("a"))!.list.push(3);
    expect(await space.entries()).toEqual([["a", { list: [1] }]]);
  });
});
