/**
 * The Redis store (`redis://`, `rediss://`), for daemons that share state: the same KvStore as the
 * SQLite one — keyv's value format, `namespace::key` keys as @keyv/redis lays them out (so its
 * `createKeyv(url, { namespace })` reads what the daemon wrote), writes applied in issue order.
 *
 * It drives the node-redis client that @keyv/redis ships (and re-exports) instead of going through
 * keyv: `keyv.set` and `keyv.delete` await a different number of hooks before their command
 * reaches the socket, so a delete issued after a set of the same key can overtake it, and the
 * adapter's iterator neither pages with a yield nor escapes glob characters in the namespace. One
 * connection with commands pipelined in issue order is what keeps a reply's outbox record from
 * becoming durable before the entry writes issued before it.
 */
import { createClient } from "@keyv/redis";
import type pino from "pino";
import { entriesOf, type KvSpace, type KvStore } from "./kv.js";
import { assertStorableKey, parseKeyvValue, serializeKeyv } from "./keyv-codec.js";
import { parseRedisUrl } from "./redis-url.js";

/** @keyv/redis's keyPrefixSeparator. */
const SEPARATOR = "::";
/** Keys SCAN examines per call (a hint to Redis; a page may hold fewer matches, even none). */
const SCAN_COUNT = 1000;
/** Values fetched per MGET while visiting (as the SQLite store's page). */
const VALUES_PAGE = 2000;
/** Bounds start-up when the server accepts the connection but never answers the handshake. */
const START_TIMEOUT_MS = 10_000;
const CONNECT_TIMEOUT_MS = 5_000;

type RedisClient = ReturnType<typeof createClient>;

export async function openRedisStore(url: string, log?: pino.Logger): Promise<KvStore> {
  const target = parseRedisUrl(url);
  const { description } = target;
  const scrub = scrubber(target.password);
  let started = false;
  const client: RedisClient = createClient({
    socket: {
      host: target.host,
      port: target.port,
      connectTimeout: CONNECT_TIMEOUT_MS,
      ...(target.tls ? { tls: true as const, servername: target.host } : {}),
      // At start a failure is final (openKvStore rejects, naming the URL); once running, the client
      // reconnects for as long as it takes, backing off to one attempt every 2 s.
      reconnectStrategy: (retries: number, cause: Error) => (started ? Math.min(50 * 2 ** retries, 2000) : cause),
    },
    ...(target.username ? { username: target.username } : {}),
    ...(target.password ? { password: target.password } : {}),
    database: target.db,
    // A command issued while disconnected is refused at once instead of queued by the client: the
    // writer below keeps unacknowledged writes itself and sends them again in order (a client-side
    // queue would send the writes issued during the outage before the in-flight ones it rejected).
    disableOfflineQueue: true,
  });
  const writer = new OrderedWriter(client, description, scrub);
  let connected = true;
  // Without a listener an 'error' event would crash the process; the client reconnects on its own.
  client.on("error", (err: Error) => {
    if (!started || !connected) return;
    connected = false;
    log?.warn({ store: description, err: scrub(err.message), waitingWrites: writer.size }, "store connection lost; reconnecting (writes wait and are sent again in order)");
  });
  client.on("ready", () => {
    if (!started) return;
    if (!connected) log?.info({ store: description, waitingWrites: writer.size }, "store reconnected");
    connected = true;
    writer.resend();
  });
  await connect(client, START_TIMEOUT_MS).catch((err: unknown) => {
    throw new Error(`store unreachable: ${target.masked} (${scrub(errorText(err))})`);
  });
  started = true;

  const read = async <R>(what: string, run: () => Promise<R>): Promise<R> => {
    try {
      return await run();
    } catch (err) {
      throw new Error(`store read of ${what} failed on ${description}: ${scrub(errorText(err))}`, { cause: err });
    }
  };
  let closed = false;
  let closing: Promise<void> | undefined;
  return {
    description,
    durable: true,
    space<T>(namespace: string): KvSpace<T> {
      const prefix = `${namespace}${SEPARATOR}`;
      const match = `${escapeGlob(prefix)}*`;
      const write = (key: string, args: string[]): Promise<void> => {
        if (closed) return Promise.reject(new Error(`store is closed: write of ${namespace}:${key} refused`));
        return writer.write(`${namespace}:${key}`, args);
      };
      const scan = async (visit: (key: string, value: T) => void): Promise<void> => {
        // SCAN may return a key twice and in no order: collect the names (small) into a set, then
        // fetch values page by page in key order, so only one page of values is alive at a time.
        const keys = new Set<string>();
        let cursor = "0";
        do {
          const page = await read(`${namespace} (SCAN)`, () => client.scan(cursor, { MATCH: match, COUNT: SCAN_COUNT }));
          for (const key of page.keys) keys.add(key);
          cursor = page.cursor;
          if (cursor !== "0") await yieldToEventLoop();
        } while (cursor !== "0");
        const sorted = [...keys].sort();
        for (let i = 0; i < sorted.length; i += VALUES_PAGE) {
          if (i > 0) await yieldToEventLoop();
          const names = sorted.slice(i, i + VALUES_PAGE);
          const raws = await read(`${namespace} (MGET)`, () => client.mGet(names));
          raws.forEach((raw, j) => {
            // Deleted since SCAN saw it (null), expired or foreign (undefined): not an entry.
            const value = raw === null ? undefined : parseKeyvValue(raw);
            if (value !== undefined) visit(names[j].slice(prefix.length), value as T);
          });
        }
      };
      return {
        async get(key) {
          const raw = await read(`${namespace}:${key}`, () => client.get(prefix + key));
          return raw === null ? undefined : (parseKeyvValue(raw) as T | undefined);
        },
        async set(key, value) {
          assertStorableKey(key);
          await write(key, ["SET", prefix + key, serializeKeyv(value)]);
        },
        async delete(key) {
          assertStorableKey(key);
          await write(key, ["DEL", prefix + key]);
        },
        entries: () => entriesOf(scan),
        scan,
      };
    },
    close() {
      closing ??= (async () => {
        closed = true;
        // Wait for every write issued so far to be acknowledged — unless the connection is (or
        // goes) down: shutdown must not hang on an outage; those writes fail to their callers.
        const dropped = new Promise<void>((resolve) => client.once("error", () => resolve()));
        if (writer.size && client.isReady) await Promise.race([writer.idle(), dropped]);
        writer.failAll((key) => new Error(`store closed while ${description} was unreachable: write of ${key} may not have been applied`));
        // close() waits for the replies of reads still in flight, which a drop would never bring.
        if (client.isReady) await Promise.race([client.close(), dropped]);
        else if (client.isOpen) client.destroy();
      })();
      return closing;
    },
  };
}

