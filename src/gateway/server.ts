/**
 * The gateway: one HTTP server (web chat page, health, hooks) with the WebSocket protocol of
 * interfaces §3 on the same port. Bad frames get an error response naming the problem; the
 * connection and the daemon stay up.
 */
import { randomUUID } from "node:crypto";
import { tokenMatches } from "../util/token-matches.js";
import { setMaxListeners } from "node:events";
import http from "node:http";
import { isIP, type AddressInfo } from "node:net";
import type { Duplex } from "node:stream";
import { WebSocketServer, type WebSocket } from "ws";
import type pino from "pino";
import type { App } from "../app.js";
import { createHandlers, type CallContext, type Handlers, type TwoPhase } from "./methods.js";
import {
  ConnectParams,
  EVENTS,
  GatewayError,
  METHOD_SCOPES,
  Params,
  PROTOCOL_VERSIONS,
  RequestFrame,
  describeZodError,
  hasScope,
  missingScope,
  type ErrorShape,
  type MethodName,
  type ResponseFrame,
} from "./protocol.js";
import { displayKey } from "../sessions/keys.js";
import { safeParse } from "../util/safe-parse.js";

export type HttpRoute = (req: http.IncomingMessage, res: http.ServerResponse, url: URL) => Promise<void> | void;

interface Connection {
  connId: string;
  ws: WebSocket;
  state: "handshake" | "ready";
  role: "operator" | "node";
  scopes: string[];
  nodeId?: string;
  seq: number;
  /** Aborted when the socket closes: ends what waits on the client's behalf (CallContext.signal). */
  closed: AbortController;
}

const HANDSHAKE_TIMEOUT_MS = 10_000;
/**
 * What a client may send before its handshake succeeds, frame headers and all: a connect request
 * is a few hundred bytes, so anything near this is no client's but an attempt to make the daemon
 * hold memory for nobody (ws would otherwise buffer a first frame up to 4 × maxPayload).
 */
export const HANDSHAKE_MAX_BYTES = 64 * 1024;
/**
 * Sockets that may wait in their handshake at once; one more drops the oldest. Refusing the new
 * one instead would let a few sockets opened every 10 s (the handshake timeout) lock everyone out;
 * dropping the oldest only hurts a client whose handshake takes longer than that many newer ones.
 * With HANDSHAKE_MAX_BYTES, unauthenticated clients hold at most 64 × 64 KiB (plus one read each).
 */
export const MAX_PENDING_HANDSHAKES = 64;
/** How much of a refused client's header is shown: enough to recognise it by, whatever its length. */
const HEADER_SHOWN_CHARS = 200;
/** Advertised in hello-ok's policy, and enforced: see slowConsumer. */
const MAX_BUFFERED_BYTES = 16 * 1024 * 1024;

export class Gateway {
  private readonly server: http.Server;
  private readonly wss: WebSocketServer;
  private readonly conns = new Set<Connection>();
  /**
   * Connections neither past their handshake nor closed, oldest first, each with what lifts the
   * limits admitHandshake put on it.
   */
  private readonly pendingHandshakes = new Map<Connection, () => void>();
  private readonly routes = new Map<string, HttpRoute>();
  private readonly handlers: Handlers;
  private readonly log: pino.Logger;
  private tick?: NodeJS.Timeout;

  constructor(
    private readonly app: App,
    private readonly version: string,
  ) {
    this.log = app.log.child({ component: "gateway" });
    this.handlers = createHandlers(app, version);
    // A client still sending its request's headers (a WebSocket upgrade's too) is held no longer
    // than one in its WebSocket handshake; Node's default is 60 s, checked every 30.
    this.server = http.createServer({ headersTimeout: HANDSHAKE_TIMEOUT_MS, connectionsCheckingInterval: 1000 }, (req, res) => void this.onHttp(req, res));
    // Our own size check answers with an error frame; ws's limit (which closes) is a backstop.
    this.wss = new WebSocketServer({ noServer: true, maxPayload: app.config.gateway.maxPayload * 4 });
    this.server.on("upgrade", (req, socket, head) => {
      const refusal = this.crossSiteRefusal(req);
      if (refusal) {
        this.log.warn({ origin: req.headers.origin?.slice(0, HEADER_SHOWN_CHARS), host: req.headers.host?.slice(0, HEADER_SHOWN_CHARS) }, `gateway connection refused: ${refusal}`);
        socket.end(`HTTP/1.1 403 Forbidden\r\nConnection: close\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: ${Buffer.byteLength(refusal)}\r\n\r\n${refusal}`);
        return;
      }
      this.wss.handleUpgrade(req, socket, head, (ws) => this.onConnection(ws, socket));
    });
  }

