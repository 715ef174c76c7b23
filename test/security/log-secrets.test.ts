/**
 * Secrets never reach the logs (nor the chat): the daemon runs as a child process, logging at
 * trace level, with a gateway token, a Telegram bot token, a model API key and a hooks token
 * configured, and is driven through the error paths that carry URLs and credentials — network
 * errors of telegraf (whose request URLs embed the bot token), Telegram API errors, a model
 * server that echoes the rejected key in its error, refused gateway and webhook logins, a
 * failing delivery — then everything it wrote to stdout/stderr, and the channels' health as the
 * gateway reports it, is searched for each secret. Most paths strip a secret before it is logged;
 * one (a token sent as the client's id) reaches the logger, whose scrubbing of the configured
 * secrets is its only guard here (the logger's backstops in detail: logger-redaction.test.ts).
 */
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { GatewayClient } from "../../src/gateway/client.js";
import { FakeModelServer } from "../fakes/model-server.js";
import { FakeTelegramBotApi, errors, groupChat, privateChat, waitFor, type FakeUser } from "../fakes/telegram-bot-api.js";
import { spawnDaemon, writeConfig } from "../helpers/daemon-process.js";
import { RawGateway } from "../helpers/raw-gateway.js";

const GATEWAY_TOKEN = "gwtok-9f8e7d6c5b4a3210";
const BOT_TOKEN = "987654321:AAH-secretBotToken_ZZ9x8w7v6u5t4s3r";
const API_KEY = "sk-live-secretModelKey-0123456789abcdef";
const HOOKS_TOKEN = "hooktok-1a2b3c4d5e6f7g8h";
const SECRETS = [GATEWAY_TOKEN, BOT_TOKEN, BOT_TOKEN.split(":")[1], API_KEY, HOOKS_TOKEN];
const WRONG_TOKEN = "wrong-token-5e4d3c2b1a";

/** Every run of `length` characters of `secret`. */
function pieces(secret: string, length: number): string[] {
  return Array.from({ length: secret.length - length + 1 }, (_, i) => secret.slice(i, i + length));
}

const cleanups: Array<() => Promise<void> | void> = [];
afterAll(async () => {
  for (const fn of cleanups.splice(0).reverse()) await fn();
});

