/**
 * The single place where Telegram failures become the core's closed PlatformError set, and where
 * the bot token is scrubbed out of error text (telegraf puts it in every request URL, and
 * node-fetch copies the URL into its error messages).
 */
import { PlatformError, type PlatformErrorCode } from "../../src/channels/types.js";
import { reachedServer } from "../../src/util/http-post.js";

/** The Bot API's error envelope (`ok: false`), as carried by telegraf's TelegramError.response. */
export interface ApiFailure {
  error_code: number;
  description: string;
  parameters?: { retry_after?: number; migrate_to_chat_id?: number };
}

/** Duck-typed rather than `instanceof TelegramError`, so a second telegraf copy still matches. */
export function apiFailureOf(err: unknown): ApiFailure | undefined {
  if (typeof err !== "object" || err === null || !("response" in err)) return undefined;
  const r = (err as { response: unknown }).response;
  if (typeof r !== "object" || r === null) return undefined;
  const code = (r as { error_code?: unknown }).error_code;
  if (typeof code !== "number") return undefined;
  const desc = (r as { description?: unknown }).description;
  const params = (r as { parameters?: unknown }).parameters;
  return {
    error_code: code,
    description: typeof desc === "string" ? desc : "",
    parameters: typeof params === "object" && params !== null ? (params as ApiFailure["parameters"]) : undefined,
  };
}

/** Removes the literal token and anything shaped like one (`bot<digits>:<secret>`). */
export function redactToken(text: string, token: string): string {
  let out = token ? text.split(token).join("<redacted>") : text;
  out = out.replace(/(bot|user)\d+:[A-Za-z0-9_-]+/g, "$1<redacted>");
  return out;
}

/**
 * Redacts in place, stack included (it embeds the message), because callers keep the error as
 * `cause` and a logger serialising the cause must not print the token.
 */
export function scrubError<T>(err: T, token: string): T {
  if (err instanceof Error) {
    err.message = redactToken(err.message, token);
    if (err.stack) err.stack = redactToken(err.stack, token);
  }
  return err;
}

/** One-line, token-free description for logs and health().lastError. */
export function describeError(err: unknown, token: string): string {
  const api = apiFailureOf(err);
  if (api) return redactToken(`${api.error_code}: ${api.description}`, token);
  if (err instanceof Error) return redactToken(`${err.name}: ${err.message}`, token);
  return redactToken(String(err), token);
}

/**
 * A bot token's shape as @BotFather gives it: `<bot id>:<secret>`. Checked before any call, because
 * Telegram answers a malformed token with a 404 that reads like an unreachable API.
 */
export const BOT_TOKEN_SHAPE = /^\d+:[A-Za-z0-9_-]+$/;

/**
 * What the operator should do about a refused call, appended to the error they see (log and
 * `switchboard status`), or "". Never quotes the token.
 */
export function operatorHint(err: unknown): string {
  const api = apiFailureOf(err);
  if (!api) return "";
  if (api.error_code === 401) return " — Telegram refused the bot token: copy it again from @BotFather (/mybots → API Token) into channels.telegram.botToken, then restart";
  if (api.error_code === 404) return " — Telegram does not know this bot token (or channels.telegram.apiRoot is not the Bot API): copy the token again from @BotFather, then restart";
  if (api.error_code === 409 && /webhook/i.test(api.description)) return " — a webhook was set for this bot token, by another deployment: stop it (it keeps setting it), then restart this daemon";
  if (api.error_code === 409) return " — another program is reading this bot's updates (a second switchboard, or the same bot running elsewhere): stop it, or give each its own bot from @BotFather";
  return "";
}

export function classify(err: unknown): { code: PlatformErrorCode; retryAfterMs?: number } {
  const api = apiFailureOf(err);
  if (!api) return { code: "transport" };
  const c = api.error_code;
  if (c === 429) {
    const s = api.parameters?.retry_after;
    return { code: "rate_limited", retryAfterMs: typeof s === "number" && s >= 0 ? s * 1000 : undefined };
  }
  if (c === 401) return { code: "auth" };
  if (c === 403) return { code: "forbidden" };
  if (c === 400) {
    // A group upgraded to a supergroup has a new id; the old one is gone for good.
    if (api.parameters?.migrate_to_chat_id !== undefined) return { code: "not_found" };
    return /chat not found|user not found|thread not found/i.test(api.description) ? { code: "not_found" } : { code: "invalid" };
  }
  // 408 only comes from a proxy that gave up waiting for the request: nothing was sent yet.
  if (c === 408 || c === 409 || c >= 500) return { code: "transport" };
  return { code: "invalid" };
}

/** Maps any failure of `method` to a PlatformError whose message and cause carry no token. */
export function toPlatformError(err: unknown, method: string, token: string): PlatformError {
  if (err instanceof PlatformError) return err;
  const { code, retryAfterMs } = classify(err);
  let message = `${method} failed: ${describeError(err, token)}${operatorHint(err)}`;
  const migrated = apiFailureOf(err)?.parameters?.migrate_to_chat_id;
  if (migrated !== undefined) message += ` (chat migrated to ${migrated})`;
  // No answer to a request Telegram had in full: it may have been carried out. A 504 is such a
  // non-answer too: the gateway in front of the Bot API had passed the request on and gave up
  // waiting for the result (ecosystem B.10: retrying after a timeout duplicated messages).
  // Other 5xx are answers that the request failed, and are repeated.
  const outcomeUnknown = reachedServer(err) || apiFailureOf(err)?.error_code === 504;
  if (outcomeUnknown) message += " (the request had reached Telegram: its outcome is unknown)";
  return new PlatformError("telegram", code, message, { cause: scrubError(err, token), retryAfterMs, outcomeUnknown });
}
