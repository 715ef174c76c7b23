/** Every Baileys send failure becomes one PlatformError, decided here and nowhere else (style §5). */
import { PlatformError } from "../../src/channels/types.js";
import { statusCodeOf } from "./reconnect.js";

/**
 * A query the server answered with an IQ error — a group send first queries the group, so a group
 * we were removed from answers 403 "forbidden" — is a Boom whose status is always 500, with the
 * server's code in `data` (Baileys' assertNodeErrorFree). That code is the one that tells.
 */
function iqErrorCodeOf(err: unknown): number | undefined {
  const data = (err as { isBoom?: unknown; data?: unknown } | null | undefined)?.data;
  return (err as { isBoom?: unknown } | null | undefined)?.isBoom === true && typeof data === "number" && Number.isInteger(data) && data > 0 ? data : undefined;
}

export function toPlatformError(err: unknown): PlatformError {
  if (err instanceof PlatformError) return err;
  const status = iqErrorCodeOf(err) ?? statusCodeOf(err);
  const message = `send failed${status ? ` (${status})` : ""}: ${err instanceof Error ? err.message : String(err)}`;
  const opts = { cause: err };
  switch (status) {
    case 429:
      return new PlatformError("whatsapp", "rate_limited", message, opts);
    case 401:
      return new PlatformError("whatsapp", "auth", message, opts);
    case 403:
      return new PlatformError("whatsapp", "forbidden", message, opts);
    case 404:
      return new PlatformError("whatsapp", "not_found", message, opts);
    // A malformed request stays malformed; retrying it would only burn the outbox's attempts.
    case 400:
      return new PlatformError("whatsapp", "invalid", message, opts);
    // Baileys reports a dropped socket as 408/428 and timeouts without a status: all retryable.
    default:
      return new PlatformError("whatsapp", "transport", message, opts);
  }
}