describe("secrets in logs", () => {
  it("security: no token or key appears in the daemon's log output, across error paths that carry URLs and credentials", async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), "sb-secrets-"));
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    // The model server rejects the key and quotes it back, as OpenAI does.
    const model = new FakeModelServer(() => ({ status: 401, error: `Incorrect API key provided: ${API_KEY}. You can find your API key at https://platform.openai.com/account/api-keys.` }));
    const baseUrl = await model.start();
    cleanups.push(() => model.stop());
    const api = new FakeTelegramBotApi({ token: BOT_TOKEN });
    const apiRoot = await api.start();
    cleanups.push(() => api.stop());
    // telegraf's requests go to <apiRoot>/bot<token>/<method>: make them fail at the socket
    // (node-fetch errors quote the URL) and with API errors.
    api.failNext("getUpdates", { destroySocket: true }, 2);
    api.failNext("sendChatAction", errors.serverError, 5);
    api.failNext("sendMessage", errors.chatNotFound, 1);

    const config = writeConfig(dir, {
      stateDir: path.join(dir, "data"),
      log: { level: "trace" },
      gateway: { port: 0, auth: { token: GATEWAY_TOKEN } },
      hooks: { enabled: true, token: HOOKS_TOKEN },
      models: { providers: { fake: { baseUrl, apiKey: API_KEY, models: [{ id: "m" }] } } },
      agents: { defaults: { model: "fake/m" } },
      channels: { telegram: { enabled: true, botToken: BOT_TOKEN, apiRoot, requireMention: false, pollTimeoutSeconds: 1 } },
    });
    const daemon = spawnDaemon(config, { env: { SWITCHBOARD_GATEWAY_TOKEN: "" } });
    cleanups.push(() => daemon.kill("SIGKILL"));
    const { port } = await daemon.listening;

    // Inbound → run → the model refuses (its error quotes the key) → the error notices go out
    // through sendMessage: the first fails (chat not found), the second is delivered.
    const user: FakeUser = { id: 424242, is_bot: false, first_name: "Ada" };
    api.injectText({ chat: privateChat(user), from: user, text: "hello" });
    api.injectText({ chat: groupChat(-100_424_242, "G"), from: user, text: "hello group" });
    await waitFor(() => api.callsTo("sendMessage").length >= 2 && api.sent.length >= 1, 20_000, "replies attempted");

    // Refused gateway logins (no token, a wrong one), then an authenticated client whose call fails.
    for (const token of [undefined, WRONG_TOKEN, GATEWAY_TOKEN.slice(0, -1)]) {
      const gw = await RawGateway.open(`ws://127.0.0.1:${port}/`);
      expect((await gw.handshake(token)).ok).toBe(false);
      gw.close();
    }
    // A client that put the token in the wrong place, its client id: refused, and the refusal logs
    // that id — here only the logger's own scrubbing of configured secrets keeps the token out.
    const misplaced = await RawGateway.open(`ws://127.0.0.1:${port}/`);
    misplaced.send(JSON.stringify({ type: "req", id: "c", method: "connect", params: { minProtocol: 3, maxProtocol: 4, client: { id: GATEWAY_TOKEN, version: "1", platform: "p", mode: "m" } } }));
    expect((await misplaced.response("c", 5000)).ok).toBe(false);
    misplaced.close();
    const client = new GatewayClient({ url: `ws://127.0.0.1:${port}/`, token: GATEWAY_TOKEN });
    await client.connect();
    await expect(client.request("send", { channel: "discord", to: "1", message: "x", idempotencyKey: "k1" })).rejects.toThrow();
    await expect(client.request("agent", { message: "hi", idempotencyKey: "k2" }, { expectFinal: true })).rejects.toThrow(/401/);
    // Channel health (lastError is shown by `switchboard status`) after those errors: no secret either.
    const health = (await client.request("health", {})) as { channels: Record<string, { lastError: string | null }> };
    expect(health.channels["telegram:default"]?.lastError, "telegram lastError after the polling errors").toEqual(expect.any(String));
    const healthText = JSON.stringify(health);
    for (const secret of SECRETS) expect(healthText.includes(secret), `health response contains ${secret.slice(0, 6)}…: ${healthText}`).toBe(false);
    client.close();
    // Refused webhook calls: wrong bearer, token in the query string.
    const hook = (headers: Record<string, string>, q = "") => fetch(`http://127.0.0.1:${port}/hooks/agent${q}`, { method: "POST", headers: { "content-type": "application/json", ...headers }, body: JSON.stringify({ message: "x" }) });
    expect((await hook({ authorization: "Bearer nope" })).status).toBe(401);
    expect((await hook({}, `?token=${HOOKS_TOKEN}`)).status).toBe(401);

    daemon.kill("SIGTERM");
    expect((await daemon.exited).code).toBe(0);
    const out = daemon.output();
    // The paths above did produce the errors whose text would have carried the secrets.
    expect(out).toMatch(/telegram polling error/);
    expect(out).toMatch(/Incorrect API key provided: \[redacted\]/);
    expect(out).toMatch(/gateway connection refused/);
    for (const secret of SECRETS) expect(out.includes(secret), `log output contains ${secret.slice(0, 6)}…`).toBe(false);
    // Nor any part of one long enough to matter: a credential cut short (a refused login's
    // near-miss, a truncated URL) gives most of it away.
    for (const secret of SECRETS) expect(pieces(secret, 12).filter((piece) => out.includes(piece)), `log output contains part of ${secret.slice(0, 6)}…`).toEqual([]);
    expect(out).toMatch(/"client":"\[redacted\]"/);
    // A refused login's presented token is not logged either, nor its start: it is often a typo
    // of the real one.
    for (const presented of [WRONG_TOKEN, GATEWAY_TOKEN]) expect(pieces(presented, 8).filter((piece) => out.includes(piece)), `log output contains part of ${presented.slice(0, 4)}…`).toEqual([]);
    expect(out).not.toMatch(/bot\d+:[A-Za-z0-9_-]{20,}/);
    expect(out).not.toMatch(/Bearer [A-Za-z0-9._-]{8,}/);
    // …and the chat never saw the key either (the run's error notice).
    expect(api.sent.map((m) => m.text ?? "").filter((t) => SECRETS.some((s) => t.includes(s)))).toEqual([]);
    expect(api.sent.some((m) => /HTTP 401/.test(m.text ?? ""))).toBe(true);
  }, 60_000);
});
