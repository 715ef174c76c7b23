/**
 * What only the Redis store has to get right (the shared contract is in kv.test.ts): start-up
 * failures that name the URL without its password, SCAN paging, and writes that survive a dropped
 * connection in issue order. Against FakeRedisServer (real node-redis client, real TCP).
 */
import net from "node:net";
import os from "node:os";
import { Writable } from "node:stream";
import pino from "pino";
import { afterEach, describe, expect, it, vi } from "vitest";
import { openKvStore, type KvStore } from "../../src/store/kv.js";
import { FakeRedisServer } from "../fakes/redis-server.js";

const PASSWORD = "s3cr3t-p@ss/w:rd";

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function fake(opts: { requirepass?: string } = {}): Promise<FakeRedisServer> {
  const server = new FakeRedisServer(opts);
  await server.start();
  cleanups.push(() => server.stop());
  return server;
}

async function open(url: string, log?: pino.Logger): Promise<KvStore> {
  const kv = await openKvStore(url, os.tmpdir(), { log });
  cleanups.push(() => kv.close());
  return kv;
}

/** A pino logger whose lines (JSON text) land in `lines`. */
function capturingLog(): { log: pino.Logger; lines: string[] } {
  const lines: string[] = [];
  const stream = new Writable({
    write(chunk, _enc, done) {
      lines.push(String(chunk));
      done();
    },
  });
  return { log: pino({ level: "debug" }, stream), lines };
}

/** A port nothing listens on. */
async function closedPort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as net.AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

/** Waits until the client has seen its connection go (its reconnect attempt reached the fake). */
async function outage(server: FakeRedisServer): Promise<void> {
  const before = server.accepted;
  server.refuseConnections = true;
  server.dropConnections();
  await vi.waitFor(() => expect(server.accepted).toBeGreaterThan(before), { timeout: 10_000 });
}

describe("Redis store: connecting", () => {
  it("logs in with a password holding URL-special characters (percent-encoded in the URL), selects the db, and describes itself without the password", async () => {
    const server = await fake({ requirepass: PASSWORD });
    const kv = await open(server.url({ password: PASSWORD, db: 5 }));
    expect(kv.description).toBe(`redis:127.0.0.1:${server.port}/5`);
    expect(kv.durable).toBe(true);
    await kv.space<{ n: number }>("t").set("a", { n: 1 });
    expect(server.value("t::a", 5)).toBe('{"value":{"n":1}}');
    expect(server.commands[0]).toEqual(["AUTH", PASSWORD]);
  });

  it("password masked: a wrong password fails openKvStore with an error naming the URL as redis://:***@host:port, never the password", async () => {
    const server = await fake({ requirepass: "right-one" });
    const err = (await openKvStore(server.url({ password: PASSWORD }), os.tmpdir()).catch((e: unknown) => e)) as Error;
    expect(err.message).toBe(`store unreachable: redis://:***@127.0.0.1:${server.port} (WRONGPASS invalid username-password pair or user is disabled.)`);
    expect(err.message).not.toContain(PASSWORD);
    expect(err.message).not.toContain(encodeURIComponent(PASSWORD));
  });

  it("password masked: an unreachable port fails openKvStore at once (no endless reconnect at start), naming the URL with the password masked and the cause", async () => {
    const port = await closedPort();
    const url = `redis://admin:${encodeURIComponent(PASSWORD)}@127.0.0.1:${port}/2`;
    const err = (await openKvStore(url, os.tmpdir()).catch((e: unknown) => e)) as Error;
    expect(err.message).toMatch(new RegExp(`^store unreachable: redis://admin:\\*\\*\\*@127\\.0\\.0\\.1:${port}/2 \\(connect ECONNREFUSED 127\\.0\\.0\\.1:${port}\\)$`));
    expect(err.message).not.toContain(encodeURIComponent(PASSWORD));
  });

  it("a server that needs a password, given none, fails openKvStore with NOAUTH on the first command", async () => {
    const server = await fake({ requirepass: PASSWORD });
    await expect(openKvStore(server.url({ db: 1 }), os.tmpdir())).rejects.toThrow(`store unreachable: redis://127.0.0.1:${server.port}/1 (NOAUTH Authentication required.)`);
  });
});

describe("Redis store: reading", () => {
  it("scan pages with SCAN … MATCH on the namespace prefix (glob characters escaped), never KEYS, and visits a key SCAN returns twice only once", async () => {
    const server = await fake();
    const kv = await open(server.url());
    // A namespace full of glob characters, and one its unescaped pattern would match.
    const odd = kv.space<{ n: number }>("odd*[ns]?\\");
    const decoy = kv.space<{ n: number }>("oddX[ns]?\\");
    await Promise.all(Array.from({ length: 2500 }, (_, i) => odd.set(`k${String(i).padStart(4, "0")}`, { n: i })));
    await decoy.set("k0000", { n: -1 });
    server.scanRepeats = true;
    const visited: string[] = [];
    await odd.scan((key) => visited.push(key));
    expect(visited).toHaveLength(2500);
    expect(new Set(visited).size).toBe(2500);
    expect(visited[2499]).toBe("k2499");
    const scans = server.commands.filter(([name]) => name === "SCAN");
    expect(scans.length).toBeGreaterThan(1);
    for (const scan of scans) expect(scan.slice(1)).toEqual([expect.any(String), "MATCH", "odd\\*\\[ns\\]\\?\\\\::*", "COUNT", "1000"]);
    expect(server.commands.some(([name]) => name === "KEYS")).toBe(false);
  });

  it("a value written by something else that is not keyv's format reads as absent, not as an error", async () => {
    const server = await fake();
    const kv = await open(server.url());
    const { createClient } = await import("@keyv/redis");
    const other = createClient({ url: server.url() });
    await other.connect();
    await other.set("t::foreign", "not json");
    other.destroy();
    const space = kv.space<{ n: number }>("t");
    await space.set("mine", { n: 1 });
    expect(await space.get("foreign")).toBeUndefined();
    expect(await space.entries()).toEqual([["mine", { n: 1 }]]);
  });
});

