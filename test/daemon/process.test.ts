import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { GatewayClient } from "../../src/gateway/client.js";
import { FakeModelServer } from "../fakes/model-server.js";

const children: ChildProcess[] = [];
const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const c of children.splice(0)) if (c.exitCode === null) c.kill("SIGKILL");
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function freePort(): Promise<number> {
  const srv = net.createServer().listen(0, "127.0.0.1");
  await new Promise((r) => srv.once("listening", r));
  const port = (srv.address() as net.AddressInfo).port;
  await new Promise((r) => srv.close(r));
  return port;
}

async function setup() {
  const dir = mkdtempSync(path.join(os.tmpdir(), "sb-proc-"));
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
  const model = new FakeModelServer();
  const baseUrl = await model.start();
  cleanups.push(() => model.stop());
  const port = await freePort();
  const config = path.join(dir, "config.json5");
  writeFileSync(config, JSON.stringify({ stateDir: path.join(dir, "data"), log: { level: "info" }, gateway: { port }, models: { providers: { fake: { baseUrl, models: [{ id: "m" }] } } }, agents: { defaults: { model: "fake/m" } } }));
  return { dir, config, port, model };
}

function start(config: string): { child: ChildProcess; output: () => string; listening: Promise<void> } {
  const child = spawn(process.execPath, ["src/bin.js", "start", "--config", config], { stdio: ["ignore", "pipe", "pipe"] });
  children.push(child);
  let out = "";
  const listening = new Promise<void>((resolve, reject) => {
    const onData = (d: Buffer) => {
      out += d.toString();
      if (out.includes("switchboard listening")) resolve();
    };
    child.stdout?.on("data", onData);
    child.stderr?.on("data", onData);
    child.once("exit", (code) => reject(new Error(`daemon exited early (${code}): ${out}`)));
  });
  return { child, output: () => out, listening };
}

const exited = (child: ChildProcess) => new Promise<number | null>((r) => (child.exitCode !== null ? r(child.exitCode) : child.once("exit", (code) => r(code))));

describe("the daemon process", () => {
  it("SIGTERM drains and exits 0", async () => {
    const { config } = await setup();
    const d = start(config);
    await d.listening;
    d.child.kill("SIGTERM");
    expect(await exited(d.child)).toBe(0);
    expect(d.output()).toMatch(/stopped/);
  });

  it("kill -9 and restart lose no session and no transcript line", async () => {
    const { config, port, dir } = await setup();
    const first = start(config);
    await first.listening;
    const client = new GatewayClient({ url: `ws://127.0.0.1:${port}/` });
    await client.connect();
    for (let i = 0; i < 5; i++) {
      await client.request("agent", { sessionKey: `agent:main:telegram:group:-${i}`, message: `msg ${i}`, idempotencyKey: `k${i}` }, { expectFinal: true });
    }
    await client.request("sessions.patch", { key: "agent:main:telegram:group:-1", sendPolicy: "deny" });
    const before = await client.request("sessions.list", {});
    client.close();
    first.child.kill("SIGKILL");
    await exited(first.child);

    const second = start(config);
    await second.listening;
    const again = new GatewayClient({ url: `ws://127.0.0.1:${port}/` });
    await again.connect();
    const after = await again.request("sessions.list", {});
    expect(after.sessions).toEqual(before.sessions);
    for (let i = 0; i < 5; i++) {
      const h = await again.request("chat.history", { sessionKey: `agent:main:telegram:group:-${i}` });
      expect(h.messages.map((m: any) => m.role)).toEqual(["user", "assistant"]);
    }
    again.close();
    const transcripts = path.join(dir, "data", "agents", "main", "sessions");
    for (const f of readdirSync(transcripts)) {
      for (const line of readFileSync(path.join(transcripts, f), "utf8").trim().split("\n")) expect(() => JSON.parse(line)).not.toThrow();
    }
    second.child.kill("SIGTERM");
    expect(await exited(second.child)).toBe(0);
  });
});
