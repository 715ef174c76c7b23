/**
 * The logger's own backstops against secrets, on the real logger (createLogger with
 * secretsOf(config), as `switchboard start` builds it) writing to a capturing destination.
 *
 * log-secrets.test.ts drives the daemon end to end, but every secret there is stripped before it
 * reaches the logger (telegraf leaves the token out of its errors, the model client scrubs the API
 * key), so it cannot tell whether the logger's backstops work. Here the secrets go to the logger
 * directly, once for each mechanism:
 * - scrubbing: every configured secret value is replaced wherever it appears in a line — message
 *   text, an error's message and stack, fields with innocent names, child-logger bindings;
 * - redaction: fields named like secrets (token, botToken, apiKey, password, authorization, …)
 *   are censored whatever their value — also a credential the config does not know (a caller's
 *   wrong bearer, another service's key), which scrubbing cannot recognise.
 */
import { describe, expect, it } from "vitest";
import { parseConfig } from "../../src/config/load.js";
import { createLogger, secretsOf } from "../../src/log.js";

const GATEWAY_TOKEN = "gwtok-5e4d3c2b1a098765";
const HOOKS_TOKEN = "hooktok-8h7g6f5e4d3c2b1a";
const BOT_TOKEN = "123456789:AAF-secretBotToken_QQ1w2e3r4t5y6u7i";
const DISCORD_TOKEN = "MTEwMDAw.secretDiscord.Token-0a1b2c3d4e5f";
const API_KEY = "sk-live-secretModelKey-fedcba9876543210";
const CONFIGURED = [GATEWAY_TOKEN, HOOKS_TOKEN, BOT_TOKEN, BOT_TOKEN.split(":")[1]!, DISCORD_TOKEN, API_KEY];

const config = parseConfig(
  {
    stateDir: "/nonexistent",
    gateway: { auth: { token: GATEWAY_TOKEN } },
    hooks: { enabled: true, token: HOOKS_TOKEN },
    models: { providers: { openai: { baseUrl: "https://api.openai.com/v1", apiKey: API_KEY, models: [{ id: "gpt" }] } } },
    channels: { telegram: { enabled: true, botToken: BOT_TOKEN }, discord: { enabled: true, token: DISCORD_TOKEN } },
  },
  "<logger redaction test>",
  {},
);

/** The logger `switchboard start` builds, writing its JSON lines into an array. */
function capturingLogger(secrets = secretsOf(config)) {
  const lines: string[] = [];
  const log = createLogger({ level: "trace", secrets, destination: { write: (line: string) => void lines.push(line) } });
  return { log, text: () => lines.join(""), records: () => lines.join("").trim().split("\n").map((l) => JSON.parse(l) as Record<string, unknown>) };
}

