/**
 * A connection of the test's own to a daemon's SQLite file. Triggers created through it make the
 * store's statements fail as they would on a full disk, or copy what the store writes — nothing of
 * the daemon is replaced or wrapped.
 */
import path from "node:path";
import sqlite3 from "sqlite3";

export interface StoreDb {
  exec(sql: string): Promise<void>;
  all<T>(sql: string): Promise<T[]>;
  close(): Promise<void>;
}

/** Opens `<stateDir>/switchboard.sqlite`, or the file given. */
export async function openStoreDb(stateDirOrFile: string): Promise<StoreDb> {
  const file = stateDirOrFile.endsWith(".sqlite") ? stateDirOrFile : path.join(stateDirOrFile, "switchboard.sqlite");
  const db = await new Promise<sqlite3.Database>((resolve, reject) => {
    const d = new sqlite3.Database(file, (err) => (err ? reject(err) : resolve(d)));
  });
  // The daemon writes to the same file meanwhile.
  db.configure("busyTimeout", 10_000);
  return {
    exec: (sql) => new Promise((resolve, reject) => db.exec(sql, (err) => (err ? reject(err) : resolve()))),
    all: <T>(sql: string) => new Promise<T[]>((resolve, reject) => db.all<T>(sql, (err, rows) => (err ? reject(err) : resolve(rows)))),
    close: () => new Promise((resolve) => db.close(() => resolve())),
  };
}
