/**
 * Durable key/value spaces through keyv (D5): SQLite file by default, `memory://` for tests.
 * One SQLite connection is shared by every namespace so writes never contend for the file lock.
 */
import { mkdirSync } from "node:fs";
import path from "node:path";
import Keyv from "keyv";
import KeyvSqlite from "@keyv/sqlite";

export interface KvSpace<T> {
  get(key: string): Promise<T | undefined>;
  set(key: string, value: T): Promise<void>;
  delete(key: string): Promise<void>;
  /** Every [key, value] of the space; used once at start-up to build in-memory indexes. */
  entries(): Promise<Array<[string, T]>>;
}

export interface KvStore {
  space<T>(namespace: string): KvSpace<T>;
  close(): Promise<void>;
  /** "sqlite:<file>" or "memory", for logs and `status`. */
  readonly description: string;
}

type SqliteStore = InstanceType<typeof KeyvSqlite> & { query(sql: string, ...params: unknown[]): Promise<Array<Record<string, unknown>>> };

export async function openKvStore(url: string, stateDir: string): Promise<KvStore> {
  if (url === "memory://" || url === "memory") return memoryStore();
  if (url.startsWith("sqlite://")) return sqliteStore(resolveSqlitePath(url, stateDir));
  throw new Error(`unsupported store.url "${url}": use "sqlite://<file>" or "memory://"`);
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
    space<T>(namespace: string): KvSpace<T> {
      const prefix = `${namespace}:`;
      return {
        async get(key) {
          return map.get(prefix + key) as T | undefined;
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
      };
    },
    async close() {},
  };
}

async function sqliteStore(file: string): Promise<KvStore> {
  mkdirSync(path.dirname(file), { recursive: true });
  const store = new KeyvSqlite({ uri: `sqlite://${file}`, table: "keyv", busyTimeout: 10_000 }) as SqliteStore;
  // WAL + NORMAL: a committed write survives a process kill (kill -9) and writes don't fsync twice.
  await store.query("PRAGMA journal_mode=WAL");
  await store.query("PRAGMA synchronous=NORMAL");
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
    space<T>(namespace: string): KvSpace<T> {
      const keyv = keyvFor(namespace);
      return {
        async get(key) {
          return (await keyv.get(key)) as T | undefined;
        },
        async set(key, value) {
          const ok = await keyv.set(key, value);
          if (!ok) throw new Error(`store write failed: ${namespace}:${key}`);
        },
        async delete(key) {
          await keyv.delete(key);
        },
        async entries() {
          // One scan instead of keyv's offset-paged iterator, which is quadratic at 100k rows.
          const rows = await store.query("SELECT key, value FROM keyv WHERE key >= ? AND key < ?", `${namespace}:`, `${namespace};`);
          const out: Array<[string, T]> = [];
          for (const row of rows) {
            const parsed = parseKeyvValue(String(row.value));
            if (parsed !== undefined) out.push([String(row.key).slice(namespace.length + 1), parsed as T]);
          }
          return out;
        },
      };
    },
    async close() {
      await store.disconnect();
    },
  };
}

function parseKeyvValue(raw: string): unknown {
  try {
    const data = JSON.parse(raw) as { value?: unknown; expires?: number | null };
    if (data.expires && data.expires < Date.now()) return undefined;
    return data.value;
  } catch {
    return undefined;
  }
}