describe("logger backstops", () => {
  it("security: configured secrets are scrubbed from message text, error messages and stacks, any field and child bindings", () => {
    const { log, text } = capturingLogger();
    log.warn(`polling https://api.telegram.org/bot${BOT_TOKEN}/getUpdates failed: socket hang up`);
    log.info("gateway client presented %s", GATEWAY_TOKEN);
    log.error({ err: new Error(`401 Incorrect API key provided: ${API_KEY}`) }, "model call failed");
    log.warn({ err: new Error(`login failed for ${DISCORD_TOKEN}`) }, "discord: login failed");
    log.debug({ request: { url: `http://127.0.0.1/hooks/agent?token=${HOOKS_TOKEN}`, retry: 2 } }, "hook request refused");
    log.child({ session: `hooks:${HOOKS_TOKEN}` }).info("child logger line");

    const out = text();
    for (const secret of CONFIGURED) expect(out.includes(secret), `log output contains ${secret.slice(0, 8)}…:\n${out}`).toBe(false);
    // Only the secrets went: the rest of each line is still there to read.
    expect(out).toContain("polling https://api.telegram.org/bot[redacted]/getUpdates failed: socket hang up");
    expect(out).toContain("gateway client presented [redacted]");
    expect(out).toContain("401 Incorrect API key provided: [redacted]");
    expect(out).toContain("model call failed");
    expect(out).toContain("login failed for [redacted]");
    expect(out).toContain("http://127.0.0.1/hooks/agent?token=[redacted]");
    expect(out).toContain('"retry":2');
    expect(out).toContain('"session":"hooks:[redacted]"');
    expect(out).toContain("child logger line");
  });

  it("security: secret-named fields are redacted whatever their value, also credentials the config does not know", () => {
    const { log, text, records } = capturingLogger();
    // Not configured anywhere, so scrubbing cannot catch these: only the field names give them away.
    const unknown = (name: string) => `unconfigured-${name}-7c6b5a4938271605`;
    log.warn(
      {
        channel: { name: "telegram", botToken: unknown("botToken") },
        token: unknown("token"),
        apiKey: unknown("apiKey"),
        password: unknown("password"),
        authorization: `Bearer ${unknown("authorization")}`,
        headers: { authorization: `Bearer ${unknown("header")}`, "content-type": "application/json" },
        auth: { token: unknown("auth.token") },
        provider: { apiKey: unknown("provider.apiKey"), baseUrl: "https://api.example.com/v1" },
        config: { gateway: { auth: { token: unknown("config.gateway.auth.token") } } },
      },
      "request with credentials",
    );

    const out = text();
    expect(out.includes("unconfigured-"), `log output contains an unconfigured credential:\n${out}`).toBe(false);
    const [record] = records();
    expect(record).toMatchObject({
      msg: "request with credentials",
      channel: { name: "telegram", botToken: "[redacted]" },
      token: "[redacted]",
      apiKey: "[redacted]",
      password: "[redacted]",
      authorization: "[redacted]",
      headers: { authorization: "[redacted]", "content-type": "application/json" },
      auth: { token: "[redacted]" },
      provider: { apiKey: "[redacted]", baseUrl: "https://api.example.com/v1" },
      config: { gateway: { auth: { token: "[redacted]" } } },
    });
  });

  it("security: a configured secret with quotes, backslashes or control characters is scrubbed in its JSON-escaped form too", () => {
    // Gateway and hook tokens are chosen by the operator; nothing keeps them to token characters.
    const odd = ['gw"tok\\en-quoted', "hook\ttoken\u0001-ctl"];
    const withOdd = parseConfig({ stateDir: "/nonexistent", gateway: { auth: { token: odd[0] } }, hooks: { enabled: true, token: odd[1] } }, "<logger redaction test>", {});
    const { log, text, records } = capturingLogger(secretsOf(withOdd));
    log.info(`presented ${odd[0]} and ${odd[1]}`);
    log.warn({ err: new Error(`bad token ${odd[0]}`), detail: odd[1] }, "refused");
    const out = text();
    const forms = odd.flatMap((s) => [s, JSON.stringify(s).slice(1, -1)]);
    for (const form of forms) expect(out.includes(form), `log output contains ${JSON.stringify(form)}:\n${out}`).toBe(false);
    // What a reader of the lines (jq, pino-pretty) sees once they are parsed.
    const [first, second] = records() as Array<{ msg: string; err?: { message: string; stack: string }; detail?: string }>;
    const seen = [first!.msg, second!.msg, second!.err!.message, second!.err!.stack, second!.detail].join("\n");
    for (const secret of odd) expect(seen.includes(secret), `parsed log lines contain ${JSON.stringify(secret)}:\n${seen}`).toBe(false);
    expect(first!.msg).toBe("presented [redacted] and [redacted]");
    expect(second).toMatchObject({ msg: "refused", err: { message: "bad token [redacted]" }, detail: "[redacted]" });
  });

  it("security: configured secrets in secret-named fields never appear either", () => {
    const { log, text, records } = capturingLogger();
    log.info({ channel: { name: "discord", botToken: BOT_TOKEN }, token: DISCORD_TOKEN, apiKey: API_KEY, authorization: `Bearer ${GATEWAY_TOKEN}` }, "configured credentials");
    const out = text();
    for (const secret of CONFIGURED) expect(out.includes(secret), `log output contains ${secret.slice(0, 8)}…:\n${out}`).toBe(false);
    expect(records()[0]).toMatchObject({ msg: "configured credentials", channel: { name: "discord" } });
  });

  it("security: a configured secret that contains a shorter one is scrubbed whole, not left with its tail", () => {
    const short = "shared-prefix-tok";
    const long = `${short}-and-its-secret-tail`;
    const nested = parseConfig({ stateDir: "/nonexistent", gateway: { auth: { token: short } }, hooks: { enabled: true, token: long } }, "<logger redaction test>", {});
    const { log, text } = capturingLogger(secretsOf(nested));
    log.info(`hook presented ${long}`);
    expect(text()).not.toContain("secret-tail");
    expect(text()).toContain('"msg":"hook presented [redacted]"');
  });

  it("security: secrets of six characters or more are scrubbed; shorter ones are left, so ordinary words stay readable", () => {
    const six = parseConfig({ stateDir: "/nonexistent", gateway: { auth: { token: "k9x2q7" } }, hooks: { enabled: true, token: "ab12c" } }, "<logger redaction test>", {});
    const { log, text } = capturingLogger(secretsOf(six));
    log.info("tokens k9x2q7 and ab12c");
    expect(text()).toContain('"msg":"tokens [redacted] and ab12c"');
  });
});