  /**
   * Why a browser's WebSocket must be refused, or undefined. Any web page may open a WebSocket to
   * 127.0.0.1, and without a token the gateway would make it a full operator (cross-site
   * WebSocket hijacking: read every transcript, change send policies, make the bots speak).
   * Browsers always send `Origin` with a WebSocket, so without a token only a page of the gateway's
   * own loopback origin (the web chat) is let in: same host and port as the request's `Host`, and
   * that host a loopback name or address — a DNS-rebound name agrees with its `Host` header but is
   * not one. Clients without `Origin` (the CLI, scripts) are not browsers and are not affected;
   * with a token, the token is what keeps other sites out.
   */
  private crossSiteRefusal(req: http.IncomingMessage): string | undefined {
    const origin = req.headers.origin;
    if (origin === undefined || this.app.config.gateway.auth.token) return undefined;
    const host = (req.headers.host ?? "").toLowerCase();
    const from = URL.canParse(origin) ? new URL(origin) : undefined;
    if (from && (from.protocol === "http:" || from.protocol === "https:") && from.host === host && isLoopbackHost(from.hostname)) return undefined;
    return `cross-origin WebSocket from ${JSON.stringify(origin.slice(0, HEADER_SHOWN_CHARS))} refused: without gateway.auth.token only the web chat page served at this loopback address may connect (set a token to allow other origins)`;
  }

  route(method: string, pathname: string, handler: HttpRoute): void {
    this.routes.set(`${method.toUpperCase()} ${pathname}`, handler);
  }

  async listen(): Promise<{ host: string; port: number }> {
    const { bind, port } = this.app.config.gateway;
    await new Promise<void>((resolve, reject) => {
      this.server.once("error", reject);
      this.server.listen(port, bind, () => {
        this.server.off("error", reject);
        resolve();
      });
    });
    this.tick = setInterval(() => this.sendTick(), this.app.config.gateway.tickIntervalMs);
    this.tick.unref();
    const addr = this.server.address() as AddressInfo;
    return { host: addr.address, port: addr.port };
  }

  get port(): number {
    return (this.server.address() as AddressInfo | null)?.port ?? 0;
  }

  /** Send an event to every operator connection that finished the handshake. */
  broadcast(event: string, payload: unknown): void {
    for (const c of this.conns) if (c.state === "ready" && c.role === "operator") this.sendEvent(c, event, payload);
  }

  /**
   * The keep-alive of every connection that finished its handshake, nodes included: its clients
   * (the reference's too) drop a connection that has no tick for two intervals. It carries no
   * session content, unlike the operator-only events of broadcast().
   */
  private sendTick(): void {
    const payload = { ts: Date.now() };
    for (const c of this.conns) if (c.state === "ready") this.sendEvent(c, "tick", payload);
  }

