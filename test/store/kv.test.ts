import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import Keyv from "keyv";
import KeyvSqlite from "@keyv/sqlite";
import { afterEach, describe, expect, it } from "vitest";
import { openKvStore, type KvStore } from "../../src/store/kv.js";

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function open(): Promise<{ kv: KvStore; file: string; stateDir: string }> {
  const stateDir = mkdtempSync(path.join(os.tmpdir(), "sb-kv-"));
  cleanups.push(() => rmSync(stateDir, { recursive: true, force: true }));
  const file = path.join(stateDir, "s.sqlite");
  const kv = await openKvStore(`sqlite://${file}`, stateDir);
  cleanups.push(() => kv.close());
  return { kv, file, stateDir };
}

describe("kv store (keyv + SQLite, group-committed writes)", () => {
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
    const { kv, file } = await open();
    const value = { text: ":starts with a colon", nested: { list: [":x", "y"] }, blob: Buffer.from("hi"), n: 1.5 };
    await kv.space<typeof value>("t").set("v", value);
    const keyv = new Keyv({ store: new KeyvSqlite({ uri: `sqlite://${file}`, table: "keyv" }), namespace: "t" });
    cleanups.push(() => keyv.disconnect());
    expect(await keyv.get("v")).toEqual(value);
    expect(await kv.space<typeof value>("t").get("v")).toEqual(value);
  });
});
