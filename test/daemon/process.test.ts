import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { GatewayClient } from "../../src/gateway/client.js";
import { FakeModelServer } from "../fakes/model-server.js";
import { spawnDaemon, writeConfig, type DaemonProcess } from "../helpers/daemon-process.js";

const daemons: DaemonProcess[] = [];
const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const d of daemons.splice(0)) d.kill("SIGKILL");
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** A config on a temp state dir with the fake model; port 0, so each start logs its own port. */
async function setup() {
  const dir = mkdtempSync(path.join(os.tmpdir(), "sb-proc-"));
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
  const model = new FakeModelServer();
  const baseUrl = await model.start();
  cleanups.push(() => model.stop());
  const config = writeConfig(dir, { stateDir: path.join(dir, "data"), log: { level: "info" }, gateway: { port: 0 }, models: { providers: { fake: { baseUrl, models: [{ id: "m" }] } } }, agents: { defaults: { model: "fake/m" } } });
  return { dir, config };
}

async function start(config: string): Promise<{ daemon: DaemonProcess; client: GatewayClient }> {
  const daemon = spawnDaemon(config);
  daemons.push(daemon);
  const { port } = await daemon.listening;
  const client = new GatewayClient({ url: `ws://127.0.0.1:${port}/` });
  await client.connect();
  cleanups.push(() => client.close());
  return { daemon, client };
}

describe("the daemon process", () => {
  it("SIGTERM drains and exits 0", async () => {
    const { config } = await setup();
    const { daemon } = await start(config);
    daemon.kill("SIGTERM");
    expect((await daemon.exited).code).toBe(0);
    expect(daemon.output()).toMatch(/stopped/);
  });

  it("kill -9 and restart lose no session and no transcript line", async () => {
    const { config, dir } = await setup();
    const first = await start(config);
    for (let i = 0; i < 5; i++) {
      await first.client.request("agent", { sessionKey: `agent:main:telegram:group:-${i}`, message: `msg ${i}`, idempotencyKey: `k${i}` }, { expectFinal: true });
    }
    await first.client.request("sessions.patch", { key: "agent:main:telegram:group:-1", sendPolicy: "deny" });
    const before = await first.client.request("sessions.list", {});
    first.daemon.kill("SIGKILL");
    await first.daemon.exited;

    const second = await start(config);
    expect((await second.client.request("sessions.list", {})).sessions).toEqual(before.sessions);
    for (let i = 0; i < 5; i++) {
      const h = await second.client.request("chat.history", { sessionKey: `agent:main:telegram:group:-${i}` });
      expect(h.messages.map((m: { role: string }) => m.role)).toEqual(["user", "assistant"]);
    }
    const transcripts = path.join(dir, "data", "agents", "main", "sessions");
    for (const f of readdirSync(transcripts)) {
      for (const line of readFileSync(path.join(transcripts, f), "utf8").trim().split("\n")) expect(() => JSON.parse(line)).not.toThrow();
    }
    second.daemon.kill("SIGTERM");
    expect((await second.daemon.exited).code).toBe(0);
  });

  it("a second daemon on a port already in use exits 1 with one line naming the port and what to do", async () => {
    const { config, dir } = await setup();
    const { port } = await (await start(config)).daemon.listening;
    const second = spawnDaemon(writeConfig(dir, { stateDir: path.join(dir, "data2"), gateway: { port } }, "second.json5"));
    daemons.push(second);
    expect((await second.exited).code).toBe(1);
    const fatal = second.output().split("\n").find((l) => l.includes("daemon failed to start"));
    expect(JSON.parse(fatal ?? "{}").err).toBe(`127.0.0.1:${port} is already in use — is another switchboard already running? Stop it, or choose another port with gateway.port in your config (--config)`);
  });

  it("start --state-dir keeps the state there instead of the config's stateDir", async () => {
    const { config, dir } = await setup();
    const daemon = spawnDaemon(config, { args: ["--state-dir", path.join(dir, "elsewhere")] });
    daemons.push(daemon);
    await daemon.listening;
    expect(existsSync(path.join(dir, "elsewhere", "switchboard.sqlite"))).toBe(true);
    expect(existsSync(path.join(dir, "data"))).toBe(false);
    daemon.kill("SIGTERM");
    expect((await daemon.exited).code).toBe(0);
  });
  it("a second daemon on the same state dir exits 1 naming the first's pid; a SIGKILLed holder leaves no stale lock", async () => {
    const { config, dir } = await setup();
    const first = await start(config);
    // Another port, same state: only the state lock can stop it from resuming the first's work.
    const second = spawnDaemon(writeConfig(dir, { stateDir: path.join(dir, "data"), gateway: { port: 0 } }, "second.json5"));
    daemons.push(second);
    expect((await second.exited).code).toBe(1);
    const fatal = second.output().split("\n").find((l) => l.includes("daemon failed to start"));
    expect(JSON.parse(fatal ?? "{}").err).toBe(
      `state directory ${path.join(dir, "data")} is in use by another switchboard (pid ${first.daemon.pid}): stop that one first, or give this one its own state with --state-dir or SWITCHBOARD_STATE_DIR`,
    );
    expect(second.output()).not.toMatch(/switchboard listening/);
    expect((await first.client.request("sessions.list", {})).sessions).toEqual([]);

    first.daemon.kill("SIGKILL");
    await first.daemon.exited;
    const third = await start(config);
    expect((await third.client.request("sessions.list", {})).sessions).toEqual([]);
  });
});
