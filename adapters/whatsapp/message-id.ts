/**
 * The WhatsApp message id of one outbound chunk, derived from the outbox's per-chunk idempotency
 * key. WhatsApp's clients keep a message by its key (chat, sender, id) and their own retries send
 * the same id again, so a chunk repeated under the same id (its first outcome unknown: a crash
 * mid-send, a socket dropped while relaying) shows once to the recipient instead of twice.
 */
import { createHash } from "node:crypto";

/** Shaped like Baileys' own ids ("3EB0" + 36 upper-case hex digits), which every client accepts. */
export function whatsappMessageId(idempotencyKey: string): string {
  return `3EB0${createHash("sha256").update(idempotencyKey).digest("hex").slice(0, 36).toUpperCase()}`;
}
