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
import { mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import path from "node:path";
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

/** Takes the state directory's lock, or throws StateDirInUseError at once if a live daemon holds it. */
export async function lockStateDir(stateDir: string): Promise<StateLock> {
  mkdirSync(stateDir, { recursive: true });
  const file = path.join(stateDir, LOCK_FILE);
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
  } catch (err) {
    await new Promise<void>((resolve) => db.close(() => resolve()));
    if ((err as { code?: string }).code === "SQLITE_BUSY") throw new StateDirInUseError(stateDir, holderPid(stateDir));
    throw new Error(`cannot take the state lock ${file}: ${(err as Error).message}`, { cause: err });
  }
  const pidFile = path.join(stateDir, PID_FILE);
  writeFileSync(pidFile, `${process.pid}\n`);
  let released: Promise<void> | undefined;
  return {
    release() {
      released ??= new Promise<void>((resolve) => {
        rmSync(pidFile, { force: true });
        db.close(() => resolve());
      });
      return released;
    },
  };
}

function holderPid(stateDir: string): number | undefined {
  try {
    const pid = Number.parseInt(readFileSync(path.join(stateDir, PID_FILE), "utf8"), 10);
    return Number.isSafeInteger(pid) && pid > 0 ? pid : undefined;
  } catch {
    return undefined;
  }
}
