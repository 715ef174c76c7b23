/**
 * Every Discord failure becomes a PlatformError here, so the outbox can decide retry vs give up from
 * `code` alone. Messages carry Discord's own text and code but never a credential.
 */
import { DiscordAPIError, DiscordjsError, DiscordjsErrorCodes, HTTPError, RateLimitError } from "discord.js";
import { PlatformError, type PlatformErrorCode } from "../../src/channels/types.js";

/** Discord JSON error codes that mean "you may not do this here". */
const FORBIDDEN_CODES = new Set([50001 /* Missing Access */, 50013 /* Missing Permissions */, 50007 /* Cannot DM user */]);
/** Unknown Channel/Message/Webhook/Interaction. */
const NOT_FOUND_CODES = new Set([10003, 10008, 10015, 10062]);

/** Removes the bot token and interaction/webhook tokens (which sit in URL paths) from text. */
export function redact(text: string, token?: string): string {
  let out = text.replace(/\/(interactions\/\d+|webhooks\/\d+)\/[^/\s?]+/g, "/$1/:token");
  if (token) out = out.split(token).join("[token]");
  return out;
}

function pathOf(url: string): string {
  try {
    return new URL(url).pathname;
  } catch {
    return url;
  }
}

function classifyApiError(status: number, code: number | string): PlatformErrorCode {
  if (status === 429) return "rate_limited";
  if (status === 401) return "auth";
  if (status === 403 || (typeof code === "number" && FORBIDDEN_CODES.has(code))) return "forbidden";
  if (status === 404 || (typeof code === "number" && NOT_FOUND_CODES.has(code))) return "not_found";
  if (status >= 500) return "transport";
  return "invalid";
}

/**
 * The other closes @discordjs/ws does not reconnect from (4010, 4011, 4012, 4013): as permanent as a
 * bad token, and a login retried on them would spend an IDENTIFY each time (1000 a day; Discord
 * resets the token of a bot that exceeds them).
 */
const FATAL_GATEWAY_ERRORS = new Set(["Invalid shard", "Sharding is required", "Used an invalid API version", "Used invalid intents"]);

/** What the operator does about a refused login, appended to the error they see (log and `switchboard status`). */
const TOKEN_REFUSED_HINT = " — Discord refused the bot token: copy it from the Developer Portal (your application → Bot → Reset Token) into channels.discord.token, then restart";
/** Gateway close 4014: the bot asks for Message Content, a privileged intent the application has not enabled. */
const INTENT_HINT = " — enable Message Content Intent in the Developer Portal (your application → Bot → Privileged Gateway Intents), then restart";

function gatewayCode(err: Error): PlatformErrorCode | null {
  if (err instanceof DiscordjsError && err.code === DiscordjsErrorCodes.TokenInvalid) return "auth";
  // @discordjs/ws reports fatal close codes as plain Errors: 4004 and 4014.
  if (err.message === "Authentication failed") return "auth";
  if (err.message === "Used disallowed intents") return "forbidden";
  if (FATAL_GATEWAY_ERRORS.has(err.message)) return "invalid";
  return null;
}

/** Maps anything thrown by discord.js/@discordjs/rest (or our own code) to a PlatformError. */
export function toPlatformError(err: unknown, token?: string): PlatformError {
  if (err instanceof PlatformError) return err;
  const clean = (s: string) => redact(s, token);
  if (err instanceof RateLimitError) {
    return new PlatformError("discord", "rate_limited", clean(`rate limited on ${err.method.toUpperCase()} ${err.route} for ${err.retryAfter} ms`), {
      cause: err,
      retryAfterMs: err.retryAfter,
    });
  }
  if (err instanceof DiscordAPIError) {
    const code = classifyApiError(err.status, err.code);
    const raw = err.rawError as { retry_after?: number };
    const retryAfterMs = code === "rate_limited" && typeof raw.retry_after === "number" ? Math.ceil(raw.retry_after * 1000) : undefined;
    return new PlatformError("discord", code, clean(`${err.status} ${err.code}: ${err.message} (${err.method.toUpperCase()} ${pathOf(err.url)})`), {
      cause: err,
      retryAfterMs,
    });
  }
  if (err instanceof HTTPError) {
    return new PlatformError("discord", err.status === 429 ? "rate_limited" : err.status >= 500 ? "transport" : "invalid", clean(`HTTP ${err.status} ${err.message}`), { cause: err });
  }
  if (err instanceof Error) {
    const code = gatewayCode(err) ?? "transport";
    const cause = (err as { cause?: { code?: string } }).cause;
    const timedOut = err.name === "AbortError" || err.name === "TimeoutError";
    const detail = timedOut ? "request timed out (outcome unknown)" : err.message;
    // No answer in time: the message may have been created. The outbox repeats it under its nonce,
    // but only while Discord still dedupes that (IDEMPOTENCY_WINDOW_MS).
    const hint = code === "auth" ? TOKEN_REFUSED_HINT : err.message === "Used disallowed intents" ? INTENT_HINT : "";
    return new PlatformError("discord", code, clean(cause?.code ? `${detail} (${cause.code})` : detail) + hint, { cause: err, outcomeUnknown: timedOut });
  }
  return new PlatformError("discord", "transport", clean(String(err)), { cause: err });
}
