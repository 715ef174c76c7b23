/**
 * Binding the gateway beyond loopback without a token would hand the agents (and every chat
 * they can reach) to the network: the daemon refuses to start — checked on the real CLI
 * process as an operator would run it, and on the check itself for every kind of address.
 */
import { mkdtempSync, rmSync } from "node:fs";
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

  it.each(["127.0.0.1", "127.0.0.2", "localhost", "::1"])("security: loopback %s needs no token", (bind) => {
    expect(() => assertSafeBind(config({ bind }))).not.toThrow();
  });

  it("security: a non-loopback bind with a token (config or SWITCHBOARD_GATEWAY_TOKEN) is allowed", () => {
    expect(() => assertSafeBind(config({ bind: "0.0.0.0", auth: { token: "t0ken-value" } }))).not.toThrow();
    expect(() => assertSafeBind(config({ bind: "0.0.0.0" }, { SWITCHBOARD_GATEWAY_TOKEN: "from-env" }))).not.toThrow();
  });

  it("security: `switchboard start` bound to 0.0.0.0 without a token exits non-zero, says why, and never listens", async () => {
    const file = writeConfig(dir, { stateDir: path.join(dir, "data"), log: { level: "info" }, gateway: { bind: "0.0.0.0", port: 0 } }, "open.json5");
    const daemon = spawnDaemon(file, { env: { SWITCHBOARD_GATEWAY_TOKEN: "" } });
    // Whichever comes first: a daemon that listens fails here at once instead of running on
    // until the test times out.
    const first = await Promise.race([
      daemon.listening.then(
        ({ port }) => ({ listening: true as const, port }),
        () => daemon.exited.then((exit) => ({ listening: false as const, ...exit })),
      ),
      daemon.exited.then((exit) => ({ listening: false as const, ...exit })),
    ]);
    if (first.listening) {
      daemon.kill("SIGKILL");
      await daemon.exited;
      expect.fail(`the daemon listened on 0.0.0.0:${first.port} without a token instead of refusing to start; output:\n${daemon.output()}`);
    }
    expect(first.code, `exit code; output:\n${daemon.output()}`).not.toBe(0);
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