interface PendingWrite {
  key: string;
  args: string[];
  resolve: () => void;
  reject: (err: Error) => void;
  /** The connection (resend generation) it was last sent on. */
  sentOn: number;
}

/**
 * Writes in issue order on one connection, none lost to a dropped connection. Each write is sent
 * as soon as it is issued (node-redis pipelines what is issued in one turn of the event loop) and
 * stays pending until Redis acknowledges it. When the connection drops, the replies of what was
 * in flight are lost — those writes may or may not have been applied — and writes issued during
 * the outage cannot be sent; after the reconnect every pending write is sent again, in issue
 * order. SET and DEL are idempotent, so a write applied twice in the same order leaves the same
 * state. A write Redis itself refuses (an error reply) fails to its caller.
 */
class OrderedWriter {
  /** Insertion-ordered: issue order, and O(1) removal as acknowledgements arrive. */
  private readonly pending = new Map<number, PendingWrite>();
  private nextId = 0;
  private generation = 0;
  private idleWaiters: Array<() => void> = [];

  constructor(
    private readonly client: RedisClient,
    private readonly description: string,
    private readonly scrub: (text: string) => string,
  ) {}

  get size(): number {
    return this.pending.size;
  }

  write(key: string, args: string[]): Promise<void> {
    return new Promise((resolve, reject) => {
      const id = this.nextId++;
      const w: PendingWrite = { key, args, resolve, reject, sentOn: -1 };
      this.pending.set(id, w);
      if (this.client.isReady) this.send(id, w);
    });
  }

  /** After a reconnect: everything not acknowledged, in issue order. */
  resend(): void {
    this.generation++;
    for (const [id, w] of this.pending) this.send(id, w);
  }

  idle(): Promise<void> {
    return this.pending.size ? new Promise((resolve) => this.idleWaiters.push(resolve)) : Promise.resolve();
  }

  failAll(reason: (key: string) => Error): void {
    for (const w of this.pending.values()) w.reject(reason(w.key));
    this.pending.clear();
    this.notifyIdle();
  }

  private send(id: number, w: PendingWrite): void {
    const generation = (w.sentOn = this.generation);
    this.client.sendCommand(w.args).then(
      () => this.settle(id, generation),
      (err: unknown) => {
        // Rejected because the connection went down: outcome unknown, kept for the resend.
        if (!this.client.isReady) return;
        this.settle(id, generation, new Error(`store write of ${w.key} failed on ${this.description}: ${this.scrub(errorText(err))}`, { cause: err }));
      },
    );
  }

  private settle(id: number, generation: number, err?: Error): void {
    const w = this.pending.get(id);
    // A reply from an earlier connection, for a write sent again since: the newer send decides.
    if (!w || w.sentOn !== generation) return;
    this.pending.delete(id);
    if (err) w.reject(err);
    else w.resolve();
    if (!this.pending.size) this.notifyIdle();
  }

  private notifyIdle(): void {
    for (const resolve of this.idleWaiters.splice(0)) resolve();
  }
}

/** Connects, or rejects within `ms` (a server that accepts but never answers would hang connect). */
async function connect(client: RedisClient, ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const connecting = client.connect();
  try {
    await Promise.race([connecting, new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`no answer within ${ms / 1000} s`)), ms)))]);
  } catch (err) {
    // Stops the retries of a connect still under way; its own rejection has nobody to tell.
    connecting.catch(() => undefined);
    if (client.isOpen) client.destroy();
    throw err;
  } finally {
    clearTimeout(timer);
  }
}

/** Masks the password wherever a message might echo it (raw or URL-encoded). */
function scrubber(password: string | undefined): (text: string) => string {
  if (!password) return (text) => text;
  const forms = [...new Set([password, encodeURIComponent(password)])];
  return (text) => forms.reduce((out, form) => out.split(form).join("***"), text);
}

function errorText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/** A literal string as a SCAN MATCH pattern: glob characters escaped. */
function escapeGlob(text: string): string {
  return text.replace(/[*?[\]\\]/g, "\\$&");
}

function yieldToEventLoop(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}
