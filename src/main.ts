/**
 * The `switchboard` CLI (interfaces §1): start, config check, sessions, status.
 */
import { randomUUID } from "node:crypto";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { Command, InvalidArgumentError, Option } from "commander";
import { ConfigError, describeUnset, loadConfigFile, unsetReferences } from "./config/load.js";
import type { Config } from "./config/schema.js";
import { unsafeBindProblem } from "./config/safe-bind.js";
import { createLogger, secretsOf } from "./log.js";
import { GatewayCallError, GatewayClient } from "./gateway/client.js";
import { VERSION } from "./version.js";

const DEFAULT_CONFIG = fileURLToPath(new URL("../config/default.json5", import.meta.url));

function configPath(opt?: string): string {
  return path.resolve(opt ?? process.env.SWITCHBOARD_CONFIG ?? DEFAULT_CONFIG);
}

function loadOrExit(file: string): Config {
  try {
    return loadConfigFile(file);
  } catch (err) {
    if (err instanceof ConfigError) {
      process.stderr.write(`${err.message}\n`);
      process.exit(2);
    }
    throw err;
  }
}

const program = new Command().name("switchboard").description("Connects chat platforms to AI agents.").version(VERSION);

program
  .command("start")
  .description("run the daemon")
  .option("-c, --config <file>", "config file (JSON5; or SWITCHBOARD_CONFIG; default config/default.json5)")
  .option("-s, --state-dir <dir>", "state directory (overrides stateDir and SWITCHBOARD_STATE_DIR)")
  .action(async (opts: { config?: string; stateDir?: string }) => {
    // Everything the daemon writes — transcripts, the session store, the send journal, the
    // WhatsApp login — is the owner's conversations and credentials: readable by its user alone,
    // whatever the shell's umask (often 022: every file world-readable). SQLite's own files,
    // written by its library, are covered too, which per-file modes would not be.
    process.umask(0o077);
    const file = configPath(opts.config);
    if (opts.stateDir) process.env.SWITCHBOARD_STATE_DIR = opts.stateDir;
    const config = loadOrExit(file);
    const log = createLogger({ level: config.log.level, secrets: secretsOf(config) });
    for (const ref of unsetReferences(config)) log.warn(ref, `config: ${describeUnset(ref)}`);
    const { createFullDaemon } = await import("./full-daemon.js");
    const daemon = createFullDaemon({ config, log });
    let stopping = false;
    const stop = async (signal: string) => {
      if (stopping) return;
      stopping = true;
      log.info({ signal }, "signal received");
      try {
        await daemon.stop();
        log.flush();
        process.exit(0);
      } catch (err) {
        log.error({ err }, "error while stopping");
        process.exit(1);
      }
    };
    process.on("SIGINT", () => void stop("SIGINT"));
    process.on("SIGTERM", () => void stop("SIGTERM"));
    process.on("unhandledRejection", (err) => log.error({ err }, "unhandled rejection (daemon keeps running)"));
    try {
      await daemon.start();
    } catch (err) {
      log.fatal({ err: describeStartError(err, config) }, "daemon failed to start");
      log.flush();
      process.exit(1);
    }
  });

/** The start-up failure in one line, saying what to do where a new user can act on it. */
function describeStartError(err: unknown, config: Config): string {
  const { code } = err as NodeJS.ErrnoException;
  const where = `${config.gateway.bind}:${config.gateway.port}`;
  if (code === "EADDRINUSE") return `${where} is already in use — is another switchboard already running? Stop it, or choose another port with gateway.port in your config (--config)`;
  if (code === "EACCES") return `not allowed to listen on ${where} — ports below 1024 need privileges: choose another port with gateway.port in your config (--config)`;
  if (code === "EADDRNOTAVAIL") return `cannot listen on ${where}: no network interface has that address — fix gateway.bind in your config`;
  return (err as Error).message;
}

