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
