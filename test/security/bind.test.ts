/**
 * Binding the gateway beyond loopback without a token would hand the agents (and every chat
 * they can reach) to the network: the daemon refuses to start — checked on the real CLI
 * process as an operator would run it, and on the check itself for every kind of address.
 */
import { mkdtempSync, rmSync } from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { parseConfig } from "../../src/config/load.js";
import { assertSafeBind } from "../../src/daemon.js";
import { spawnDaemon, writeConfig } from "../helpers/daemon-process.js";

const dir = mkdtempSync(path.join(os.tmpdir(), "sb-bind-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const config = (gateway: Record<string, unknown>, env: NodeJS.ProcessEnv = {}) => parseConfig({ stateDir: dir, gateway: { port: 0, ...gateway } }, "<bind test>", env);

describe("non-loopback bind", () => {
  it.each(["0.0.0.0", "::", "192.168.1.20", "10.0.0.1", "example.com", "::ffff:127.0.0.1", "127.0.0.1.nip.io"])("security: bind %s without a token is refused", (bind) => {
    expect(() => assertSafeBind(config({ bind }))).toThrow(/refusing to bind the gateway to .* without a token/);
  });

  it("security: an empty token or one from an unset ${ENV} reference counts as no token", () => {
    expect(() => assertSafeBind(config({ bind: "0.0.0.0", auth: { token: "" } }))).toThrow(/without a token/);
    expect(() => assertSafeBind(config({ bind: "0.0.0.0", auth: { token: "${SB_TEST_UNSET_TOKEN}" } }))).toThrow(/without a token/);
    expect(() => assertSafeBind(config({ bind: "0.0.0.0" }, { SWITCHBOARD_GATEWAY_TOKEN: "" }))).toThrow(/without a token/);
  });

  it("security: a token of only whitespace (a blank line in an env file) counts as no token", () => {
    expect(() => assertSafeBind(config({ bind: "0.0.0.0", auth: { token: " \t\n" } }))).toThrow(/without a token/);
    expect(() => assertSafeBind(config({ bind: "0.0.0.0", auth: { token: "${SB_TEST_BLANK_TOKEN}" } }, { SB_TEST_BLANK_TOKEN: "  " }))).toThrow(/without a token/);
    expect(() => assertSafeBind(config({ bind: "0.0.0.0" }, { SWITCHBOARD_GATEWAY_TOKEN: "\n" }))).toThrow(/without a token/);
  });

  it.each(["127.0.0.1", "127.0.0.2", "localhost", "::1"])("security: loopback %s needs no token", (bind) => {
    expect(() => assertSafeBind(config({ bind }))).not.toThrow();
  });

  it("security: a non-loopback bind with a token (config or SWITCHBOARD_GATEWAY_TOKEN) is allowed", () => {
    expect(() => assertSafeBind(config({ bind: "0.0.0.0", auth: { token: "t0ken-value" } }))).not.toThrow();
    expect(() => assertSafeBind(config({ bind: "0.0.0.0" }, { SWITCHBOARD_GATEWAY_TOKEN: "from-env" }))).not.toThrow();
  });

  it("security: `switchboard start` bound to 0.0.0.0 without a token exits non-zero, says why, and never listens", async () => {
    // A known port, probed over TCP for the daemon's whole life: a daemon that listened even
    // briefly before refusing (the check run after listen) accepts a probe; a log line would not
    // tell, since such a daemon need not print one.
    const port = await freePort();
    const file = writeConfig(dir, { stateDir: path.join(dir, "data"), log: { level: "info" }, gateway: { bind: "0.0.0.0", port } }, "open.json5");
    const daemon = spawnDaemon(file, { env: { SWITCHBOARD_GATEWAY_TOKEN: "" } });
    daemon.listening.catch(() => undefined);
    let alive = true;
    const exited = daemon.exited.then((exit) => ((alive = false), exit));
    const deadline = Date.now() + 15_000;
    let probes = 0;
    let accepted = 0;
    while (alive && Date.now() < deadline) {
      probes++;
      if (await accepts(port)) accepted++;
      await new Promise((resolve) => setTimeout(resolve, 2));
    }
    if (alive) daemon.kill("SIGKILL");
    const exit = await exited;
    expect(accepted, `connections accepted on 0.0.0.0:${port} (of ${probes} probes); output:\n${daemon.output()}`).toBe(0);
    expect(probes, "probes made while the daemon ran").toBeGreaterThan(0);
    expect(exit.code, `exit code; output:\n${daemon.output()}`).not.toBe(0);
    expect(exit.signal, "killed because it never exited on its own").toBeNull();
    expect(daemon.output()).toMatch(/refusing to bind the gateway to 0\.0\.0\.0 without a token/);
    expect(daemon.output()).not.toMatch(/switchboard listening/);
  }, 20_000);

  it("security: the same config with a token starts and listens (the control case)", async () => {
    const file = writeConfig(dir, { stateDir: path.join(dir, "data2"), log: { level: "info" }, gateway: { bind: "0.0.0.0", port: 0, auth: { token: "bind-test-token-123" } } }, "closed.json5");
    const daemon = spawnDaemon(file);
    await daemon.listening;
    daemon.kill("SIGTERM");
    expect((await daemon.exited).code).toBe(0);
  }, 20_000);
});

/** A port nothing listens on right now (the OS picks it, then it is released). */
function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address() as net.AddressInfo;
      server.close(() => resolve(port));
    });
  });
}

/** Whether a TCP connection to 127.0.0.1:port is accepted (0.0.0.0 includes loopback). */
function accepts(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect({ host: "127.0.0.1", port });
    socket.setTimeout(1000);
    const done = (ok: boolean) => {
      socket.destroy();
      resolve(ok);
    };
    socket.once("connect", () => done(true));
    socket.once("error", () => done(false));
    socket.once("timeout", () => done(false));
  });
}
