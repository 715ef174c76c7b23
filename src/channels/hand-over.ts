/**
 * Handing an inbound message to the core on a platform that will not deliver it again (Discord;
 * WhatsApp, which Baileys acknowledges on arrival). The core refuses a message it cannot store,
 * so that a platform that redelivers (Telegram's offset) sends it again; here nothing would, and
 * a full disk or a read-only state directory lost every message that came meanwhile. Such a
 * failure is retried until the store writes again, in the message's place in its conversation's
 * queue, so the messages behind it keep their order.
 */
import { setTimeout as sleep } from "node:timers/promises";
import { isIoError } from "../util/io-error.js";

/** Retries start at 1 s and double up to this: a full disk may take an operator hours to clear. */
const MAX_RETRY_DELAY_MS = 30_000;

export interface HandOverOptions {
  /** Aborted when the adapter stops: the message is then given up (the adapter says so). */
  signal: AbortSignal;
  /** Before each wait: the adapter logs it and shows it in `health`. */
  onRetry(err: unknown, attempt: number, retryInMs: number): void;
}

/** Resolves once the core has accepted `handOver`'s message; rejects on any other failure, or once stopped. */
export async function handOverRetrying(handOver: () => Promise<void>, opts: HandOverOptions): Promise<void> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await handOver();
    } catch (err) {
      if (!isIoError(err) || opts.signal.aborted) throw err;
      const delay = Math.min(MAX_RETRY_DELAY_MS, 1000 * 2 ** (attempt - 1));
      opts.onRetry(err, attempt, delay);
      await sleep(delay, undefined, { signal: opts.signal }).catch(() => undefined);
      if (opts.signal.aborted) throw err;
    }
  }
}
