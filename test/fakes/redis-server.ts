/**
 * A Redis server for tests: real TCP on 127.0.0.1 speaking RESP2 (and RESP3 after `HELLO 3`),
 * with exactly the commands the store's client sends — an unknown one is answered
 * `ERR unknown command '<name>'`, so a missing one shows up as an error, not a hang. The keyspace
 * (one per db) lives as long as the fake: it survives client disconnects and daemon restarts.
 * Faults for tests: `requirepass`, dropping every connection, refusing new ones, stalling replies,
 * refusing writes to a key, and SCAN pages that repeat a key (as real SCAN may).
 */
import net from "node:net";

type Reply = { simple: string } | { error: string } | number | Buffer | null | Reply[] | { map: Array<[string, Reply]> };

interface Entry {
  value: Buffer;
  expiresAt?: number;
  /** Creation order: SCAN's cursor is the seq of the last key it examined. */
  seq: number;
}

interface Conn {
  socket: net.Socket;
  buffer: Buffer;
  db: number;
  authed: boolean;
  proto: 2 | 3;
}

const OK = { simple: "OK" };
const DATABASES = 16;

export class FakeRedisServer {
  /** Every command received, as [NAME, ...args] (args decoded as UTF-8), in arrival order. */
  readonly commands: string[][] = [];
  /** New connections are closed at once (the server is "down"); existing ones are left alone. */
  refuseConnections = false;
  /**
   * "apply-without-reply": commands run but get no reply (replies lost in flight); "swallow":
   * commands are neither run nor answered. Reset by dropConnections().
   */
  stall: "off" | "apply-without-reply" | "swallow" = "off";
  /** Each SCAN page starts again at the last key of the previous one (real SCAN may repeat keys). */
  scanRepeats = false;
  /** Connections accepted so far (a reconnect shows as one more). */
  accepted = 0;
  private readonly server = net.createServer((socket) => this.accept(socket));
  private readonly conns = new Set<Conn>();
  private readonly dbs = Array.from({ length: DATABASES }, () => new Map<string, Entry>());
  private readonly refused = new Map<string, string>();
  private seq = 0;

  constructor(private readonly opts: { requirepass?: string } = {}) {}

  async start(): Promise<number> {
    await new Promise<void>((resolve) => this.server.listen(0, "127.0.0.1", resolve));
    return this.port;
  }

  get port(): number {
    return (this.server.address() as net.AddressInfo).port;
  }

  /** redis://[:password@]127.0.0.1:<port>[/db] */
  url(opts: { password?: string; db?: number } = {}): string {
    const auth = opts.password === undefined ? "" : `:${encodeURIComponent(opts.password)}@`;
    return `redis://${auth}127.0.0.1:${this.port}${opts.db === undefined ? "" : `/${opts.db}`}`;
  }

