/**
 * Durable key/value spaces through keyv (D5): SQLite file by default, Redis (redis-store.ts) when
 * several daemons share state, `memory://` for tests.
 * In SQLite every namespace shares one table; all writes go through one connection (openWriter),
 * so they never contend for the file lock and commit in the order they were issued.
 */
import { mkdirSync } from "node:fs";
import path from "node:path";
import Keyv from "keyv";
import KeyvSqlite from "@keyv/sqlite";
import sqlite3 from "sqlite3";
import type pino from "pino";
import { assertStorableKey, parseKeyvValue, serializeKeyv } from "./keyv-codec.js";
import { isRedisUrl, maskUrlPassword, REDIS_URL_FORMS } from "./redis-url.js";

export interface KvSpace<T> {
  get(key: string): Promise<T | undefined>;
  set(key: string, value: T): Promise<void>;
  delete(key: string): Promise<void>;
  /** Every [key, value] of the space; used once at start-up to build in-memory indexes. */
  entries(): Promise<Array<[string, T]>>;
  /**
   * Visits every [key, value] in pages, yielding to the event loop between pages: for sweeps of
   * a large space while the daemon runs.
   */
  scan(visit: (key: string, value: T) => void): Promise<void>;
}

export interface KvStore {
  space<T>(namespace: string): KvSpace<T>;
  close(): Promise<void>;
  /** "sqlite:<file>", "redis:<host>:<port>/<db>" or "memory", for logs and `status`. */
  readonly description: string;
  /** Whether what is written survives a restart. */
  readonly durable: boolean;
}

type SqliteStore = InstanceType<typeof KeyvSqlite> & { query(sql: string, ...params: unknown[]): Promise<Array<Record<string, unknown>>> };

export async function openKvStore(url: string, stateDir: string, opts: { log?: pino.Logger } = {}): Promise<KvStore> {
  if (url === "memory://" || url === "memory") return memoryStore();
  if (url.startsWith("sqlite://")) return sqliteStore(resolveSqlitePath(url, stateDir));
  // Loaded only when asked for: a SQLite daemon does not pay for the Redis client at start-up.
  if (isRedisUrl(url)) return (await import("./redis-store.js")).openRedisStore(url, opts.log);
  throw new Error(`unsupported store.url "${maskUrlPassword(url)}": use "sqlite://<file>", ${REDIS_URL_FORMS} or "memory://"`);
}

/** Every [key, value] a space's scan visits. */
export async function entriesOf<T>(scan: KvSpace<T>["scan"]): Promise<Array<[string, T]>> {
  const out: Array<[string, T]> = [];
  await scan((key, value) => out.push([key, value]));
  return out;
}

function resolveSqlitePath(url: string, stateDir: string): string {
  const file = url.slice("sqlite://".length);
  if (!file) return path.join(stateDir, "switchboard.sqlite");
  return path.resolve(file);
}

function memoryStore(): KvStore {
  const map = new Map<string, unknown>();
  return {
    description: "memory",
    durable: false,
    space<T>(namespace: string): KvSpace<T> {
      const prefix = `${namespace}:`;
      return {
        async get(key) {
          return structuredClone(map.get(prefix + key)) as T | undefined;
        },
        async set(key, value) {
          // Deep copy: a memory store must not alias caller objects, or tests would miss persistence bugs.
          map.set(prefix + key, structuredClone(value));
        },
        async delete(key) {
          map.delete(prefix + key);
        },
        async entries() {
          const out: Array<[string, T]> = [];
          for (const [k, v] of map) if (k.startsWith(prefix)) out.push([k.slice(prefix.length), structuredClone(v) as T]);
          return out;
        },
        async scan(visit) {
          for (const [k, v] of [...map]) if (k.startsWith(prefix)) visit(k.slice(prefix.length), structuredClone(v) as T);
        },
      };
    },
    async close() {},
  };
}

