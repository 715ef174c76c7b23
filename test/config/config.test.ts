import { execFile } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { promisify } from "node:util";
import { afterEach, describe, expect, it } from "vitest";
import { ConfigError, loadConfigFile, parseConfig, unsetReferences } from "../../src/config/load.js";

const run = promisify(execFile);
const BIN = path.resolve("src/bin.js");
const dirs: string[] = [];
afterEach(() => dirs.splice(0).forEach((d) => rmSync(d, { recursive: true, force: true })));

function file(text: string): string {
  const dir = mkdtempSync(path.join(os.tmpdir(), "sb-cfg-"));
  dirs.push(dir);
  const f = path.join(dir, "c.json5");
  writeFileSync(f, text);
  return f;
}

function problems(raw: unknown): string[] {
  try {
    parseConfig(raw);
  } catch (err) {
    if (err instanceof ConfigError) return err.problems;
    throw err;
  }
  return [];
}

describe("config", () => {
  it("the embedded defaults and the annotated example are valid", () => {
    expect(loadConfigFile("config/default.json5", {})).toMatchObject({ gateway: { port: 18789, bind: "127.0.0.1" }, channels: { webchat: { enabled: true } } });
    expect(loadConfigFile("config/example.json5", { TELEGRAM_BOT_TOKEN: "t", DISCORD_TOKEN: "d" }).channels).toMatchObject({ telegram: { enabled: true, botToken: "t" }, discord: { enabled: true, token: "d" } });
  });

  it.each([
    [{ session: { sendPolicy: { rules: [{ action: "block", match: {} }] } } }, 'session.sendPolicy.rules.0.action: expected "allow" | "deny"'],
    [{ gateway: { port: "x" } }, "gateway.port: Invalid input: expected number, received string"],
    [{ chanels: {} }, '(root): unknown key(s) "chanels"'],
    [{ session: { agentToAgent: { maxPingPongTurns: 9 } } }, "session.agentToAgent.maxPingPongTurns: Too big: expected number to be <=5"],
    [{ commands: { owners: ["alice"] } }, "commands.owners.0: owner entries look like <channel>:<platform user id>"],
    [{ channels: { telegram: { owners: ["@telegram:123"] } } }, "channels.telegram.owners.0: owner entries look like <channel>:<platform user id>"],
    [
      { cron: { jobs: [{ id: "daily", schedule: "0 9 * * *", message: "a" }, { id: "Daily", schedule: "0 18 * * *", message: "b" }] } },
      'cron.jobs.1.id: cron job id "Daily" is already the id of jobs[0] (ids name the job\'s cron:<id> session, compared case-insensitively)',
    ],
    [
      { agents: { list: [{ id: "main", default: true }, { id: "ops", systemPrompt: "Ops desk." }, { id: "Ops", systemPrompt: "Copied block." }] } },
      'agents.list.2.id: agent id "Ops" is already the id of list[1] (agent ids name sessions agent:<id>:…, compared case-insensitively)',
    ],
  ])("each error names its path: %j", (raw, expected) => {
    expect(problems(raw)).toContain(expected);
  });

  it.each([
    [{ cron: { jobs: [{ id: "daily", schedule: "every day at 9", message: "m" }] } }, /^cron\.jobs\.0\.schedule: not a cron schedule \("every day at 9"\): .*five, six, or seven/],
    [{ cron: { jobs: [{ id: "daily", schedule: "61 9 * * *", message: "m" }] } }, /^cron\.jobs\.0\.schedule: not a cron schedule \("61 9 \* \* \*"\): .*minute/],
    [{ cron: { jobs: [{ id: "daily", schedule: "0 9 * * *", timezone: "Mars/Olympus", message: "m" }] } }, /^cron\.jobs\.0\.timezone: unknown time zone "Mars\/Olympus": use an IANA name such as "Europe\/Berlin"$/],
    [{ cron: { jobs: [{ id: "feb30", schedule: "0 9 30 2 *", message: "m" }] } }, /^cron\.jobs\.0\.schedule: the cron schedule "0 9 30 2 \*" never comes \(no date matches it\)$/],
    [{ cron: { jobs: [{ id: "daily", schedule: "0 9 * * *", agentId: "ghost", message: "m" }] } }, /^cron\.jobs\.0\.agentId: no agent "ghost" in agents\.list \(main\)$/],
  ])("interfaces §2 a cron job that could never run is a config error, not a job skipped at start: %j", (raw, expected) => {
    expect(problems(raw)).toEqual([expect.stringMatching(expected)]);
  });

  it("interfaces §2 a cron job naming an agent of agents.list in another case is valid (agent ids are case-insensitive)", () => {
    expect(problems({ agents: { list: [{ id: "main", default: true }, { id: "ops" }] }, cron: { jobs: [{ id: "r", schedule: "0 9 * * *", agentId: "Ops", message: "m", timezone: "Europe/Berlin" }] } })).toEqual([]);
  });

  it.each(["telegrm", "slack", "internal"])("interfaces §2 a send-policy rule naming a channel Switchboard does not connect (%s) is a config error: a misspelt deny rule would fail open", (channel) => {
    expect(problems({ session: { sendPolicy: { rules: [{ action: "deny", match: { channel, chatType: "group" } }] } } })).toEqual([
      `session.sendPolicy.rules.0.match.channel: no channel "${channel}": expected "webchat" | "telegram" | "discord" | "whatsapp"`,
    ]);
  });

  it("interfaces §2 send-policy rule channels compare case-insensitively, as the policy does", () => {
    expect(problems({ session: { sendPolicy: { rules: [{ action: "deny", match: { channel: "Discord", chatType: "group" } }] } } })).toEqual([]);
  });

  it("interfaces §2 two agents marked default is a config error naming both, not the first one silently", () => {
    expect(problems({ agents: { list: [{ id: "a", default: true }, { id: "b", default: true }] } })).toEqual([
      'agents.list.1.default: only one agent may be the default; list[0] ("a") already is',
    ]);
  });

  it.each([
    [{ commands: { owners: ["telegram:@alice"] } }, 'commands.owners.0: "telegram:@alice": a Telegram owner is the numeric user id ("telegram:123456", e.g. from @userinfobot), not a username'],
    [{ commands: { owners: ["discord:alice#1234"] } }, 'commands.owners.0: "discord:alice#1234": a Discord owner is the numeric user id ("discord:998877", Developer Mode → Copy User ID)'],
    [{ commands: { owners: ["whatsapp:15551234567"] } }, 'commands.owners.0: "whatsapp:15551234567": a WhatsApp owner is the number in E.164 with its + ("whatsapp:+15551234567")'],
    [{ commands: { owners: ["telegram: 123456"] } }, 'commands.owners.0: "telegram: 123456": a Telegram owner is the numeric user id ("telegram:123456", e.g. from @userinfobot), not a username'],
    [{ commands: { owners: ["telegram:123456abc"] } }, 'commands.owners.0: "telegram:123456abc": a Telegram owner is the numeric user id ("telegram:123456", e.g. from @userinfobot), not a username'],
    [{ commands: { owners: ["whatsapp:+1"] } }, 'commands.owners.0: "whatsapp:+1": a WhatsApp owner is the number in E.164 with its + ("whatsapp:+15551234567")'],
    [{ channels: { telegram: { owners: ["discord:998877"] } } }, 'channels.telegram.owners.0: "discord:998877" is a discord owner: channels.telegram.owners lists telegram owners (put it in commands.owners or channels.discord.owners)'],
  ])("interfaces §2 §5 an owner entry that could never match its platform's sender id is a config error: %j", (raw, expected) => {
    expect(problems(raw)).toEqual([expected]);
  });

  it("interfaces §2 owner entries as the platforms give sender ids are valid", () => {
    expect(
      problems({
        commands: { owners: ["telegram:123456", "discord:998877665544332211", "whatsapp:+15551234567", "whatsapp:90000000000001@lid", "whatsapp:90000000000002@hosted.lid", "webchat:operator"] },
        channels: { telegram: { owners: ["telegram:42"] }, whatsapp: { owners: ["whatsapp:+4915112345678"] } },
      }),
    ).toEqual([]);
  });

  it("${ENV} placeholders read secrets from the environment", () => {
    const c = parseConfig({ channels: { telegram: { enabled: true, botToken: "${TG}" } } }, "<t>", { TG: "123:abc" });
    expect(c.channels.telegram?.botToken).toBe("123:abc");
  });

  it("every ${ENV} placeholder of a string is substituted, not only the first", () => {
    const c = parseConfig({ models: { providers: { local: { baseUrl: "http://${HOST}:${PORT}/v1", apiKey: "${KEY}-${KEY}" } } } }, "<t>", { HOST: "127.0.0.1", PORT: "8080", KEY: "k" });
    expect(c.models.providers.local).toMatchObject({ baseUrl: "http://127.0.0.1:8080/v1", apiKey: "k-k" });
  });

  it("an unset ${ENV} variable is told where it matters (an enabled channel, enabled hooks, a model provider), not for a disabled channel", () => {
    const c = parseConfig(
      {
        channels: { telegram: { enabled: true, botToken: "${TG_TOKEN}" }, discord: { enabled: false, token: "${DC_TOKEN}" } },
        hooks: { enabled: false, token: "${HOOKS}" },
        models: { providers: { local: { baseUrl: "http://${HOST}/v1", apiKey: "${KEY}" } } },
      },
      "<t>",
      { HOST: "127.0.0.1" },
    );
    expect(c.channels.telegram?.botToken).toBe("");
    expect(unsetReferences(c)).toEqual([
      { path: "channels.telegram.botToken", variable: "TG_TOKEN" },
      { path: "models.providers.local.apiKey", variable: "KEY" },
    ]);
  });

  it("SWITCHBOARD_STATE_DIR overrides stateDir; SWITCHBOARD_GATEWAY_TOKEN supplies only a token the file leaves empty", () => {
    expect(parseConfig({ stateDir: "/from/file" }, "<t>", { SWITCHBOARD_STATE_DIR: "/from/env" }).stateDir).toBe("/from/env");
    expect(parseConfig({ stateDir: "/from/file" }, "<t>", {}).stateDir).toBe("/from/file");
    expect(parseConfig({}, "<t>", { SWITCHBOARD_GATEWAY_TOKEN: "env-token" }).gateway.auth.token).toBe("env-token");
    expect(parseConfig({ gateway: { auth: { token: "file-token" } } }, "<t>", { SWITCHBOARD_GATEWAY_TOKEN: "env-token" }).gateway.auth.token).toBe("file-token");
    expect(parseConfig({ gateway: { auth: { token: "" } } }, "<t>", {}).gateway.auth.token).toBeUndefined();
  });

  it("interfaces §1 the annotated example, copied and started with --state-dir (SWITCHBOARD_STATE_DIR), keeps its SQLite store in that directory too", () => {
    const c = loadConfigFile("config/example.json5", { SWITCHBOARD_STATE_DIR: "/var/lib/switchboard" });
    expect(c.stateDir).toBe("/var/lib/switchboard");
    // A store.url of its own would pin the SQLite file (sessions, outbox, WhatsApp login) to
    // ./data of whatever directory the daemon starts in, apart from the transcripts.
    expect(c.store.url).toBeUndefined();
    // Likewise the WhatsApp login: authDir defaults to <stateDir>/whatsapp.
    expect(c.channels.whatsapp?.authDir).toBeUndefined();
  });

  it("defaults: a chat channel's section left empty is disabled, requires a mention in groups and has no owners of its own", () => {
    const c = parseConfig({ channels: { telegram: {}, discord: {}, whatsapp: {} } }, "<t>", {});
    for (const ch of [c.channels.telegram, c.channels.discord, c.channels.whatsapp]) expect(ch).toMatchObject({ enabled: false, requireMention: true, owners: [] });
    expect(c.commands.owners).toEqual([]);
  });

  it("the result is frozen so nothing mutates config at runtime", () => {
    const c = parseConfig({});
    expect(Object.isFrozen(c.session.sendPolicy)).toBe(true);
  });
});

