/**
 * One daemon per state directory. Two daemons on one state would both resume the same outbox and
 * inbound records (every pending reply sent twice), append to the same transcripts and fight
 * over the platforms' connections (Telegram's 409, WhatsApp's "connection replaced").
 *
 * The lock is a small SQLite file held in EXCLUSIVE locking mode. SQLite's lock is an fcntl lock,
 * which the kernel drops when the process dies, SIGKILL included: a crashed daemon never leaves a
 * stale lock behind. A pid file cannot promise that once pids are reused (a restarted container's
 * daemon often gets the same low pid its predecessor had). The pid is written beside the lock
 * only so the refusal can name the holder.
 */
import { watch as fsWatch, mkdirSync, readFileSync, rmSync, statSync, writeFileSync, type FSWatcher } from "node:fs";
import path from "node:path";
import type pino from "pino";
import sqlite3 from "sqlite3";

export const LOCK_FILE = "switchboard.lock";
const PID_FILE = "switchboard.pid";

export interface StateLock {
  release(): Promise<void>;
}

export class StateDirInUseError extends Error {
  constructor(
    readonly stateDir: string,
    readonly holderPid: number | undefined,
  ) {
    super(
      `state directory ${stateDir} is in use by another switchboard${holderPid ? ` (pid ${holderPid})` : ""}: ` +
        "stop that one first, or give this one its own state with --state-dir or SWITCHBOARD_STATE_DIR",
    );
    this.name = "StateDirInUseError";
  }
}

/**
 * Takes the state directory's lock, or throws StateDirInUseError at once if a live daemon holds it.
 * `log` hears of a lock file removed while it is held (taken again at once: see below).
 */
export async function lockStateDir(stateDir: string, opts: { log?: pino.Logger } = {}): Promise<StateLock> {
  mkdirSync(stateDir, { recursive: true });
  const file = path.join(stateDir, LOCK_FILE);
  const pidFile = path.join(stateDir, PID_FILE);
  let held = await hold(file, stateDir);
  writeFileSync(pidFile, `${process.pid}\n`);
  let released: Promise<void> | undefined;
  /**
   * The lock is on the file's inode, not its name: a lock file removed while held (a clean-up of
   * the state directory, an operator taking it for a stale one) let a second daemon create a new
   * one and lock that, and both then answered every message. A watch on the file (inotify: its
   * link count changing) takes a new one at once, so the second is refused as ever.
   */
  let watcher: FSWatcher | undefined;
  let checking: Promise<void> | undefined;
  const retake = async () => {
    watcher?.close();
    try {
      const next = await hold(file, stateDir);
      await close(held.db);
      held = next;
      if (released) return;
      writeFileSync(pidFile, `${process.pid}\n`);
      opts.log?.warn({ file }, "the state lock file was removed while this daemon held it: taken again");
      watch();
    } catch (err) {
      opts.log?.error({ err: (err as Error).message, file }, "the state lock file was removed while this daemon held it, and could not be taken again: if another switchboard now runs on this state directory, both answer every message — stop one");
    }
  };
  const check = () => {
    if (!released && !checking && statSync(file, { throwIfNoEntry: false })?.ino !== held.ino) checking = retake().finally(() => (checking = undefined));
  };
  const watch = () => {
    try {
      watcher = fsWatch(file, { persistent: false }, check);
      watcher.on("error", () => undefined);
    } catch {
      // Gone again already: the check below sees it.
    }
    // A removal before the watch began is seen too.
    check();
  };
  watch();
  return {
    release() {
      released ??= (async () => {
        watcher?.close();
        await checking;
        rmSync(pidFile, { force: true });
        await close(held.db);
      })();
      return released;
    },
  };
}

/** The lock on `file` (created if missing), held by a connection kept open, with the file's inode. */
async function hold(file: string, stateDir: string): Promise<{ db: sqlite3.Database; ino: number }> {
  const db = await new Promise<sqlite3.Database>((resolve, reject) => {
    const d = new sqlite3.Database(file, (err) => (err ? reject(new Error(`cannot open the state lock ${file}: ${err.message}`, { cause: err })) : resolve(d)));
  });
  // Refuse at once rather than queue behind the holder: it may run for months.
  db.configure("busyTimeout", 0);
  const exec = (sql: string) => new Promise<void>((resolve, reject) => db.exec(sql, (err) => (err ? reject(err) : resolve())));
  try {
    // In EXCLUSIVE locking mode the lock taken by the first write is kept until the connection
    // closes; the journal stays in memory so no side file is left behind.
    await exec("PRAGMA locking_mode=EXCLUSIVE; PRAGMA journal_mode=MEMORY; CREATE TABLE IF NOT EXISTS holder (id INTEGER PRIMARY KEY, pid INTEGER)");
    await exec(`INSERT OR REPLACE INTO holder (id, pid) VALUES (1, ${process.pid})`);
    return { db, ino: statSync(file).ino };
  } catch (err) {
    await close(db);
    if ((err as { code?: string }).code === "SQLITE_BUSY") throw new StateDirInUseError(stateDir, holderPid(stateDir));
    throw new Error(`cannot take the state lock ${file}: ${(err as Error).message}`, { cause: err });
  }
}

function close(db: sqlite3.Database): Promise<void> {
  return new Promise<void>((resolve) => db.close(() => resolve()));
}

function holderPid(stateDir: string): number | undefined {
  try {
    const pid = Number.parseInt(readFileSync(path.join(stateDir, PID_FILE), "utf8"), 10);
    return Number.isSafeInteger(pid) && pid > 0 ? pid : undefined;
  } catch {
    return undefined;
  }
}
