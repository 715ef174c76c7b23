/**
 * A raw WebSocket to the gateway for hostile-input tests: sends any text or bytes and collects
 * the response frames that follow (events are kept apart), each wait bounded.
 */
import WebSocket from "ws";

export interface ResponseFrame {
  type: "res";
  id: string;
  ok: boolean;
  payload?: unknown;
  error?: { code: string; message: string; details?: unknown };
}

/** A token (sent as `auth.token`), an `auth` object as is, or undefined for no `auth` field at all. */
export type ConnectAuth = string | { token?: string } | undefined;

export class RawGateway {
  readonly responses: ResponseFrame[] = [];
  readonly events: Array<{ event: string; payload: unknown }> = [];
  /** Frames that were not JSON objects with a known type (a protocol violation by the server). */
  readonly garbage: string[] = [];
  closed: { code: number; reason: string } | undefined;
  private waiters: Array<() => void> = [];

  private constructor(readonly ws: WebSocket) {
    ws.on("message", (data) => {
      const text = data.toString();
      let frame: { type?: string; event?: string; payload?: unknown };
      try {
        frame = JSON.parse(text);
      } catch {
        this.garbage.push(text);
        return this.wake();
      }
      if (frame?.type === "res") this.responses.push(frame as ResponseFrame);
      else if (frame?.type === "event") this.events.push({ event: String(frame.event), payload: frame.payload });
      else this.garbage.push(text);
      this.wake();
    });
    ws.on("close", (code, reason) => {
      this.closed = { code, reason: reason.toString() };
      this.wake();
    });
  }

  /**
   * Opens a socket and waits for the connect.challenge event. `options` as ws takes them: `origin`
   * and `headers` make the upgrade request look like a browser's.
   */
  static async open(url: string, options?: WebSocket.ClientOptions): Promise<RawGateway> {
    const ws = new WebSocket(url, options);
    const gw = new RawGateway(ws);
    await new Promise<void>((resolve, reject) => {
      ws.once("open", () => resolve());
      ws.once("error", reject);
    });
    await gw.until(() => gw.events.some((e) => e.event === "connect.challenge"), 5000);
    return gw;
  }

  /** Sends `connect` and resolves with its response. */
  async handshake(auth: ConnectAuth, scopes = ["operator.read", "operator.write", "operator.admin"]): Promise<ResponseFrame> {
    const id = this.sendConnect(auth, scopes);
    return this.response(id, 5000);
  }

  /** Sends `connect` without waiting for its answer; returns the request id. */
  sendConnect(auth: ConnectAuth, scopes = ["operator.read", "operator.write", "operator.admin"]): string {
    const id = `connect-${Math.random().toString(36).slice(2)}`;
    const params = { minProtocol: 3, maxProtocol: 4, client: { id: "raw-test", version: "1", platform: "test", mode: "test" }, role: "operator", scopes };
    this.send(JSON.stringify({ type: "req", id, method: "connect", params: auth === undefined ? params : { ...params, auth: typeof auth === "string" ? { token: auth } : auth } }));
    return id;
  }

  send(data: string | Buffer): void {
    this.ws.send(data);
  }

  /** The next response with this id (or, for id null, the next response of any id). */
  async response(id: string | null, timeoutMs: number, from = this.responses.length): Promise<ResponseFrame> {
    let found: ResponseFrame | undefined;
    await this.until(() => (found = this.responses.slice(from).find((r) => id === null || r.id === id)) !== undefined || this.closed !== undefined, timeoutMs);
    if (!found) throw new Error(this.closed ? `socket closed (${this.closed.code} ${this.closed.reason}) before a response to ${id}` : `no response to ${id}`);
    return found;
  }

  /** Resolves when `cond()` holds; rejects after `timeoutMs` (a hang is a failure, never a wait forever). */
  until(cond: () => boolean, timeoutMs: number): Promise<void> {
    if (cond()) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.waiters = this.waiters.filter((w) => w !== check);
        reject(new Error(`timed out after ${timeoutMs} ms`));
      }, timeoutMs);
      const check = () => {
        if (!cond()) return;
        clearTimeout(timer);
        this.waiters = this.waiters.filter((w) => w !== check);
        resolve();
      };
      this.waiters.push(check);
    });
  }

  close(): void {
    this.ws.close();
  }

  private wake(): void {
    for (const w of [...this.waiters]) w();
  }
}