const configCmd = program.command("config").description("configuration");
configCmd
  .command("check")
  .description("validate a config file and print every error with its path")
  .option("-c, --config <file>", "config file (JSON5; or SWITCHBOARD_CONFIG; default config/default.json5)")
  .action((opts: { config?: string }) => {
    const file = configPath(opts.config);
    try {
      const config = loadConfigFile(file);
      const bindProblem = unsafeBindProblem(config);
      if (bindProblem) throw new ConfigError(file, [`gateway.bind: ${bindProblem}`]);
      for (const ref of unsetReferences(config)) process.stdout.write(`warning: ${describeUnset(ref)}\n`);
      process.stdout.write(`config ok: ${file}\n`);
    } catch (err) {
      if (!(err instanceof ConfigError)) throw err;
      process.stderr.write(`${err.message}\n`);
      process.exitCode = 2;
    }
  });

interface ClientOpts {
  url?: string;
  token?: string;
  json?: boolean;
}

function gatewayUrl(opts: ClientOpts): string {
  return opts.url ?? process.env.SWITCHBOARD_URL ?? "ws://127.0.0.1:18789/";
}

function withClient(opts: ClientOpts) {
  return new GatewayClient({ url: gatewayUrl(opts), token: opts.token ?? process.env.SWITCHBOARD_GATEWAY_TOKEN });
}

/** One line saying what went wrong and, where the operator can act on it, what to do. */
function describeCallError(err: unknown, url: string): string {
  const message = (err as Error).message;
  if ((err as NodeJS.ErrnoException).code === "ECONNREFUSED") {
    return `cannot reach the daemon at ${url} (connection refused): is it running? Start it with \`npx switchboard start\` (or \`npm start\`); if it listens elsewhere (gateway.port), pass --url or set SWITCHBOARD_URL`;
  }
  if (err instanceof GatewayCallError && err.code === "UNAUTHORIZED") return `${message}: pass the daemon's gateway token with --token or SWITCHBOARD_GATEWAY_TOKEN`;
  return message;
}

async function call(opts: ClientOpts, method: string, params: unknown, render: (payload: any) => string): Promise<void> {
  const client = withClient(opts);
  try {
    await client.connect();
    const payload = await client.request(method, params, { expectFinal: true });
    process.stdout.write(opts.json ? `${JSON.stringify(payload, null, 2)}\n` : `${render(payload)}\n`);
  } catch (err) {
    process.stderr.write(`error: ${describeCallError(err, gatewayUrl(opts))}\n`);
    process.exitCode = 1;
  } finally {
    client.close();
  }
}

/** " (1 failed since start, 2 possibly not delivered…, see the log)", or "". */
function outboxTrouble(counts: { failed: number; unknown?: number }): string {
  const parts = [
    ...(counts.failed ? [`${counts.failed} failed since start`] : []),
    ...(counts.unknown ? [`${counts.unknown} possibly not delivered, not sent again to avoid a duplicate`] : []),
  ];
  return parts.length ? ` (${parts.join(", ")}, see the log)` : "";
}

/** " (2 waiting to retry after an I/O failure, 1 failed: resumed at the next start, …)", or "". */
function inboundTrouble(counts: { retrying: number; failed: number; givenUp?: number }): string {
  const parts = [
    ...(counts.retrying ? [`${counts.retrying} waiting to retry after an I/O failure`] : []),
    ...(counts.failed ? [`${counts.failed} failed: resumed at the next start, see the log`] : []),
    ...(counts.givenUp ? [`${counts.givenUp} given up after failing at every start, see the log`] : []),
  ];
  return parts.length ? ` (${parts.join(", ")})` : "";
}

/**
 * `--limit`: refused here with what it takes; passed on, "abc" would reach the gateway as null
 * and come back as "expected number, received null".
 */
function count(value: string): number {
  const n = Number(value);
  if (!/^\d+$/.test(value.trim()) || n < 1) throw new InvalidArgumentError("expected a whole number of at least 1");
  return n;
}

