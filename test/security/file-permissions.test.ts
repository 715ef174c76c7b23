/**
 * What the daemon writes — every transcript, the session store, the send journal — is the owner's
 * conversations, and on a shared workstation or server other local users must not read it. The
 * daemon runs as operators run it (`switchboard start`, a child process that inherits the usual
 * umask 022 of this test's process), writes its state through the gateway, and then every file
 * and directory it created is checked: none readable, writable or listable by group or others.
 */
import { lstatSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { GatewayClient } from "../../src/gateway/client.js";
import { FakeModelServer } from "../fakes/model-server.js";
import { spawnDaemon, writeConfig } from "../helpers/daemon-process.js";

const cleanups: Array<() => Promise<void> | void> = [];
afterAll(async () => {
  for (const fn of cleanups.splice(0).reverse()) await fn();
});

/** Every path under `dir` (itself included) whose mode lets group or others in, with that mode. */
function openToOthers(dir: string): string[] {
  const out: string[] = [];
  const visit = (p: string) => {
    const st = lstatSync(p);
    if (st.mode & 0o077) out.push(`${path.relative(dir, p) || "."} ${(st.mode & 0o777).toString(8)}`);
    if (st.isDirectory()) for (const name of readdirSync(p)) visit(path.join(p, name));
  };
  visit(dir);
  return out;
}

describe("state files on disk", () => {
  it("security: the state directory and every file the daemon writes there are its user's alone (0700 / 0600)", async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), "sb-perms-"));
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    const model = new FakeModelServer();
    const baseUrl = await model.start();
    cleanups.push(() => model.stop());
    const stateDir = path.join(dir, "data");
    const config = writeConfig(dir, { stateDir, log: { level: "info" }, gateway: { port: 0 }, models: { providers: { fake: { baseUrl, models: [{ id: "m" }] } } }, agents: { defaults: { model: "fake/m" } } });
    // Started under the usual umask 022 whatever this test's environment has, or a daemon that
    // relied on a strict inherited umask would pass here and write world-readable files elsewhere.
    const umask = process.umask(0o022);
    const daemon = spawnDaemon(config);
    process.umask(umask);
    cleanups.push(() => daemon.kill("SIGKILL"));
    const { port } = await daemon.listening;

    const client = new GatewayClient({ url: `ws://127.0.0.1:${port}/` });
    await client.connect();
    cleanups.push(() => client.close());
    // A conversation (entry, transcript) and a delivery (outbox record, send journal line).
    const reply = await client.request("agent", { sessionKey: "agent:main:telegram:group:-42", message: "private words", idempotencyKey: "perm-1" }, { expectFinal: true });
    expect(reply.result.reply).toBe("echo: private words");
    expect(await client.request("send", { channel: "webchat", to: "main", message: "delivered words", idempotencyKey: "perm-2" })).toMatchObject({ status: "sent" });
    const history = await client.request("chat.history", { sessionKey: "agent:main:telegram:group:-42" });
    expect(history.messages.length).toBeGreaterThan(0);
    client.close();
    daemon.kill("SIGTERM");
    expect((await daemon.exited).code).toBe(0);

    const written = readdirSync(stateDir, { recursive: true }).map(String);
    // The files whose contents matter were written (so the check below looked at them).
    expect(written).toEqual(expect.arrayContaining(["switchboard.sqlite", "outbox-journal.jsonl", expect.stringMatching(/^agents\/main\/sessions\/.+\.jsonl$/)]));
    expect(openToOthers(stateDir)).toEqual([]);
  }, 60_000);
});
