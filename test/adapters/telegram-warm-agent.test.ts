/**
 * The Telegram send agent (adapters/telegram/warm-agent.ts): after prepare(), a request must find a
 * connected socket, so its bytes are written without waiting for a connect — the property that
 * keeps the window between the outbox's journal line and Telegram receiving the send tiny.
 */
import http from "node:http";
import type { AddressInfo, Socket } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { createWarmAgent, type WarmAgent } from "../../adapters/telegram/warm-agent.js";
import { waitFor } from "../fakes/telegram-bot-api.js";

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function server(): Promise<{ root: string; connections: () => number; open: () => number; dropAll: () => void; port: number }> {
  let connections = 0;
  const open = new Set<Socket>();
  const srv = http.createServer((req, res) => {
    req.resume();
    req.on("end", () => res.end('{"ok":true,"result":{"message_id":1}}'));
  });
  srv.on("connection", (socket: Socket) => {
    connections++;
    open.add(socket);
    socket.once("close", () => open.delete(socket));
  });
  await new Promise<void>((resolve) => srv.listen(0, "127.0.0.1", resolve));
  cleanups.push(() => new Promise<void>((resolve) => {
    srv.closeAllConnections();
    srv.close(() => resolve());
  }));
  const port = (srv.address() as AddressInfo).port;
  return { root: `http://127.0.0.1:${port}/`, connections: () => connections, open: () => open.size, dropAll: () => open.forEach((s) => s.destroy()), port };
}

function agentFor(root: string): WarmAgent {
  const agent = createWarmAgent(root);
  cleanups.push(() => agent.destroy());
  return agent;
}

/** A POST like telegraf's; reports whether its socket was still connecting when assigned. */
function post(root: string, agent: http.Agent): { connecting: Promise<boolean>; done: Promise<string> } {
  let report!: (v: boolean) => void;
  const connecting = new Promise<boolean>((r) => (report = r));
  const done = new Promise<string>((resolve, reject) => {
    const req = http.request(new URL("botTOKEN/sendMessage", root), { method: "POST", agent, headers: { "content-type": "application/json" } }, (res) => {
      let body = "";
      res.setEncoding("utf8").on("data", (c: string) => (body += c)).on("end", () => resolve(body));
    });
    req.on("socket", (s: Socket) => report(s.connecting));
    req.on("error", reject);
    req.end('{"chat_id":1,"text":"hi"}');
  });
  return { connecting, done };
}

describe("telegram send agent — a prepared send never waits for a connection", () => {
  it("without prepare() a first request connects (the window this agent closes)", async () => {
    const { root } = await server();
    const { connecting, done } = post(root, agentFor(root));
    expect(await connecting).toBe(true);
    await done;
  });

  it("after prepare() the request's socket is already connected", async () => {
    const { root, connections } = await server();
    const agent = agentFor(root);
    await agent.prepare();
    const { connecting, done } = post(root, agent);
    expect(await connecting).toBe(false);
    expect(await done).toContain('"ok":true');
    expect(connections()).toBe(1);
  });

  it("as many connected sockets as prepared sends, all taken without connecting", async () => {
    const { root, connections } = await server();
    const agent = agentFor(root);
    await Promise.all(Array.from({ length: 5 }, () => agent.prepare()));
    const sends = Array.from({ length: 5 }, () => post(root, agent));
    expect(await Promise.all(sends.map((s) => s.connecting))).toEqual([false, false, false, false, false]);
    await Promise.all(sends.map((s) => s.done));
    expect(connections()).toBe(5);
  });

  it("prepares made one after another (a reply's chunks) each get their own connected socket", async () => {
    const { root, connections } = await server();
    const agent = agentFor(root);
    await agent.prepare();
    await agent.prepare();
    const sends = [post(root, agent), post(root, agent)];
    expect(await Promise.all(sends.map((s) => s.connecting))).toEqual([false, false]);
    await Promise.all(sends.map((s) => s.done));
    expect(connections()).toBe(2);
  });

  it("a kept-alive socket counts: prepare() after a finished request opens nothing new", async () => {
    const { root, connections } = await server();
    const agent = agentFor(root);
    await agent.prepare();
    await post(root, agent).done;
    await agent.prepare();
    const { connecting, done } = post(root, agent);
    expect(await connecting).toBe(false);
    await done;
    expect(connections()).toBe(1);
  });

  it("sends made one after another on a kept-alive socket never open a second connection", async () => {
    const { root, connections } = await server();
    const agent = agentFor(root);
    for (let i = 0; i < 3; i++) {
      await agent.prepare();
      await post(root, agent).done;
    }
    expect(connections()).toBe(1);
  });

  it("a spare the server closed before any send took it is not handed to a send", async () => {
    const { root, dropAll, open } = await server();
    const agent = agentFor(root);
    await agent.prepare();
    dropAll();
    await waitFor(() => open() === 0, 2000, "server side closed");
    // The client sees the close a moment after the server: let it.
    await new Promise((r) => setTimeout(r, 25));
    expect(await post(root, agent).done).toContain('"ok":true');
  });

  it("destroy() closes the spares no send took", async () => {
    const { root, open } = await server();
    const agent = createWarmAgent(root);
    await agent.prepare();
    await waitFor(() => open() === 1, 2000, "spare connected");
    agent.destroy();
    await waitFor(() => open() === 0, 2000, "spare closed");
  });

  it("an unreachable API: prepare() resolves (never rejects or hangs) and the send fails as usual", async () => {
    const { root, port } = await server();
    await cleanups.pop()?.();
    const agent = agentFor(`http://127.0.0.1:${port}/`);
    await expect(agent.prepare()).resolves.toBeUndefined();
    await expect(post(root, agent).done).rejects.toThrow(/ECONNREFUSED/);
  });
});