const clientOptions = (cmd: Command) => cmd.option("--url <url>", "gateway URL (or SWITCHBOARD_URL; default ws://127.0.0.1:18789/)").option("--token <token>", "gateway token (or SWITCHBOARD_GATEWAY_TOKEN)").option("--json", "print JSON");

const sessions = program.command("sessions").description("inspect and steer sessions through the gateway");
clientOptions(sessions.command("list").description("list sessions, newest first").option("--limit <n>", "rows", count, 50).option("--kinds <kinds>", "comma-separated kinds")).action(
  (opts: ClientOpts & { limit: number; kinds?: string }) =>
    call(opts, "sessions.list", { limit: opts.limit, ...(opts.kinds ? { kinds: opts.kinds.split(",") } : {}) }, (p) =>
      p.sessions.map((s: any) => `${s.key}\t${s.kind}\t${s.channel}\t${new Date(s.updatedAt).toISOString()}${s.sendPolicy ? `\tsendPolicy=${s.sendPolicy}` : ""}`).join("\n") || "(no sessions)",
    ),
);
clientOptions(sessions.command("history <sessionKey>").description("print a session's transcript").option("--limit <n>", "messages", count, 50)).action((key: string, opts: ClientOpts & { limit: number }) =>
  call(opts, "chat.history", { sessionKey: key, limit: opts.limit }, (p) =>
    p.messages.map((m: any) => `${m.role}: ${typeof m.content === "string" ? m.content : m.content.filter((b: any) => b.type === "text").map((b: any) => b.text).join("") || JSON.stringify(m.content)}`).join("\n") || "(empty)",
  ),
);
clientOptions(
  sessions
    .command("patch <sessionKey>")
    .description("change a session: --send-policy allow|deny|inherit, --label, --model")
    .addOption(new Option("--send-policy <mode>", "allow | deny | inherit").choices(["allow", "deny", "inherit"]))
    .option("--label <label>", "label")
    .option("--model <ref>", "model override (provider/model)"),
).action((key: string, opts: ClientOpts & { sendPolicy?: string; label?: string; model?: string }) =>
  call(opts, "sessions.patch", { key, ...(opts.sendPolicy ? { sendPolicy: opts.sendPolicy === "inherit" ? null : opts.sendPolicy } : {}), ...(opts.label ? { label: opts.label } : {}), ...(opts.model ? { model: opts.model } : {}) }, (p) => `${p.key}: sendPolicy=${p.entry.sendPolicy ?? "inherit"}`),
);
clientOptions(sessions.command("send <sessionKey> <message>").description("run the agent of a session with a message and print its reply")).action((key: string, message: string, opts: ClientOpts) =>
  call(opts, "agent", { sessionKey: key, message, idempotencyKey: randomUUID() }, (p) => p.result?.reply ?? JSON.stringify(p)),
);
clientOptions(program.command("status").description("channel health, run counts, queue depth")).action((opts: ClientOpts) =>
  call(opts, "health", {}, (p) =>
    [
      `switchboard ${p.version} — up ${Math.round(p.uptimeMs / 1000)} s, ${p.sessions} sessions, model ${p.model ?? "none"}`,
      `runs: ${p.runs.running} running, ${p.runs.queued} queued; inbound: ${p.inbound.pending} pending${inboundTrouble(p.inbound)}; outbox: ${p.outbox.pending} pending${outboxTrouble(p.outbox)}`,
      ...Object.entries(p.channels).map(([name, h]: [string, any]) => `${name}: ${h.connected ? "connected" : "disconnected"}${h.lastInboundAt ? `, last inbound ${new Date(h.lastInboundAt).toISOString()}` : ""}${h.lastError ? `, last error: ${h.lastError}` : ""}`),
    ].join("\n"),
  ),
);

await program.parseAsync(process.argv);
