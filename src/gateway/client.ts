/**
 * A small client of the gateway protocol, used by the CLI (and by tests as an outside client).
 */
import { EventEmitter } from "node:events";
import WebSocket from "ws";
import type { ErrorShape } from "./protocol.js";

export class GatewayCallError extends Error {
  constructor(
    readonly code: string,
    message: string,
    readonly details?: unknown,
    readonly payload?: unknown,
  ) {
    super(message);
    this.name = "GatewayCallError";
  }
}

export interface ClientOptions {
  url: string;
  token?: string;
  role?: "operator" | "node";
  scopes?: string[];
  nodeId?: string;
  clientId?: string;
}

interface Pending {
  resolve: (v: unknown) => void;
  reject: (e: Error) => void;
  /** `agent` answers twice; skip the "accepted" frame when waiting for the final one. */
  final: boolean;
}

export class GatewayClient extends EventEmitter {
  private ws?: WebSocket;
  private nextId = 1;
  private readonly pending = new Map<string, Pending>();
  hello?: Record<string, unknown>;

  constructor(private readonly opts: ClientOptions) {
    super();
  }

  async connect(): Promise<Record<string, unknown>> {
    const ws = new WebSocket(this.opts.url);
    this.ws = ws;
    return new Promise((resolve, reject) => {
      ws.on("error", reject);
      ws.on("close", (code, reason) => {
        const err = new Error(`gateway closed (${code}${reason.length ? `: ${reason.toString()}` : ""})`);
        for (const p of this.pending.values()) p.reject(err);
        this.pending.clear();
        reject(err);
        this.emit("close", code);
      });
      ws.on("message", (data) => {
        const frame = JSON.parse(data.toString()) as { type: string; id?: string; ok?: boolean; payload?: unknown; error?: ErrorShape; event?: string };
        if (frame.type === "event") {
          if (frame.event === "connect.challenge") {
            ws.send(
              JSON.stringify({
                type: "req",
                id: "connect",
                method: "connect",
                params: {
                  minProtocol: 3,
                  maxProtocol: 4,
                  client: { id: this.opts.clientId ?? "switchboard-cli", version: "1", platform: process.platform, mode: "cli" },
                  role: this.opts.role ?? "operator",
                  scopes: this.opts.scopes ?? ["operator.read", "operator.write", "operator.admin"],
                  ...(this.opts.nodeId ? { nodeId: this.opts.nodeId } : {}),
                  auth: this.opts.token ? { token: this.opts.token } : {},
                },
              }),
            );
          } else this.emit("event", frame.event, frame.payload);
          return;
        }
        if (frame.id === "connect") {
          if (frame.ok) {
            this.hello = frame.payload as Record<string, unknown>;
            resolve(this.hello);
          } else reject(new GatewayCallError(frame.error?.code ?? "UNAVAILABLE", frame.error?.message ?? "connect refused"));
          return;
        }
        const p = frame.id ? this.pending.get(frame.id) : undefined;
        if (!p) return;
        if (p.final && frame.ok && (frame.payload as { status?: string })?.status === "accepted") return;
        this.pending.delete(frame.id as string);
        if (frame.ok) p.resolve(frame.payload);
        else p.reject(new GatewayCallError(frame.error?.code ?? "UNAVAILABLE", frame.error?.message ?? "request failed", frame.error?.details, frame.payload));
      });
    });
  }

  request<T = any>(method: string, params: unknown = {}, opts: { expectFinal?: boolean } = {}): Promise<T> {
    const ws = this.ws;
    if (!ws || ws.readyState !== WebSocket.OPEN) return Promise.reject(new Error("gateway not connected"));
    const id = `c${this.nextId++}`;
    return new Promise<T>((resolve, reject) => {
      this.pending.set(id, { resolve: resolve as (v: unknown) => void, reject, final: opts.expectFinal ?? false });
      ws.send(JSON.stringify({ type: "req", id, method, params }));
    });
  }

  /** Send a raw text frame (tests of malformed input). */
  sendRaw(data: string | Buffer): void {
    this.ws?.send(data);
  }

  close(): void {
    this.ws?.close();
  }
}
