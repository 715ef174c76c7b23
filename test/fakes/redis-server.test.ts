import { createClient } from "@keyv/redis";
import { afterEach, describe, expect, it, vi } from "vitest";
import { FakeRedisServer } from "./redis-server.js";

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function connected(server: FakeRedisServer, opts: { RESP?: 2 | 3; password?: string; db?: number } = {}) {
  const client = createClient({ url: server.url({ password: opts.password, db: opts.db }), ...(opts.RESP ? { RESP: opts.RESP } : {}) });
  client.on("error", () => undefined);
  await client.connect();
  cleanups.push(() => client.destroy());
  return client;
}

describe("FakeRedisServer with the real node-redis client", () => {
  it.each([
    ["the client's default (RESP2)", undefined, ["AUTH", "pw"]],
    ["RESP2 asked with HELLO 2", 2, ["HELLO", "2", "AUTH", "default", "pw"]],
    ["RESP3", 3, ["HELLO", "3", "AUTH", "default", "pw"]],
  ] as const)("%s: logs in, answers GET/SET/MGET/EXISTS/UNLINK/PING with real reply types, nulls included", async (_label, RESP, login) => {
    const server = new FakeRedisServer({ requirepass: "pw" });
    await server.start();
    cleanups.push(() => server.stop());
    const client = await connected(server, { RESP, password: "pw", db: 1 });
    expect(server.commands[0]).toEqual(login);
    expect(await client.set("k", "v")).toBe("OK");
    expect(await client.get("k")).toBe("v");
    expect(await client.get("missing")).toBeNull();
    expect(await client.mGet(["k", "missing"])).toEqual(["v", null]);
    expect(await client.exists(["k", "missing"])).toBe(1);
    expect(await client.unlink("k")).toBe(1);
    expect(await client.ping()).toBe("PONG");
    expect(server.keys(1)).toEqual([]);
  });

  it("the keyspace outlives connections: a value set by one client is read by the next after every connection was dropped", async () => {
    const server = new FakeRedisServer();
    await server.start();
    cleanups.push(() => server.stop());
    const first = await connected(server, { db: 2 });
    await first.set("k", "kept");
    server.dropConnections();
    const second = await connected(server, { db: 2 });
    expect(await second.get("k")).toBe("kept");
  });

  it("an unknown command is an ERR reply naming it (a missing command is visible, not a hang)", async () => {
    const server = new FakeRedisServer();
    await server.start();
    cleanups.push(() => server.stop());
    const client = await connected(server);
    await expect(client.sendCommand(["FLUSHALL"])).rejects.toThrow("ERR unknown command 'FLUSHALL', with args beginning with: ");
    await expect(client.sendCommand(["KEYS", "*"])).rejects.toThrow("ERR unknown command 'KEYS', with args beginning with: '*' ");
  });

  it("SET PX expires the key; SET NX does not overwrite", async () => {
    const server = new FakeRedisServer();
    await server.start();
    cleanups.push(() => server.stop());
    const client = await connected(server);
    expect(await client.set("n", "1", { NX: true })).toBe("OK");
    expect(await client.set("n", "2", { NX: true })).toBeNull();
    expect(await client.get("n")).toBe("1");
    await client.set("t", "x", { expiration: { type: "PX", value: 1 } });
    await vi.waitFor(async () => expect(await client.get("t")).toBeNull(), { timeout: 5_000 });
  });
});
