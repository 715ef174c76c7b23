/**
 * An operation that failed on I/O (a full disk, a read-only state directory: see isIoError) tried
 * again until the store writes again, for as long as its caller runs: 1 s, doubling up to 30 s,
 * since an operator may take hours to free the disk. Used where giving up loses something no one
 * would send again: an inbound message from a platform that does not redeliver (Discord;
 * WhatsApp, which Baileys acknowledges on arrival), a reply's progress in the outbox, a
 * sub-agent's end and announce. Any other failure is thrown at once; so is the last I/O failure
 * once the caller stops (`signal` aborted or `stopped()`).
 */
import { setTimeout as sleep } from "node:timers/promises";
import { isIoError } from "./io-error.js";

export const IO_RETRY_MAX_MS = 30_000;

export interface IoRetryOptions {
  signal?: AbortSignal;
  stopped?: () => boolean;
  /** The wait between tries (default: a timer cut short by `signal`); tests drive a fake clock. */
  sleep?: (ms: number) => Promise<void>;
  /** After each failure, before its wait; `failures` counts them (1 for the first). */
  onRetry?(err: unknown, failures: number, retryInMs: number): void;
  /** When a try succeeds after `failures` failed ones. */
  onRecovered?(failures: number): void;
}

/** `op` is told how many tries failed before it. */
export async function retryIo<T>(op: (failures: number) => Promise<T>, opts: IoRetryOptions = {}): Promise<T> {
  const over = () => opts.signal?.aborted === true || opts.stopped?.() === true;
  const wait = opts.sleep ?? ((ms: number) => sleep(ms, undefined, { signal: opts.signal }).catch(() => undefined));
  for (let failures = 0; ; failures++) {
    try {
      const result = await op(failures);
      if (failures > 0) opts.onRecovered?.(failures);
      return result;
    } catch (err) {
      if (!isIoError(err) || over()) throw err;
      const retryInMs = Math.min(IO_RETRY_MAX_MS, 1000 * 2 ** failures);
      opts.onRetry?.(err, failures + 1, retryInMs);
      await wait(retryInMs);
      if (over()) throw err;
    }
  }
}
