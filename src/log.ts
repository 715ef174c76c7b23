/**
 * pino, pretty on a TTY and JSON otherwise; secrets are redacted wherever they appear in
 * logged objects, and token-shaped substrings are scrubbed from messages.
 */
import pino from "pino";
import pretty from "pino-pretty";

const REDACT = [
  "token", "botToken", "apiKey", "password", "authorization", "auth.token",
  "*.token", "*.botToken", "*.apiKey", "*.password", "*.authorization", "*.auth.token",
  "headers.authorization", "config.gateway.auth.token",
];

export interface LoggerOptions {
  level: string;
  /** Pretty output; defaults to whether stdout is a TTY. */
  pretty?: boolean;
  destination?: pino.DestinationStream;
  /** Secret values to scrub from every line (tokens read from config). */
  secrets?: string[];
}

export function createLogger(opts: LoggerOptions): pino.Logger {
  // Lines are JSON by the time they are scrubbed (pino-pretty formats after): a secret with a quote,
  // backslash or control character appears there escaped, so that form is scrubbed too — longest
  // first, so that no shorter form cuts into a longer one before it is matched.
  const secrets = [...new Set((opts.secrets ?? []).filter((s) => s && s.length >= 6).flatMap((s) => [JSON.stringify(s).slice(1, -1), s]))].sort((a, b) => b.length - a.length);
  const base = opts.destination ?? (opts.pretty ?? process.stdout.isTTY ? pretty({ colorize: true, translateTime: "SYS:HH:MM:ss.l", ignore: "pid,hostname" }) : pino.destination({ sync: false }));
  const stream: pino.DestinationStream = secrets.length ? { write: (line: string) => base.write(scrub(line, secrets)) } : base;
  return pino({ level: opts.level, redact: { paths: REDACT, censor: "[redacted]" } }, stream);
}

function scrub(line: string, secrets: string[]): string {
  let out = line;
  for (const s of secrets) if (out.includes(s)) out = out.split(s).join("[redacted]");
  return out;
}

export function secretsOf(config: { gateway: { auth: { token?: string } }; channels: Record<string, unknown>; models: { providers: Record<string, { apiKey?: string }> }; hooks: { token?: string } }): string[] {
  const out: string[] = [];
  if (config.gateway.auth.token) out.push(config.gateway.auth.token);
  if (config.hooks.token) out.push(config.hooks.token);
  for (const p of Object.values(config.models.providers)) if (p.apiKey) out.push(p.apiKey);
  for (const ch of Object.values(config.channels)) {
    const c = ch as { token?: string; botToken?: string } | undefined;
    if (c?.token) out.push(c.token);
    if (c?.botToken) out.push(c.botToken);
  }
  return out;
}

const LEVELS = new Set(["fatal", "error", "warn", "info", "debug", "trace"]);

/**
 * A child logger created on first use. Hot paths (one per inbound message, delivery and run) bind
 * context but rarely log, and pino's child() serialises and redacts its bindings up front — a few
 * percent of the daemon's CPU at 2,000 messages/s (bench/). Calls at a disabled level are no-ops.
 */
export function lazyChild(parent: pino.Logger, bindings: pino.Bindings): pino.Logger {
  let child: pino.Logger | undefined;
  const noop = () => undefined;
  return new Proxy(parent, {
    get(_target, prop) {
      if (typeof prop === "string" && LEVELS.has(prop) && !child && !parent.isLevelEnabled(prop)) return noop;
      child ??= parent.child(bindings);
      const value = (child as unknown as Record<string | symbol, unknown>)[prop];
      return typeof value === "function" ? (value as (...a: unknown[]) => unknown).bind(child) : value;
    },
  });
}
