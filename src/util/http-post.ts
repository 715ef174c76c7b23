/**
 * One HTTP POST of a prepared body on a keep-alive agent, the response collected as text.
 *
 * The per-message calls (a model completion, a Telegram sendMessage) go through this instead of
 * an SDK's fetch stack: measured on the inbound benchmark (bench/), the `openai` SDK cost ~650 µs
 * of CPU per call against an instant local server and telegraf's node-fetch path ~85 µs per send,
 * against ~45 µs here — on a daemon whose event loop is the bottleneck at a few thousand
 * messages a second.
 */
import http from "node:http";
import https from "node:https";
import type { AbortLike } from "./run-abort.js";

export interface PostOptions {
  agent: http.Agent;
  headers: http.OutgoingHttpHeaders;
  /** Destroys the request; the promise rejects with the signal's reason (an Error) or a generic one. */
  signal?: AbortLike;
  /** Socket inactivity limit: the request fails with "Request timed out." */
  timeoutMs: number;
  /** A longer response fails the request (a misbehaving server must not exhaust memory). */
  maxResponseBytes: number;
  /**
   * Runs once, just before the request's bytes are handed to its socket: queued on the tick queue
   * ahead of the request's own flush, which Node schedules when the agent hands over a socket —
   * so after every promise continuation already queued, not when the call was begun.
   */
  onWire?: () => void;
}

export interface PostResponse {
  status: number;
  headers: http.IncomingHttpHeaders;
  text: string;
}

/** Failures of requests that may have been acted on (see reachedServer). */
const reached = new WeakSet<object>();

/**
 * Whether a failed postBody's request may have been acted on by the server: its bytes had all
 * been handed to the socket before it failed. A request that failed before that was never
 * complete, so no server acted on it; nor did one on a kept-alive socket reset before any answer
 * (the server had closed the idle connection: Node's own advice is to retry those).
 */
export function reachedServer(err: unknown): boolean {
  return typeof err === "object" && err !== null && reached.has(err);
}

export function postBody(url: URL, body: Buffer, opts: PostOptions): Promise<PostResponse> {
  return new Promise((resolveCall, rejectCall) => {
    const { signal } = opts;
    // The signal is watched here rather than handed to http.request, whose own handling (an
    // end-of-stream watcher on every request) cost ~15 µs of CPU per call (bench/).
    const onAbort = () => req.destroy(signal?.reason instanceof Error ? signal.reason : new Error("Request was aborted."));
    // Settled once: a response cut short still ends, and a destroyed request still errors.
    let settled = false;
    const settle = () => {
      const first = !settled;
      settled = true;
      signal?.removeEventListener("abort", onAbort);
      return first;
    };
    let flushed = false;
    let answered = false;
    const resolve = (v: PostResponse) => settle() && resolveCall(v);
    const reject = (err: unknown) => {
      const code = (err as NodeJS.ErrnoException | undefined)?.code;
      const idleSocketClosed = req.reusedSocket && !answered && (code === "ECONNRESET" || code === "EPIPE");
      if (flushed && !idleSocketClosed && typeof err === "object" && err !== null) reached.add(err);
      return settle() && rejectCall(err);
    };
    if (opts.onWire) process.nextTick(opts.onWire);
    // Not `{ ...opts.headers, "content-length": … }`: on Node 20 (V8 11.3) an object literal that
    // begins with a spread and then adds a key gets a hidden class of its own at every evaluation,
    // allocated straight into the old generation — and the full collections it brings on were the
    // inbound path's worst latency spikes (README, "Where the time goes").
    const headers = Object.assign({}, opts.headers, { "content-length": body.length });
    const req = (url.protocol === "https:" ? https : http).request(url, { method: "POST", agent: opts.agent, headers, timeout: opts.timeoutMs }, (res) => {
      answered = true;
      const chunks: Buffer[] = [];
      let size = 0;
      res.on("data", (c: Buffer) => {
        if (settled) return;
        size += c.length;
        if (size <= opts.maxResponseBytes) return void chunks.push(c);
        const err = new Error(`response larger than ${opts.maxResponseBytes} bytes`);
        reject(err);
        res.destroy(err);
      });
      res.on("error", reject);
      res.on("end", () => resolve({ status: res.statusCode ?? 0, headers: res.headers, text: Buffer.concat(chunks).toString("utf8") }));
    });
    req.once("finish", () => (flushed = true));
    req.on("timeout", () => req.destroy(new Error("Request timed out.")));
    req.on("error", reject);
    if (signal?.aborted) return onAbort();
    signal?.addEventListener("abort", onAbort, { once: true });
    req.end(body);
  });
}
