/**
 * Starts a real daemon in-process for integration tests: temp state dir, real SQLite (or
 * memory://, or a store.url such as a FakeRedisServer's), gateway on an ephemeral port, and a
 * fake OpenAI-compatible model server.
 */
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import pino from "pino";
import { parseConfig } from "../../src/config/load.js";
import type { ConfigInput } from "../../src/config/schema.js";
import { createFullDaemon } from "../../src/full-daemon.js";
import type { Daemon, DaemonOptions } from "../../src/daemon.js";
import { GatewayClient } from "../../src/gateway/client.js";
import type { InboundMessage } from "../../src/channels/types.js";
import { FakeModelServer, type Responder } from "../fakes/model-server.js";
import { RecordingAdapter } from "./recording-adapter.js";

export interface Harness {
  daemon: Daemon;
  app: Daemon["app"];
  model: FakeModelServer;
  stateDir: string;
  url: string;
  /** A connected outside client (operator with every scope unless told otherwise). */
  client(opts?: { token?: string; scopes?: string[]; role?: "operator" | "node"; nodeId?: string }): Promise<GatewayClient>;
  stop(opts?: { keepState?: boolean }): Promise<void>;
}

export interface HarnessOptions {
  config?: ConfigInput;
  stateDir?: string;
  store?: "sqlite" | "memory";
  /** A store.url of its own (e.g. a FakeRedisServer's redis://…), instead of `store`. */
  storeUrl?: string;
  responder?: Responder;
  model?: FakeModelServer;
  noModel?: boolean;
  adapters?: RecordingAdapter[];
  plugins?: DaemonOptions["plugins"];
  adapterFactories?: DaemonOptions["adapterFactories"];
  pruneIntervalMs?: number;
  /** A daemon a test will treat as killed mid-work, its successor started beside it: it takes no state lock. */
  killedLater?: boolean;
  /** The daemon's logger (default: silent), for tests that read what the operator is told. */
  log?: pino.Logger;
}

export async function startHarness(opts: HarnessOptions = {}): Promise<Harness> {
  const stateDir = opts.stateDir ?? mkdtempSync(path.join(os.tmpdir(), "sb-test-"));
  const model = opts.model ?? new FakeModelServer(opts.responder);
  const baseUrl = opts.noModel ? undefined : await model.start();
  const input = opts.config ?? {};
  const config = parseConfig(
    {
      ...input,
      stateDir,
      store: { url: opts.storeUrl ?? (opts.store === "memory" ? "memory://" : `sqlite://${path.join(stateDir, "switchboard.sqlite")}`) },
      log: { level: "silent" },
      gateway: { port: 0, ...(input.gateway ?? {}) },
      ...(baseUrl
        ? {
            models: { providers: { fake: { baseUrl, models: [{ id: "m", cost: { input: 1, output: 2 } }] }, ...(input.models?.providers ?? {}) } },
            agents: { ...(input.agents ?? {}), defaults: { model: "fake/m", ...(input.agents?.defaults ?? {}) } },
          }
        : {}),
    },
    "<test>",
    {},
  );
  const log = opts.log ?? pino({ level: "silent" });
  const adapters = opts.adapters ?? [];
  const daemon = createFullDaemon({
    config,
    log,
    env: {},
    adapterFactories: opts.adapterFactories,
    plugins: [(d) => adapters.forEach((a) => d.app.registerAdapter(a)), ...(opts.plugins ?? [])],
    pruneIntervalMs: opts.pruneIntervalMs,
    ...(opts.killedLater ? { lockState: false } : {}),
  });
  const { port } = await daemon.start();
  const url = `ws://127.0.0.1:${port}/`;
  const clients: GatewayClient[] = [];
  return {
    daemon,
    app: daemon.app,
    model,
    stateDir,
    url,
    async client(c = {}) {
      const client = new GatewayClient({ url, token: c.token ?? config.gateway.auth.token, scopes: c.scopes, role: c.role, nodeId: c.nodeId });
      await client.connect();
      clients.push(client);
      return client;
    },
    async stop(s = {}) {
      for (const c of clients) c.close();
      await daemon.stop();
      if (!opts.model) await model.stop();
      if (!s.keepState && !opts.stateDir) rmSync(stateDir, { recursive: true, force: true });
    },
  };
}

let seq = 0;
/** An inbound platform message with sensible defaults. */
export function inbound(over: Partial<InboundMessage> = {}): InboundMessage {
  seq++;
  const chatType = over.chatType ?? "direct";
  const peerId = over.peerId ?? (chatType === "direct" ? "1001" : "-100200");
  return {
    channel: "telegram",
    accountId: "default",
    chatType,
    peerId,
    senderId: "1001",
    senderName: "Ada",
    text: `hello ${seq}`,
    messageId: `m${seq}-${Math.random().toString(36).slice(2, 8)}`,
    wasMentioned: chatType === "direct",
    to: peerId,
    timestamp: Date.now(),
    ...over,
  };
}