describe("Redis store: writes", () => {
  it("a write Redis refuses (an error reply) rejects naming its key and the server's error; the writes around it land, in order", async () => {
    const server = await fake();
    const kv = await open(server.url());
    const space = kv.space<{ n: number }>("t");
    server.refuse("t::bad", "ERR refused by test");
    const results = await Promise.allSettled([space.set("before", { n: 1 }), space.set("bad", { n: 2 }), space.set("after", { n: 3 })]);
    expect(results.map((r) => r.status)).toEqual(["fulfilled", "rejected", "fulfilled"]);
    expect((results[1] as PromiseRejectedResult).reason.message).toBe(`store write of t:bad failed on redis:127.0.0.1:${server.port}/0: ERR refused by test`);
    expect(server.keys()).toEqual(["t::before", "t::after"]);
  });

  it("reconnect: connections dropped mid-stream — writes in flight, issued during the outage and after it all land, in issue order; nothing crashes; the log says so without the password", async () => {
    const server = await fake({ requirepass: PASSWORD });
    const { log, lines } = capturingLog();
    const kv = await open(server.url({ password: PASSWORD }), log);
    const space = kv.space<{ n: number }>("t");
    const writes: Array<Promise<void>> = [];
    // Acknowledged before the cut.
    for (let i = 0; i < 50; i++) writes.push(space.set("counter", { n: i }));
    await Promise.all(writes);
    // In flight when the connection drops: sent, never applied, never answered.
    server.stall = "swallow";
    for (let i = 50; i < 100; i++) writes.push(i % 7 === 0 ? space.delete("counter") : space.set("counter", { n: i }));
    writes.push(space.set("entry", { n: 1 }), space.set("outbox", { n: 1 }));
    await vi.waitFor(() => expect(server.commands.filter(([, key]) => key === "t::outbox")).toHaveLength(1), { timeout: 10_000 });
    await outage(server);
    // Issued while the server is down: they wait.
    for (let i = 100; i < 150; i++) writes.push(i % 5 === 0 ? space.delete("counter") : space.set("counter", { n: i }));
    writes.push(space.set("entry", { n: 2 }), space.set("outbox", { n: 2 }), space.delete("gone"), space.set("last", { n: 149 }));
    server.refuseConnections = false;
    await Promise.all(writes);
    // What the server got after the reconnect came in issue order (entry before its outbox record).
    const applied = server.commands.filter(([name, key]) => (name === "SET" || name === "DEL") && key !== "t::counter");
    expect(applied.slice(-6).map(([name, key, value]) => `${name} ${key}${value ? ` ${value}` : ""}`)).toEqual([
      'SET t::entry {"value":{"n":1}}',
      'SET t::outbox {"value":{"n":1}}',
      'SET t::entry {"value":{"n":2}}',
      'SET t::outbox {"value":{"n":2}}',
      "DEL t::gone",
      'SET t::last {"value":{"n":149}}',
    ]);
    // Issued after the reconnect.
    await space.set("after", { n: 1 });
    expect(await space.get("counter")).toEqual({ n: 149 });
    expect(new Map(await space.entries())).toEqual(new Map([["counter", { n: 149 }], ["entry", { n: 2 }], ["outbox", { n: 2 }], ["last", { n: 149 }], ["after", { n: 1 }]]));
    const logged = lines.join("");
    expect(logged).toContain("store connection lost; reconnecting");
    expect(logged).toContain("store reconnected");
    expect(logged).not.toContain(PASSWORD);
    expect(logged).not.toContain(encodeURIComponent(PASSWORD));
  });

  it("reconnect: writes Redis applied but whose replies were lost are sent again after the reconnect and resolve; the state is the issue-order one", async () => {
    const server = await fake();
    const kv = await open(server.url());
    const space = kv.space<{ n: number }>("t");
    server.stall = "apply-without-reply";
    const writes = [space.set("a", { n: 1 }), space.delete("a"), space.set("b", { n: 1 }), space.set("a", { n: 2 })];
    await vi.waitFor(() => expect(server.value("t::a")).toBe('{"value":{"n":2}}'), { timeout: 10_000 });
    const before = server.accepted;
    server.dropConnections();
    await Promise.all(writes);
    expect(server.accepted).toBeGreaterThan(before);
    expect(new Map(await space.entries())).toEqual(new Map([["a", { n: 2 }], ["b", { n: 1 }]]));
  });

  it("close() while Redis is unreachable fails the waiting writes with a clear error instead of hanging, and a read meanwhile fails naming the store", async () => {
    const server = await fake();
    const kv = await openKvStore(server.url(), os.tmpdir());
    const space = kv.space<{ n: number }>("t");
    await space.set("a", { n: 1 });
    await outage(server);
    await expect(space.get("a")).rejects.toThrow(`store read of t:a failed on redis:127.0.0.1:${server.port}/0: The client is offline`);
    const waiting = space.set("b", { n: 2 });
    await kv.close();
    await expect(waiting).rejects.toThrow(`store closed while redis:127.0.0.1:${server.port}/0 was unreachable: write of t:b may not have been applied`);
    await expect(space.set("c", { n: 3 })).rejects.toThrow("store is closed: write of t:c refused");
    expect(server.keys()).toEqual(["t::a"]);
  });
});