async function sqliteStore(file: string): Promise<KvStore> {
  mkdirSync(path.dirname(file), { recursive: true });
  const store = new KeyvSqlite({ uri: `sqlite://${file}`, table: "keyv", busyTimeout: 10_000 }) as SqliteStore;
  // Creates the table (keyv does on connect) before the writer prepares statements against it.
  await store.query("SELECT 1");
  const writer = new BatchWriter(await openWriter(file).catch(async (err: unknown) => {
    await store.disconnect();
    throw err;
  }));
  let closing: Promise<void> | undefined;
  const spaces = new Map<string, Keyv>();
  const keyvFor = (namespace: string): Keyv => {
    let k = spaces.get(namespace);
    if (!k) {
      k = new Keyv({ store, namespace });
      k.on("error", () => {
        /* surfaced to callers through rejected promises */
      });
      spaces.set(namespace, k);
    }
    return k;
  };
  return {
    description: `sqlite:${file}`,
    durable: true,
    space<T>(namespace: string): KvSpace<T> {
      const keyv = keyvFor(namespace);
      const scan = async (visit: (key: string, value: T) => void): Promise<void> => {
        // Keyset pages along the primary key (keyv's offset-paged iterator is quadratic at 100k
        // rows), so the raw rows of only one page are alive at a time: reading 100,000 sessions
        // at once peaked the heap — and the daemon's resident memory — at twice the final size.
        const end = `${namespace};`;
        let after = `${namespace}:`;
        for (let first = true; ; first = false) {
          const rows = await store.query(`SELECT key, value FROM keyv WHERE key ${first ? ">=" : ">"} ? AND key < ? ORDER BY key LIMIT ${ENTRIES_PAGE}`, after, end);
          for (const row of rows) {
            const parsed = parseKeyvValue(String(row.value));
            if (parsed !== undefined) visit(String(row.key).slice(namespace.length + 1), parsed as T);
          }
          if (rows.length < ENTRIES_PAGE) return;
          after = String(rows[rows.length - 1].key);
          await new Promise<void>((resolve) => setImmediate(resolve));
        }
      };
      return {
        async get(key) {
          // Prefixed here as the writer does: keyv leaves a key that already starts with
          // "<namespace>:" unprefixed, so space "cron" would read "cron:x" where it wrote "cron:cron:x".
          return (await keyv.get(`${namespace}:${key}`)) as T | undefined;
        },
        async set(key, value) {
          assertStorableKey(key);
          const raw = serializeKeyv(value);
          await writer.write({ kind: "set", key: `${namespace}:${key}`, raw });
        },
        async delete(key) {
          assertStorableKey(key);
          await writer.write({ kind: "delete", key: `${namespace}:${key}` });
        },
        entries: () => entriesOf(scan),
        scan,
      };
    },
    close() {
      closing ??= writer.close().then(() => store.disconnect());
      return closing;
    },
  };
}

const ENTRIES_PAGE = 2000;

/** The write side of the store: one statement per batch, each one transaction. */
interface Writer {
  upsert(pairs: Array<[key: string, raw: string]>): Promise<void>;
  remove(keys: string[]): Promise<void>;
  close(): Promise<void>;
}

/**
 * A connection of its own for writes, with its statements prepared once. keyv's adapter prepares
 * every query afresh (`Database#all`): two thread-pool round trips per commit, each waiting for a
 * turn of a busy event loop, where a prepared statement takes one — and a commit is on a Telegram
 * reply's path three times (the poll cycle, the inbound message, the reply). A statement has a
 * fixed number of row slots (SLOTS; a batch takes the smallest that fits, unused slots bound to
 * NULL and skipped), so a handful of statements serve every batch size with the values bound as
 * they are. keyv's connection still does the reads (same file, same table, keyv's format; WAL
 * lets them run beside a write).
 */
