/**
 * The send journal: which chunks' platform calls may have started, written synchronously the
 * instant before each call.
 *
 * The outbox marks a chunk `attempted` in the store before sending it, so that a restart never
 * re-sends blind on a platform without idempotency keys (Telegram, WhatsApp). That mark commits on
 * SQLite's thread, and the main thread learns of the commit a turn of the event loop later (ms on a
 * busy loop); a kill in between left a reply that never reached the platform recorded as
 * `unknown_after_send`, and its user without an answer. One `write(2)` here, immediately before
 * the call, narrows "may have started" to what really may have: a record the store shows as
 * `attempted` whose line is missing was never handed to the platform, and is sent after the
 * restart. Lines reach the page cache before the call starts, so they survive a process kill (not
 * a power cut — neither do the store's newest commits, WAL with synchronous=NORMAL).
 *
 * The file only holds lines still needed: those whose outcome the store has not yet recorded. It
 * is rewritten with just those at start-up and whenever it has grown past REWRITE_BYTES, by a
 * rename, so a kill mid-rewrite leaves the old or the new file, each complete.
 */
import { closeSync, existsSync, mkdirSync, openSync, readFileSync, renameSync, writeFileSync, writeSync } from "node:fs";
import path from "node:path";

/** Bytes appended before the file is rewritten with only its open lines (~25,000 sends). */
const REWRITE_BYTES = 1 << 20;

export interface SendJournal {
  /** Whether an earlier process wrote a line for this chunk: its platform call may have started. */
  mayHaveStarted(id: string, chunk: number): boolean;
  /** Records, durably against a process kill, that the chunk's platform call starts now. */
  starting(id: string, chunk: number): void;
  /**
   * The store now holds an outcome for every started chunk of `id` (sent, failed, retried or
   * reconciled): its lines are no longer needed.
   */
  settled(id: string): void;
  /**
   * Drops the earlier process's lines except those `keep` still needs (records the store shows
   * as `attempted` and not yet reconciled), so the file does not grow across restarts.
   */
  retain(keep: (id: string, chunk: number) => boolean): void;
  close(): void;
}

/**
 * Without a file (memory stores, tests): any chunk marked `attempted` may have started, which is
 * the conservative answer: never a duplicate, possibly an `unknown_after_send`.
 */
export const conservativeJournal: SendJournal = {
  mayHaveStarted: () => true,
  starting() {},
  settled() {},
  retain() {},
  close() {},
};

/**
 * A journal kept in `file` (created if missing); reads the previous process's lines at once.
 * Without a file (a state directory from before the journal, or one restored without it) every
 * interrupted send may have started, as without a journal.
 */
export function openSendJournal(file: string): SendJournal {
  mkdirSync(path.dirname(file), { recursive: true });
  const found = existsSync(file);
  /** The previous process's lines: id → chunks. */
  const earlier = found ? parseJournal(readFileSync(file, "utf8")) : new Map<string, Set<number>>();
  /** This process's lines whose outcome is not yet in the store: id → chunks. */
  const open = new Map<string, Set<number>>();
  let fd: number | undefined;
  let written = 0;

  /** Replaces the file with the lines still needed, then appends to the new one. */
  const rewrite = () => {
    let text = "";
    for (const map of [earlier, open]) for (const [id, chunks] of map) for (const chunk of chunks) text += line(id, chunk);
    const tmp = `${file}.tmp`;
    writeFileSync(tmp, text);
    renameSync(tmp, file);
    if (fd !== undefined) closeSync(fd);
    fd = openSync(file, "a");
    written = 0;
  };

  return {
    mayHaveStarted: (id, chunk) => !found || (earlier.get(id)?.has(chunk) ?? false),
    starting(id, chunk) {
      if (fd === undefined) rewrite();
      const text = line(id, chunk);
      writeSync(fd as number, text);
      addChunk(open, id, chunk);
      written += text.length;
      if (written > REWRITE_BYTES) rewrite();
    },
    settled(id) {
      earlier.delete(id);
      open.delete(id);
    },
    retain(keep) {
      for (const [id, chunks] of earlier) {
        for (const chunk of chunks) if (!keep(id, chunk)) chunks.delete(chunk);
        if (!chunks.size) earlier.delete(id);
      }
      rewrite();
    },
    close() {
      if (fd !== undefined) closeSync(fd);
      fd = undefined;
    },
  };
}

/** One line: a JSON array, so any id (gateway idempotency keys are caller-chosen) stays one line. */
function line(id: string, chunk: number): string {
  return `${JSON.stringify([id, chunk])}\n`;
}

/** Lines that do not parse (a line torn by a kill mid-write: its call had not started) are skipped. */
export function parseJournal(text: string): Map<string, Set<number>> {
  const out = new Map<string, Set<number>>();
  for (const raw of text.split("\n")) {
    if (!raw) continue;
    let parsed: unknown;
    try {
      parsed = JSON.parse(raw);
    } catch {
      continue;
    }
    if (!Array.isArray(parsed) || parsed.length !== 2 || typeof parsed[0] !== "string" || !Number.isInteger(parsed[1])) continue;
    addChunk(out, parsed[0] as string, parsed[1] as number);
  }
  return out;
}

function addChunk(map: Map<string, Set<number>>, id: string, chunk: number): void {
  let chunks = map.get(id);
  if (!chunks) map.set(id, (chunks = new Set()));
  chunks.add(chunk);
}