describe("CLI", () => {
  it("config check prints every error with its path and exits non-zero", async () => {
    const f = file(`{ session: { sendPolicy: { rules: [{ action: "block" }] } }, gateway: { port: "x" } }`);
    const err = await run("node", [BIN, "config", "check", "--config", f]).catch((e) => e);
    expect(err.code).toBe(2);
    expect(err.stderr).toContain('session.sendPolicy.rules.0.action: expected "allow" | "deny"');
    expect(err.stderr).toContain("gateway.port:");
  });

  it("config check names an unset variable an enabled channel's token comes from", async () => {
    const f = file(`{ channels: { telegram: { enabled: true, botToken: "\${SB_TEST_NEVER_SET_TOKEN}" } } }`);
    const { stdout } = await run("node", [BIN, "config", "check", "--config", f]);
    expect(stdout).toContain("warning: environment variable SB_TEST_NEVER_SET_TOKEN is not set; channels.telegram.botToken is empty");
    expect(stdout).toMatch(/config ok/);
  });

  it("config check refuses a store.url that start could not open, naming the path, what is accepted, and never the URL's password", async () => {
    const f = file(`{ store: { url: "postgres://app:hunter2@db:5432/sb" } }`);
    const err = await run("node", [BIN, "config", "check", "--config", f]).catch((e) => e);
    expect(err.code).toBe(2);
    expect(err.stderr).toContain('store.url: unsupported store "postgres://app:***@db:5432/sb": use "sqlite://<file>", "redis://[user:password@]host[:port][/db]" (or "rediss://" for TLS) or "memory://"');
    expect(err.stderr).not.toContain("hunter2");
    expect(problems({ store: { url: "sqlite://./x.sqlite" } })).toEqual([]);
    expect(problems({ store: { url: "memory://" } })).toEqual([]);
  });

  it.each([
    "redis://127.0.0.1:6379",
    "redis://localhost",
    "redis://:p%40ss@redis.internal:6380/2",
    "redis://user:pw@[::1]:6379/0",
    "rediss://cache.example.com:6380/15",
  ])("config check accepts the redis store URL %s (host present, db a number if given)", async (url) => {
    expect(problems({ store: { url } })).toEqual([]);
  });

  it.each([
    ["redis:///1", 'store.url: invalid store "redis:///1": no host'],
    ["redis://:pw@:6379", 'store.url: invalid store "redis://:***@:6379": not a URL'],
    ["redis://:pw@host:6379/zero", 'store.url: invalid store "redis://:***@host:6379/zero": database "zero" is not a number'],
    ["redis://host/1?tls=true", 'store.url: invalid store "redis://host/1?tls=true": query parameters are not supported'],
    ["redis://host:99999", 'store.url: invalid store "redis://host:99999": not a URL'],
  ])("config check refuses the malformed redis store URL %s, password masked", async (url, message) => {
    expect(problems({ store: { url } })).toEqual([`${message}; use "redis://[user:password@]host[:port][/db]" (or "rediss://" for TLS)`]);
  });

  it("config check passes a redis store URL that reads its password from the environment, and prints no password", async () => {
    const f = file(`{ store: { url: "redis://:\${SB_TEST_REDIS_PASSWORD}@127.0.0.1:6379/1" } }`);
    const { stdout } = await run("node", [BIN, "config", "check", "--config", f], { env: { ...process.env, SB_TEST_REDIS_PASSWORD: "from-env" } });
    expect(stdout).toMatch(/config ok/);
    expect(stdout).not.toContain("from-env");
  });

  it("interfaces §1 config check refuses a cron schedule the daemon could never run, naming its path, and exits 2", async () => {
    const f = file(`{ cron: { jobs: [{ id: "daily", schedule: "every morning", message: "hi" }] } }`);
    const err = await run("node", [BIN, "config", "check", "--config", f]).catch((e) => e);
    expect(err.code).toBe(2);
    expect(err.stderr).toContain('cron.jobs.0.schedule: not a cron schedule ("every morning")');
  });

  it("config check accepts a good file", async () => {
    const { stdout } = await run("node", [BIN, "config", "check", "--config", "config/default.json5"]);
    expect(stdout).toMatch(/config ok/);
  });

  it("start refuses a bad config the same way and exits non-zero", async () => {
    const f = file(`{ log: { level: "loud" } }`);
    const err = await run("node", [BIN, "start", "--config", f]).catch((e) => e);
    expect(err.code).toBe(2);
    expect(err.stderr).toMatch(/log\.level: expected "fatal" \| "error"/);
  });

  it("interfaces §1 config check refuses what start would refuse: a non-loopback bind without a token, naming gateway.bind, exit 2", async () => {
    const f = file(`{ gateway: { bind: "0.0.0.0" } }`);
    const err = await run("node", [BIN, "config", "check", "--config", f], { env: { ...process.env, SWITCHBOARD_GATEWAY_TOKEN: "" } }).catch((e) => e);
    expect(err.code).toBe(2);
    expect(err.stderr).toContain("gateway.bind: refusing to bind the gateway to 0.0.0.0 without a token");
    const withToken = await run("node", [BIN, "config", "check", "--config", f], { env: { ...process.env, SWITCHBOARD_GATEWAY_TOKEN: "from-env-123" } });
    expect(withToken.stdout).toMatch(/config ok/);
  });

  it("start refuses a non-loopback bind without a token", async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), "sb-bind-"));
    dirs.push(dir);
    const f = file(`{ stateDir: "${dir}", gateway: { bind: "0.0.0.0", port: 0 } }`);
    const err = await run("node", [BIN, "start", "--config", f], { env: { ...process.env, SWITCHBOARD_GATEWAY_TOKEN: "" } }).catch((e) => e);
    expect(err.code).toBe(1);
    expect(err.stdout + err.stderr).toMatch(/refusing to bind the gateway to 0\.0\.0\.0 without a token/);
  });
});