  async stop(): Promise<void> {
    this.dropConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  /** Closes every client connection at once (as a Redis restart or a network cut would). */
  dropConnections(): void {
    this.stall = "off";
    for (const c of this.conns) c.socket.destroy();
    this.conns.clear();
  }

  /** SET and DEL of `key` (db 0) are answered with `-<error>` instead of being applied. */
  refuse(key: string, error: string): void {
    this.refused.set(key, error);
  }

  /** The value stored at `key` (UTF-8), or undefined. */
  value(key: string, db = 0): string | undefined {
    return this.live(db, Buffer.from(key).toString("latin1"))?.value.toString("utf8");
  }

  /** Every live key of `db` (UTF-8), in creation order. */
  keys(db = 0): string[] {
    return [...this.dbs[db].keys()].filter((k) => this.live(db, k)).map((k) => Buffer.from(k, "latin1").toString("utf8"));
  }

  private accept(socket: net.Socket): void {
    this.accepted++;
    if (this.refuseConnections) {
      socket.destroy();
      return;
    }
    const conn: Conn = { socket, buffer: Buffer.alloc(0), db: 0, authed: !this.opts.requirepass, proto: 2 };
    this.conns.add(conn);
    socket.on("error", () => undefined);
    socket.on("close", () => this.conns.delete(conn));
    socket.on("data", (chunk) => {
      conn.buffer = conn.buffer.length ? Buffer.concat([conn.buffer, chunk]) : chunk;
      for (let cmd = parseCommand(conn); cmd; cmd = parseCommand(conn)) this.handle(conn, cmd);
    });
  }

  private handle(conn: Conn, args: Buffer[]): void {
    if (!args.length) return;
    const name = args[0].toString("latin1").toUpperCase();
    this.commands.push([name, ...args.slice(1).map((a) => a.toString("utf8"))]);
    if (this.stall === "swallow") return;
    const reply = this.run(conn, name, args[0].toString("utf8"), args.slice(1));
    if (this.stall === "apply-without-reply" || conn.socket.destroyed) return;
    conn.socket.write(encode(reply, conn.proto));
    if (name === "QUIT") conn.socket.end();
  }

  private run(conn: Conn, name: string, sent: string, args: Buffer[]): Reply {
    const str = (i: number) => args[i]?.toString("latin1");
    if (!conn.authed && !["AUTH", "HELLO", "QUIT"].includes(name)) return { error: "NOAUTH Authentication required." };
    const db = this.dbs[conn.db];
    switch (name) {
      case "HELLO": {
        const proto = args.length ? Number(str(0)) : conn.proto;
        if (proto !== 2 && proto !== 3) return { error: "NOPROTO unsupported protocol version" };
        for (let i = 1; i < args.length; i++) {
          const opt = str(i).toUpperCase();
          if (opt === "AUTH") {
            const refusal = this.authenticate(conn, args[i + 1].toString("utf8"), args[i + 2].toString("utf8"));
            if (refusal) return refusal;
            i += 2;
          } else if (opt === "SETNAME") i += 1;
          else return { error: `ERR Syntax error in HELLO option '${opt}'` };
        }
        if (!conn.authed) return { error: "NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time" };
        conn.proto = proto;
        return { map: [["server", Buffer.from("redis")], ["version", Buffer.from("7.2.0")], ["proto", proto], ["id", this.accepted], ["mode", Buffer.from("standalone")], ["role", Buffer.from("master")], ["modules", []]] };
      }
      case "AUTH": {
        if (args.length < 1 || args.length > 2) return wrongArgs(name);
        const [user, password] = args.length === 2 ? [args[0].toString("utf8"), args[1].toString("utf8")] : ["default", args[0].toString("utf8")];
        return this.authenticate(conn, user, password) ?? OK;
      }
      case "CLIENT": {
        const sub = str(0)?.toUpperCase();
        if (sub === "SETINFO" || sub === "SETNAME") return OK;
        return { error: `ERR unknown subcommand '${str(0)}'. Try CLIENT HELP.` };
      }
      case "SELECT": {
        const n = Number(str(0));
        if (!Number.isInteger(n)) return { error: "ERR value is not an integer or out of range" };
        if (n < 0 || n >= DATABASES) return { error: "ERR DB index is out of range" };
        conn.db = n;
        return OK;
      }
      case "PING":
        return args.length ? args[0] : { simple: "PONG" };
      case "QUIT":
        return OK;
      case "GET":
        if (args.length !== 1) return wrongArgs(name);
        return this.live(conn.db, str(0))?.value ?? null;
      case "MGET":
        if (!args.length) return wrongArgs(name);
        return args.map((_, i) => this.live(conn.db, str(i))?.value ?? null);
      case "EXISTS":
        if (!args.length) return wrongArgs(name);
        return args.filter((_, i) => this.live(conn.db, str(i))).length;
      case "SET":
        return this.set(conn.db, args);
      case "DEL":
      case "UNLINK": {
        if (!args.length) return wrongArgs(name);
        for (let i = 0; i < args.length; i++) {
          const refusal = this.refusal(conn.db, str(i));
          if (refusal) return refusal;
        }
        return args.filter((_, i) => this.live(conn.db, str(i)) && db.delete(str(i))).length;
      }
      case "SCAN":
        return this.scan(conn.db, args);
      default:
        return { error: `ERR unknown command '${sent}', with args beginning with: ${args.slice(0, 3).map((a) => `'${a.toString("utf8")}' `).join("")}` };
    }
  }

  private authenticate(conn: Conn, user: string, password: string): Reply | undefined {
    if (!this.opts.requirepass) return { error: "ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?" };
    if (user !== "default" || password !== this.opts.requirepass) return { error: "WRONGPASS invalid username-password pair or user is disabled." };
    conn.authed = true;
    return undefined;
  }

  private refusal(db: number, key: string): Reply | undefined {
    const error = db === 0 ? this.refused.get(key) : undefined;
    return error ? { error } : undefined;
  }

  /** SET key value [NX|XX] [EX s|PX ms|KEEPTTL] */
  private set(dbIndex: number, args: Buffer[]): Reply {
    if (args.length < 2) return wrongArgs("SET");
    const key = args[0].toString("latin1");
    let expiresAt: number | undefined;
    let keepTtl = false;
    let condition: "NX" | "XX" | undefined;
    for (let i = 2; i < args.length; i++) {
      const opt = args[i].toString("latin1").toUpperCase();
      if (opt === "NX" || opt === "XX") condition = opt;
      else if (opt === "KEEPTTL") keepTtl = true;
      else if (opt === "EX" || opt === "PX") {
        const n = Number(args[++i]?.toString("latin1"));
        if (!Number.isInteger(n) || n <= 0) return { error: "ERR invalid expire time in 'set' command" };
        expiresAt = Date.now() + (opt === "EX" ? n * 1000 : n);
      } else return { error: "ERR syntax error" };
    }
    const refusal = this.refusal(dbIndex, key);
    if (refusal) return refusal;
    const existing = this.live(dbIndex, key);
    if ((condition === "NX" && existing) || (condition === "XX" && !existing)) return null;
    const entry: Entry = { value: args[1], seq: existing?.seq ?? ++this.seq };
    const ttl = keepTtl ? existing?.expiresAt : expiresAt;
    if (ttl !== undefined) entry.expiresAt = ttl;
    this.dbs[dbIndex].set(key, entry);
    return OK;
  }

  /** SCAN cursor [MATCH pattern] [COUNT n] [TYPE string]: COUNT keys examined per call, as Redis does. */
  private scan(dbIndex: number, args: Buffer[]): Reply {
    const cursor = Number(args[0]?.toString("latin1"));
    if (!Number.isInteger(cursor) || cursor < 0) return { error: "ERR invalid cursor" };
    let pattern: RegExp | undefined;
    let count = 10;
    for (let i = 1; i < args.length; i += 2) {
      const opt = args[i].toString("latin1").toUpperCase();
      const value = args[i + 1]?.toString("latin1");
      if (value === undefined) return { error: "ERR syntax error" };
      if (opt === "MATCH") pattern = globToRegExp(value);
      else if (opt === "COUNT") count = Number(value);
      else if (opt !== "TYPE") return { error: "ERR syntax error" };
    }
    if (!Number.isInteger(count) || count < 1) return { error: "ERR value is not an integer or out of range" };
    const keys: Buffer[] = [];
    let examined = 0;
    let last = 0;
    for (const [key, entry] of this.dbs[dbIndex]) {
      if (entry.seq < cursor) continue;
      // The key the cursor points at was examined by the last page: seen again only when repeating.
      const repeat = entry.seq === cursor && cursor > 0;
      if (repeat && !this.scanRepeats) continue;
      if (!repeat) {
        if (examined++ === count) return [Buffer.from(String(last)), keys];
        last = entry.seq;
      }
      if (this.live(dbIndex, key) && (!pattern || pattern.test(key))) keys.push(Buffer.from(key, "latin1"));
    }
    return [Buffer.from("0"), keys];
  }

  /** The entry at `key` unless it expired (then it is removed, as Redis does lazily). */
  private live(db: number, key: string): Entry | undefined {
    const entry = this.dbs[db].get(key);
    if (entry?.expiresAt !== undefined && entry.expiresAt <= Date.now()) {
      this.dbs[db].delete(key);
      return undefined;
    }
    return entry;
  }
}

function wrongArgs(name: string): Reply {
  return { error: `ERR wrong number of arguments for '${name.toLowerCase()}' command` };
}

/** One command off the connection's buffer (a RESP array of bulk strings, or an inline line). */
function parseCommand(conn: Conn): Buffer[] | undefined {
  const buf = conn.buffer;
  if (!buf.length) return undefined;
  if (buf[0] !== 0x2a /* "*" */) {
    const end = buf.indexOf("\r\n");
    if (end < 0) return undefined;
    conn.buffer = buf.subarray(end + 2);
    return buf.subarray(0, end).toString("latin1").trim().split(/\s+/).filter(Boolean).map((a) => Buffer.from(a, "latin1"));
  }
  const header = buf.indexOf("\r\n");
  if (header < 0) return undefined;
  const n = Number(buf.subarray(1, header).toString("latin1"));
  let at = header + 2;
  const args: Buffer[] = [];
  for (let i = 0; i < n; i++) {
    const lineEnd = buf.indexOf("\r\n", at);
    if (lineEnd < 0) return undefined;
    const len = Number(buf.subarray(at + 1, lineEnd).toString("latin1"));
    const start = lineEnd + 2;
    if (buf.length < start + len + 2) return undefined;
    args.push(Buffer.from(buf.subarray(start, start + len)));
    at = start + len + 2;
  }
  conn.buffer = buf.subarray(at);
  return args;
}

function encode(reply: Reply, proto: 2 | 3): Buffer {
  if (reply === null) return Buffer.from(proto === 3 ? "_\r\n" : "$-1\r\n");
  if (typeof reply === "number") return Buffer.from(`:${reply}\r\n`);
  if (Buffer.isBuffer(reply)) return Buffer.concat([Buffer.from(`$${reply.length}\r\n`), reply, Buffer.from("\r\n")]);
  if (Array.isArray(reply)) return Buffer.concat([Buffer.from(`*${reply.length}\r\n`), ...reply.map((r) => encode(r, proto))]);
  if ("simple" in reply) return Buffer.from(`+${reply.simple}\r\n`);
  if ("error" in reply) return Buffer.from(`-${reply.error}\r\n`);
  const pairs = reply.map.flatMap(([k, v]) => [encode(Buffer.from(k), proto), encode(v, proto)]);
  // RESP2 has no map type: a flat array of keys and values.
  return Buffer.concat([Buffer.from(proto === 3 ? `%${reply.map.length}\r\n` : `*${reply.map.length * 2}\r\n`), ...pairs]);
}

/** Redis glob (`*`, `?`, `[a-z]`, `[^x]`, `\x` for a literal) as a RegExp over latin1 text. */
function globToRegExp(glob: string): RegExp {
  let out = "";
  for (let i = 0; i < glob.length; i++) {
    const c = glob[i];
    if (c === "*") out += "[\\s\\S]*";
    else if (c === "?") out += "[\\s\\S]";
    else if (c === "\\" && i + 1 < glob.length) out += escapeRegExp(glob[++i]);
    else if (c === "[") {
      const close = glob.indexOf("]", i + 2);
      if (close < 0) out += "\\[";
      else {
        const body = glob.slice(i + 1, close);
        const negate = body.startsWith("^");
        out += `[${negate ? "^" : ""}${(negate ? body.slice(1) : body).replace(/[\\\]]/g, "\\$&")}]`;
        i = close;
      }
    } else out += escapeRegExp(c);
  }
  return new RegExp(`^${out}$`);
}

function escapeRegExp(c: string): string {
  return c.replace(/[.*+?^${}()|[\]\\/]/g, "\\$&");
}