  async close(): Promise<void> {
    clearInterval(this.tick);
    for (const c of this.conns) {
      // Before its handshake a socket gets connect.challenge only (interfaces §3); the close says it.
      if (c.state === "ready") this.sendEvent(c, "shutdown", { reason: "daemon stopping" });
      c.ws.close(1012, "daemon stopping");
    }
    this.wss.close();
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  private async onHttp(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    // Node's parser lets through request-targets the URL parser refuses ("//[", "http://a:99999/"):
    // uncaught, each would leave its request unanswered and its socket held, from anyone, unauthenticated.
    if (!URL.canParse(req.url ?? "/", "http://localhost")) {
      res.writeHead(400, { "content-type": "application/json", connection: "close" }).end(JSON.stringify({ error: "invalid request target" }));
      return;
    }
    const url = new URL(req.url ?? "/", "http://localhost");
    const handler = this.routes.get(`${req.method} ${url.pathname}`);
    try {
      if (handler) return await handler(req, res, url);
      res.writeHead(404, { "content-type": "application/json" }).end(JSON.stringify({ error: `not found: ${req.method} ${url.pathname}` }));
    } catch (err) {
      this.log.error({ err, path: url.pathname }, "http handler failed");
      if (!res.headersSent) res.writeHead(500, { "content-type": "application/json" });
      res.end(JSON.stringify({ error: "internal error" }));
    }
  }

  private onConnection(ws: WebSocket, socket: Duplex): void {
    const conn: Connection = { connId: randomUUID(), ws, state: "handshake", role: "operator", scopes: [], seq: 0, closed: new AbortController() };
    // One listener per wait in progress: a client may well have more than ten.
    setMaxListeners(0, conn.closed.signal);
    this.conns.add(conn);
    this.admitHandshake(conn, socket);
    const timer = setTimeout(() => {
      if (conn.state === "handshake") ws.close(4008, "handshake timeout");
    }, HANDSHAKE_TIMEOUT_MS);
    ws.on("close", () => {
      clearTimeout(timer);
      this.pendingHandshakes.get(conn)?.();
      this.conns.delete(conn);
      conn.closed.abort();
    });
    ws.on("error", (err) => this.log.debug({ err: err.message, connId: conn.connId }, "socket error"));
    ws.on("message", (data, isBinary) => void this.onFrame(conn, data as Buffer, isBinary));
    ws.send(JSON.stringify({ type: "event", event: "connect.challenge", payload: { nonce: randomUUID(), ts: Date.now() } }));
  }

  /**
   * Bounds what an unauthenticated client can make the daemon hold: HANDSHAKE_MAX_BYTES on its
   * socket, on at most MAX_PENDING_HANDSHAKES sockets. Counted on the raw socket, as read: ws
   * would only hand over a frame once all of it (up to its own limit) had been buffered. Listening
   * after ws, whose handshake() runs as it reads, so a connect is served before its bytes count.
   */
  private admitHandshake(conn: Connection, socket: Duplex): void {
    if (this.pendingHandshakes.size >= MAX_PENDING_HANDSHAKES) {
      const [oldest, release] = this.pendingHandshakes.entries().next().value as [Connection, () => void];
      release();
      this.log.warn({ connId: oldest.connId, pending: MAX_PENDING_HANDSHAKES }, "gateway connection dropped: too many connections waiting in their handshake");
      // At once: a close handshake would leave it (and what it buffered) behind for up to 30 s.
      oldest.ws.terminate();
    }
    let received = 0;
    const count = (chunk: Buffer) => {
      // Called for the read that completed the handshake too (emit calls the listeners it had).
      if (conn.state !== "handshake") return;
      received += chunk.length;
      if (received <= HANDSHAKE_MAX_BYTES) return;
      // Nothing more of it is read into ws (as ws itself does past its maxPayload): the close
      // below still completes when the client answers it, or ws's close timer ends the socket.
      socket.removeAllListeners("data");
      socket.resume();
      this.sendError(conn, null, { code: "INVALID_REQUEST", message: `frame too large: more than ${HANDSHAKE_MAX_BYTES} bytes before the handshake (a connect request is a few hundred)` }, true);
    };
    socket.on("data", count);
    this.pendingHandshakes.set(conn, () => {
      socket.off("data", count);
      this.pendingHandshakes.delete(conn);
    });
  }

  private async onFrame(conn: Connection, data: Buffer, isBinary: boolean): Promise<void> {
    const maxPayload = this.app.config.gateway.maxPayload;
    // Before the handshake only a `connect` request may come: anything else closes the socket.
    const handshaking = conn.state === "handshake";
    if (data.length > maxPayload) {
      return this.sendError(conn, guessId(data), { code: "INVALID_REQUEST", message: `frame too large: ${data.length} bytes (maxPayload ${maxPayload})` }, handshaking);
    }
    if (isBinary) return this.sendError(conn, null, { code: "INVALID_REQUEST", message: "binary frames are not supported; send JSON text frames" }, handshaking);
    let raw: unknown;
    try {
      raw = JSON.parse(data.toString("utf8"));
    } catch (err) {
      return this.sendError(conn, guessId(data), { code: "INVALID_REQUEST", message: `invalid JSON: ${(err as Error).message}` }, handshaking);
    }
    const parsed = safeParse(RequestFrame, raw);
    if (!parsed.success) {
      const id = typeof (raw as { id?: unknown })?.id === "string" ? (raw as { id: string }).id : null;
      return this.sendError(conn, id, { code: "INVALID_REQUEST", message: `invalid frame: ${describeZodError(parsed.error)}` }, handshaking);
    }
    const frame = parsed.data;
    // JSON's "\ud800" escapes make strings no UTF-8 store can keep: a key written to SQLite
    // would come back as U+FFFD, a different key (fuzz-found). Refused at the boundary.
    if (hasLoneSurrogate(frame)) {
      return this.sendError(conn, hasLoneSurrogate(frame.id) ? null : frame.id, { code: "INVALID_REQUEST", message: "invalid frame: strings must be well-formed Unicode (lone surrogate found)" }, handshaking);
    }
    if (handshaking) return this.handshake(conn, frame.id, frame.method, frame.params);
    await this.dispatch(conn, frame.id, frame.method, frame.params);
  }

  private handshake(conn: Connection, id: string, method: string, params: unknown): void {
    if (method !== "connect") return this.sendError(conn, id, { code: "INVALID_REQUEST", message: `first frame must be a "connect" request, got "${method}"` }, true);
    const parsed = safeParse(ConnectParams, params ?? {});
    if (!parsed.success) return this.sendError(conn, id, { code: "INVALID_REQUEST", message: `invalid connect params: ${describeZodError(parsed.error)}` }, true);
    const p = parsed.data;
    const protocol = [...PROTOCOL_VERSIONS].reverse().find((v) => v >= p.minProtocol && v <= p.maxProtocol);
    if (protocol === undefined) {
      return this.sendError(conn, id, { code: "INVALID_REQUEST", message: `protocol mismatch: server speaks ${PROTOCOL_VERSIONS.join(" and ")}, client asked ${p.minProtocol}..${p.maxProtocol}` }, true);
    }
    const expected = this.app.config.gateway.auth.token;
    if (expected && !tokenMatches(expected, p.auth?.token)) {
      this.log.warn({ connId: conn.connId, client: p.client.id }, "gateway connection refused: bad or missing token");
      return this.sendError(conn, id, { code: "UNAUTHORIZED", message: p.auth?.token ? "invalid gateway token" : "gateway token required (auth.token)" }, true);
    }
    conn.state = "ready";
    this.pendingHandshakes.get(conn)?.();
    conn.role = p.role;
    conn.scopes = p.role === "node" ? [] : p.scopes.length ? p.scopes : ["operator.read", "operator.write"];
    if (p.role === "node") conn.nodeId = p.nodeId ?? p.client.instanceId ?? p.client.id;
    const defaultAgentId = this.app.defaultAgentId;
    this.sendRes(conn, {
      type: "res",
      id,
      ok: true,
      payload: {
        type: "hello-ok",
        protocol,
        server: { version: this.version, connId: conn.connId },
        features: { methods: Object.keys(Params), events: [...EVENTS] },
        // As every answer names it: the global bucket is `main` (R6).
        snapshot: { sessionDefaults: { defaultAgentId, mainKey: "main", mainSessionKey: displayKey(this.app.canonicalKey("main", defaultAgentId)), scope: this.app.config.session.scope } },
        auth: { method: "token", role: conn.role, scopes: conn.scopes },
        policy: { maxPayload: this.app.config.gateway.maxPayload, maxBufferedBytes: MAX_BUFFERED_BYTES, tickIntervalMs: this.app.config.gateway.tickIntervalMs },
      },
    });
  }

  private async dispatch(conn: Connection, id: string, method: string, params: unknown): Promise<void> {
    // Own keys only: `in` also finds "__proto__", "constructor", "toString"… (fuzz-found: no answer, unhandled rejection).
    if (!Object.hasOwn(Params, method)) return this.sendError(conn, id, { code: "INVALID_REQUEST", message: `unknown method: ${method}` });
    const name = method as MethodName;
    const needed = METHOD_SCOPES[name];
    if (needed === "node" ? conn.role !== "node" : conn.role !== "operator" || !hasScope(conn.scopes, needed)) {
      return this.sendError(conn, id, toErrorShape(missingScope(method, needed === "node" ? "role:node" : needed)));
    }
    const parsed = safeParse(Params[name], params ?? {});
    if (!parsed.success) return this.sendError(conn, id, { code: "INVALID_REQUEST", message: `invalid ${method} params: ${describeZodError(parsed.error)}` });
    const afterResponse: Array<() => void> = [];
    const answered = () => afterResponse.splice(0).forEach((fn) => fn());
    const ctx: CallContext = { connId: conn.connId, role: conn.role, scopes: conn.scopes, nodeId: conn.nodeId, broadcast: (event, payload) => this.broadcast(event, payload), afterResponse: (fn) => afterResponse.push(fn), signal: conn.closed.signal };
    try {
      const result = await (this.handlers[name] as (p: unknown, c: CallContext) => Promise<unknown>)(parsed.data, ctx);
      if (isTwoPhase(result)) {
        this.sendRes(conn, { type: "res", id, ok: true, payload: result.first });
        answered();
        const final = await result.final;
        if (final.ok) this.sendRes(conn, { type: "res", id, ok: true, payload: final.payload });
        else this.sendRes(conn, { type: "res", id, ok: false, error: toErrorShape(final.error), payload: final.payload });
        return;
      }
      this.sendRes(conn, { type: "res", id, ok: true, payload: result });
    } catch (err) {
      if (!(err instanceof GatewayError)) this.log.error({ err, method }, "gateway method failed");
      this.sendError(conn, id, toErrorShape(err));
    } finally {
      answered();
    }
  }

  private sendEvent(conn: Connection, event: string, payload: unknown): void {
    if (conn.ws.readyState !== conn.ws.OPEN || this.slowConsumer(conn)) return;
    conn.ws.send(JSON.stringify({ type: "event", event, payload, seq: ++conn.seq }));
  }

  private sendRes(conn: Connection, frame: ResponseFrame): void {
    if (conn.ws.readyState === conn.ws.OPEN && !this.slowConsumer(conn)) conn.ws.send(JSON.stringify(frame));
  }

  /**
   * A client that stops reading (a frozen tab, a stuck script) closes its TCP window, and every
   * frame for it — each broadcast event included — would pile up in the daemon's memory without
   * end. Once more than the advertised `policy.maxBufferedBytes` waits for it when another frame
   * is due, it is disconnected (at once: a close frame would queue behind the backlog); a client
   * that reconnects reads what it missed (the web chat reloads from the transcript). Checked
   * before a send, so one large answer to a client that reads is not mistaken for one.
   */
  private slowConsumer(conn: Connection): boolean {
    if (conn.ws.bufferedAmount <= MAX_BUFFERED_BYTES) return false;
    this.log.warn({ connId: conn.connId, bufferedBytes: conn.ws.bufferedAmount, maxBufferedBytes: MAX_BUFFERED_BYTES }, "gateway client disconnected: it is not reading what is sent to it");
    conn.ws.terminate();
    return true;
  }

  private sendError(conn: Connection, id: string | null, error: ErrorShape, close = false): void {
    this.sendRes(conn, { type: "res", id: id ?? "", ok: false, error } as ResponseFrame);
    if (close) conn.ws.close(1008, closeReason(error.message));
  }
}

/** `localhost` (and its subdomains, which browsers resolve to loopback), 127.0.0.0/8 and [::1]. */
function isLoopbackHost(hostname: string): boolean {
  const name = hostname.toLowerCase();
  if (name === "localhost" || name.endsWith(".localhost") || name === "[::1]") return true;
  return isIP(name) === 4 && name.startsWith("127.");
}

/** WebSocket allows a close reason of 123 UTF-8 bytes; a longer one makes `close` throw. */
const MAX_CLOSE_REASON_BYTES = 123;

/** `text` cut to a close reason: whole code points only, within the byte limit. */
export function closeReason(text: string): string {
  let out = "";
  let bytes = 0;
  for (const ch of text) {
    bytes += Buffer.byteLength(ch);
    if (bytes > MAX_CLOSE_REASON_BYTES) break;
    out += ch;
  }
  return out;
}

/** A string anywhere in `value` (keys included) holding an unpaired UTF-16 surrogate. */
export function hasLoneSurrogate(value: unknown, depth = 0): boolean {
  if (typeof value === "string") return LONE_SURROGATE.test(value);
  if (depth > 64 || value === null || typeof value !== "object") return false;
  if (Array.isArray(value)) return value.some((v) => hasLoneSurrogate(v, depth + 1));
  return Object.entries(value).some(([k, v]) => LONE_SURROGATE.test(k) || hasLoneSurrogate(v, depth + 1));
}

const LONE_SURROGATE = /\p{Cs}/u;

function isTwoPhase(v: unknown): v is TwoPhase {
  return typeof v === "object" && v !== null && (v as TwoPhase).kind === "two-phase";
}

function toErrorShape(err: unknown): ErrorShape {
  if (err instanceof GatewayError) return { code: err.code, message: err.message, ...(err.details ? { details: err.details } : {}) };
  return { code: "UNAVAILABLE", message: err instanceof Error ? err.message : String(err) };
}

/** Best-effort request id from a frame we could not parse, so the error can be correlated. */
function guessId(data: Buffer): string | null {
  const m = /"id"\s*:\s*"([^"\\]{1,256})"/.exec(data.subarray(0, 4096).toString("utf8"));
  return m ? m[1] : null;
}