async function openWriter(file: string): Promise<Writer> {
  const db = await new Promise<sqlite3.Database>((resolve, reject) => {
    const d = new sqlite3.Database(file, (err) => (err ? reject(new Error(`cannot open ${file} for writing: ${err.message}`, { cause: err })) : resolve(d)));
  });
  db.configure("busyTimeout", 10_000);
  const exec = (sql: string) => new Promise<void>((resolve, reject) => db.exec(sql, (err) => (err ? reject(err) : resolve())));
  // WAL + NORMAL: a committed write survives a process kill (kill -9) and a commit does not fsync.
  await exec("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL");
  // One prepared statement per kind and slot count, built on first use.
  const statements = new Map<string, Promise<sqlite3.Statement>>();
  const statement = (kind: "upsert" | "remove", slots: number) => {
    const id = `${kind}:${slots}`;
    let st = statements.get(id);
    if (!st) {
      const sql =
        kind === "upsert"
          ? `INSERT INTO keyv (key, value) SELECT column1, column2 FROM (VALUES ${Array(slots).fill("(?, ?)").join(", ")}) WHERE column1 IS NOT NULL ON CONFLICT(key) DO UPDATE SET value = excluded.value`
          : `DELETE FROM keyv WHERE key IN (${Array(slots).fill("?").join(", ")})`;
      st = new Promise<sqlite3.Statement>((resolve, reject) => {
        const prepared = db.prepare(sql, (err) => (err ? reject(err) : resolve(prepared)));
      });
      statements.set(id, st);
    }
    return st;
  };
  const run = async (kind: "upsert" | "remove", values: string[], perRow: number) => {
    const slots = SLOTS.find((n) => n * perRow >= values.length) ?? values.length / perRow;
    const params: Array<string | null> = [...values, ...Array<null>(slots * perRow - values.length).fill(null)];
    const st = await statement(kind, slots);
    await new Promise<void>((resolve, reject) => st.run(params, (err) => (err ? reject(err) : resolve())));
  };
  return {
    upsert: (pairs) => run("upsert", pairs.flat(), 2),
    remove: (keys) => run("remove", keys, 1),
    async close() {
      for (const st of statements.values()) {
        const prepared = await st.catch(() => undefined);
        if (prepared) await new Promise<void>((resolve) => prepared.finalize(() => resolve()));
      }
      await new Promise<void>((resolve, reject) => db.close((err) => (err ? reject(err) : resolve())));
    },
  };
}

/** Rows one statement takes (bounds a transaction; 2,000 bound values, well under SQLite's limit). */
const MAX_BATCH = 1000;
const SLOTS = [4, 16, 64, 256, MAX_BATCH];

type WriteOp = { kind: "set"; key: string; raw: string } | { kind: "delete"; key: string };

/**
 * Group commit: writes issued while the previous statement runs are coalesced into one
 * multi-row upsert (one SQLite transaction), so a burst of N writes costs a handful of commits
 * instead of N; consecutive deletes likewise share one statement. Order is kept: a run of sets
 * and a run of deletes never share a statement, and statements run in issue order. Each caller
 * resolves after its commit.
 */
class BatchWriter {
  private queue: Array<{ op: WriteOp; resolve: () => void; reject: (err: unknown) => void }> = [];
  private running: Promise<void> | undefined;
  private closed = false;

  constructor(private readonly db: Writer) {}

  /** Commits what was issued, then closes; later writes are refused. */
  async close(): Promise<void> {
    this.closed = true;
    await this.drain();
    await this.db.close();
  }

  write(op: WriteOp): Promise<void> {
    if (this.closed) return Promise.reject(new Error(`store is closed: write of ${op.key} refused`));
    return new Promise((resolve, reject) => {
      this.queue.push({ op, resolve, reject });
      this.running ??= this.run();
    });
  }

  async drain(): Promise<void> {
    while (this.running) await this.running;
  }

  private async run(): Promise<void> {
    // Writes issued in the same turn of the event loop (an adapter accepting a batch; a message
    // enqueued and its first send marked) share one transaction: fewer commits, and a batch
    // succeeds or fails as a whole.
    await new Promise<void>((resolve) => setImmediate(resolve));
    try {
      while (this.queue.length) {
        const batch = this.takeBatch();
        try {
          await this.execute(batch.map((b) => b.op));
          for (const b of batch) b.resolve();
        } catch (err) {
          for (const b of batch) b.reject(err);
        }
      }
    } finally {
      this.running = undefined;
    }
  }

  /** Consecutive writes of one kind, at most MAX_BATCH (bounds one transaction's size). */
  private takeBatch() {
    const kind = this.queue[0].op.kind;
    let n = 0;
    while (n < this.queue.length && n < MAX_BATCH && this.queue[n].op.kind === kind) n++;
    return this.queue.splice(0, n);
  }

  private async execute(ops: WriteOp[]): Promise<void> {
    if (ops[0].kind === "delete") {
      await this.db.remove([...new Set(ops.map((op) => op.key))]);
      return;
    }
    // The last write of a key in the batch wins.
    const latest = new Map<string, string>();
    for (const op of ops) if (op.kind === "set") latest.set(op.key, op.raw);
    await this.db.upsert([...latest]);
  }
}
