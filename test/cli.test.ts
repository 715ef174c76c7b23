import { execFile } from "node:child_process";
import net from "node:net";
import path from "node:path";
import { promisify } from "node:util";
import { afterEach, describe, expect, it, vi } from "vitest";
import { PlatformError, type ChannelHealth } from "../src/channels/types.js";
import { MAX_RESUMES } from "../src/inbound/router.js";
import { inbound, startHarness, type Harness } from "./helpers/harness.js";
import { stateDirWithPending } from "./helpers/inbound-store.js";
import { RecordingAdapter } from "./helpers/recording-adapter.js";

const run = promisify(execFile);
const BIN = path.resolve("src/bin.js");
let h: Harness | undefined;
afterEach(async () => h?.stop());

describe("CLI gateway clients", () => {
  it("sessions send / list / history / patch and status talk to a running daemon", async () => {
    h = await startHarness({ config: { gateway: { auth: { token: "cli-token-123456" } } } });
    const common = ["--url", h.url, "--token", "cli-token-123456"];
    const sent = await run("node", [BIN, "sessions", "send", "main", "hello cli", ...common]);
    expect(sent.stdout.trim()).toBe("echo: hello cli");
    const list = JSON.parse((await run("node", [BIN, "sessions", "list", "--json", ...common])).stdout);
    expect(list.sessions.map((s: { key: string }) => s.key)).toEqual(["agent:main:main"]);
    const history = await run("node", [BIN, "sessions", "history", "main", ...common]);
    expect(history.stdout).toBe("user: hello cli\nassistant: echo: hello cli\n");
    const patched = await run("node", [BIN, "sessions", "patch", "main", "--send-policy", "deny", ...common]);
    expect(patched.stdout.trim()).toBe("agent:main:main: sendPolicy=deny");
    const status = await run("node", [BIN, "status", ...common]);
    expect(status.stdout).toMatch(/runs: 0 running, 0 queued; inbound: 0 pending; outbox: 0 pending/);
    const refused = await run("node", [BIN, "status", "--url", h.url, "--token", "wrong"]).catch((e) => e);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(/invalid gateway token/);
  });

  it("status tells of inbound messages given up (a poison message), not only the count pending", async () => {
    const stateDir = await stateDirWithPending([{ msg: inbound({ text: "poison" }), resumes: MAX_RESUMES }]);
    h = await startHarness({ stateDir, adapters: [new RecordingAdapter("telegram")], config: { gateway: { auth: { token: "cli-token-123456" } } } });
    await vi.waitFor(() => expect(h?.app.router.counts.givenUp).toBe(1));
    const status = await run("node", [BIN, "status", "--url", h.url, "--token", "cli-token-123456"]);
    expect(status.stdout).toMatch(/inbound: 0 pending \(1 given up after failing at every start, see the log\); outbox: \d+ pending/);
  });

  it("status tells of deliveries that failed since start, not only the count pending", async () => {
    h = await startHarness({ config: { gateway: { auth: { token: "cli-token-123456" } } } });
    // No Discord adapter runs here: the delivery fails at once ("channel not connected").
    const { done } = await h.app.outbox.enqueue({ id: "to-nowhere", target: { channel: "discord", accountId: "default", to: "1" }, text: "hello", kind: "send" });
    expect(await done).toMatchObject({ status: "failed" });
    const status = await run("node", [BIN, "status", "--url", h.url, "--token", "cli-token-123456"]);
    expect(status.stdout).toMatch(/outbox: 0 pending \(1 failed since start, see the log\)/);
  });

  it("status tells of replies that may not have arrived (cut off after they reached the platform), not sent again", async () => {
    const telegram = new RecordingAdapter("telegram");
    h = await startHarness({ adapters: [telegram], config: { gateway: { auth: { token: "cli-token-123456" } } } });
    telegram.failures.push(new PlatformError("telegram", "transport", "socket hang up", { outcomeUnknown: true }));
    const { done } = await h.app.outbox.enqueue({ id: "in-doubt", target: { channel: "telegram", accountId: "default", to: "1" }, text: "hello", kind: "send" });
    expect(await done).toMatchObject({ status: "sent", unknownChunks: [0] });
    const status = await run("node", [BIN, "status", "--url", h.url, "--token", "cli-token-123456"]);
    expect(status.stdout).toMatch(/outbox: 0 pending \(1 possibly not delivered, not sent again to avoid a duplicate, see the log\)/);
  });

  it("status says a channel that failed to start is disconnected, with its error; the daemon runs on without it", async () => {
    class DownAdapter extends RecordingAdapter {
      override async start(): Promise<void> {
        throw new Error("401: Unauthorized");
      }
      override health(): ChannelHealth {
        return { connected: false, lastInboundAt: null, lastError: "401: Unauthorized" };
      }
    }
    h = await startHarness({
      config: { gateway: { auth: { token: "cli-token-123456" } }, channels: { webchat: { enabled: true }, telegram: { enabled: true, botToken: "123:abc" } } },
      adapterFactories: { telegram: async () => new DownAdapter("telegram") },
    });
    const status = await run("node", [BIN, "status", "--url", h.url, "--token", "cli-token-123456"]);
    expect(status.stdout).toMatch(/^telegram:default: disconnected, last error: 401: Unauthorized$/m);
    expect(status.stdout).toMatch(/^webchat:default: connected$/m);
  });

  it("client commands take the token from SWITCHBOARD_GATEWAY_TOKEN when --token is not given", async () => {
    h = await startHarness({ config: { gateway: { auth: { token: "cli-token-123456" } } } });
    const status = await run("node", [BIN, "status", "--url", h.url], { env: { ...process.env, SWITCHBOARD_GATEWAY_TOKEN: "cli-token-123456" } });
    expect(status.stdout).toMatch(/^switchboard /);
  });

  it("with no daemon listening, client commands exit 1 with one line saying so and what to do", async () => {
    // A port that was free a moment ago and has nothing listening now.
    const server = net.createServer();
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const { port } = server.address() as net.AddressInfo;
    await new Promise((resolve) => server.close(resolve));
    const url = `ws://127.0.0.1:${port}/`;
    for (const args of [["status"], ["sessions", "list"]]) {
      const failed = await run("node", [BIN, ...args, "--url", url]).catch((e) => e);
      expect(failed.code).toBe(1);
      expect(failed.stderr).toBe(`error: cannot reach the daemon at ${url} (connection refused): is it running? Start it with \`npx switchboard start\` (or \`npm start\`); if it listens elsewhere (gateway.port), pass --url or set SWITCHBOARD_URL\n`);
    }
  });

  it("a daemon with a gateway token, asked without one, says how to pass it", async () => {
    h = await startHarness({ config: { gateway: { auth: { token: "cli-token-123456" } } } });
    const { SWITCHBOARD_GATEWAY_TOKEN: _unset, ...env } = process.env;
    const refused = await run("node", [BIN, "status", "--url", h.url], { env }).catch((e) => e);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toBe("error: gateway token required (auth.token): pass the daemon's gateway token with --token or SWITCHBOARD_GATEWAY_TOKEN\n");
  });

  it.each([
    [["sessions", "list", "--limit", "abc"], "error: option '--limit <n>' argument 'abc' is invalid. expected a whole number of at least 1\n"],
    [["sessions", "history", "main", "--limit", "0"], "error: option '--limit <n>' argument '0' is invalid. expected a whole number of at least 1\n"],
    [["sessions", "patch", "main", "--send-policy", "off"], "error: option '--send-policy <mode>' argument 'off' is invalid. Allowed choices are allow, deny, inherit.\n"],
  ])("interfaces §1 %j is refused by the CLI itself, naming the option and what it takes (exit 1)", async (args, message) => {
    // Nothing listens there: the refusal comes before any connection.
    const failed = await run("node", [BIN, ...args, "--url", "ws://127.0.0.1:9/"]).catch((e) => e);
    expect(failed.code).toBe(1);
    expect(failed.stderr).toBe(message);
  });

  it("R27 sessions patch --send-policy inherit clears the session's override", async () => {
    h = await startHarness({ config: { gateway: { auth: { token: "cli-token-123456" } } } });
    await h.app.sessions.upsert("agent:main:main", "main", { sendPolicy: "deny" });
    const patched = await run("node", [BIN, "sessions", "patch", "main", "--send-policy", "inherit", "--url", h.url, "--token", "cli-token-123456"]);
    expect(patched.stdout.trim()).toBe("agent:main:main: sendPolicy=inherit");
    expect(h.app.sessions.get("agent:main:main")?.sendPolicy).toBeUndefined();
  });
});
