/**
 * A WebSocket to the gateway that hands its frames over one at a time, in order (`next`), for
 * tests that drive the handshake and the frames after it by hand.
 */
import WebSocket from "ws";

export interface FrameSocket {
  ws: WebSocket;
  /** Frames received and not yet taken by `next`. */
  frames: any[];
  next: () => Promise<any>;
  /** The close code, once the socket closed. */
  closed: Promise<number>;
}

export async function rawSocket(url: string): Promise<FrameSocket> {
  const ws = new WebSocket(url);
  const frames: any[] = [];
  const waiters: Array<(f: any) => void> = [];
  ws.on("message", (d) => {
    const f = JSON.parse(d.toString());
    const w = waiters.shift();
    w ? w(f) : frames.push(f);
  });
  const closed = new Promise<number>((resolve) => ws.once("close", (code) => resolve(code)));
  await new Promise((r) => ws.once("open", r));
  return { ws, frames, closed, next: () => (frames.length ? Promise.resolve(frames.shift()) : new Promise((r) => waiters.push(r))) };
}

/** A `connect` request as an operator with every scope; `over` replaces its params' fields. */
export function connectFrame(over: Record<string, unknown> = {}): string {
  return JSON.stringify({ type: "req", id: "c", method: "connect", params: { minProtocol: 3, maxProtocol: 4, client: { id: "t", version: "1", platform: "test", mode: "test" }, role: "operator", scopes: ["operator.admin"], auth: {}, ...over } });
}

/**
 * A client frame's header, made by hand: it declares `declared` payload bytes, whatever follows.
 * `fin: false` begins (or, with `continuation`, goes on with) a fragmented message. Masked with
 * zeros, as a client must mask, so the payload is written as is.
 */
export function frameHead(declared: number, opts: { fin?: boolean; continuation?: boolean } = {}): Buffer {
  const { fin = true, continuation = false } = opts;
  const lengthBytes = declared < 126 ? 0 : declared < 65536 ? 2 : 8;
  const head = Buffer.alloc(2 + lengthBytes + 4);
  head[0] = (fin ? 0x80 : 0) | (continuation ? 0x0 : 0x1);
  head[1] = 0x80 | (lengthBytes === 0 ? declared : lengthBytes === 2 ? 126 : 127);
  if (lengthBytes === 2) head.writeUInt16BE(declared, 2);
  if (lengthBytes === 8) head.writeBigUInt64BE(BigInt(declared), 2);
  return head;
}

/** Writes bytes straight to the client's socket, past ws: for frames left unfinished or split. */
export function writeRaw(ws: WebSocket, ...parts: Array<Buffer | string>): void {
  (ws as unknown as { _socket: import("node:net").Socket })._socket.write(Buffer.concat(parts.map((p) => (typeof p === "string" ? Buffer.from(p) : p))));
}
