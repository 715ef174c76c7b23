/**
 * Composition root: builds the services, wires adapters and the gateway, and owns the start and
 * stop order. Adapters are imported lazily so a disabled platform's SDK is never loaded.
 */
import { readFile } from "node:fs/promises";
import path from "node:path";
import type pino from "pino";
import { App, type AppOptions } from "./app.js";
import type { AdapterContext, AdapterKv, ChannelAdapter } from "./channels/types.js";
import type { Config } from "./config/schema.js";
import { unsafeBindProblem } from "./config/safe-bind.js";
import type { RunEvent } from "./agents/runtime.js";
import { Gateway } from "./gateway/server.js";
import { openAuthDir } from "./store/adapter-kv.js";
import { displayKey, normalizeAgentId } from "./sessions/keys.js";
import { createWebchatAdapter } from "./web/webchat-adapter.js";
import { within } from "./util/within.js";
import { VERSION } from "./version.js";

/** Builds a platform adapter; receives the validated config so a test can swap only the seam. */
export type AdapterFactory = (ctx: AdapterContext, config: Config) => Promise<ChannelAdapter>;

export interface DaemonOptions extends AppOptions {
  /** Replace the adapter of a platform (tests inject fakes' seams, e.g. the WhatsApp socket). */
  adapterFactories?: Partial<Record<"telegram" | "discord" | "whatsapp", AdapterFactory>>;
  /** Extra wiring before start (session tools, cron, hooks register through this). */
  plugins?: Array<(daemon: Daemon) => void | Promise<void>>;
  /** How often expired delivery and dedupe records are pruned from the store (default hourly). */
  pruneIntervalMs?: number;
}

const PRUNE_INTERVAL_MS = 3600_000;

export class Daemon {
  readonly app: App;
  readonly gateway: Gateway;
  private readonly log: pino.Logger;
  private readonly stopHooks: Array<() => Promise<void> | void> = [];
  private started = false;
  private pruner: NodeJS.Timeout | undefined;
  private pruning: Promise<void> | undefined;

  constructor(private readonly opts: DaemonOptions) {
    this.app = new App(opts);
    this.log = opts.log;
    this.gateway = new Gateway(this.app, VERSION);
  }

  get config(): Config {
    return this.app.config;
  }

  /** Register cleanup run (in reverse order) on stop. */
  onStop(fn: () => Promise<void> | void): void {
    this.stopHooks.push(fn);
  }

  async start(): Promise<{ port: number }> {
    const { config } = this.app;
    assertSafeBind(config);
    await this.app.open();
    this.warnAboutUnknownAgents();
    this.serveWebchat();
    for (const plugin of this.opts.plugins ?? []) await plugin(this);
    if (config.channels.webchat.enabled) this.app.registerAdapter(createWebchatAdapter((event, payload) => this.gateway.broadcast(event, payload)));
    // Operators see run lifecycles live (queued → start → end) as `agent` events, the session
    // named as every gateway answer names it (the global bucket as `main`, R6).
    this.app.runtime.events.on("run", (ev: RunEvent) => {
      const sessionKey = displayKey(ev.sessionKey);
      this.gateway.broadcast("agent", ev.phase === "end" ? { runId: ev.runId, sessionKey, phase: "end", status: ev.outcome.status } : { runId: ev.runId, sessionKey, phase: ev.phase });
    });
    // Adapters exist before unfinished work resumes (so resumed replies find their channel),
    // but only start listening after it, so resumed messages keep their place in each session.
    const adapters = await this.createChannels();
    await this.app.outbox.start({ hold: true });
    await this.app.router.start();
    const { port, host } = await this.gateway.listen();
    this.log.info({ url: `http://${host.includes(":") ? `[${host}]` : host}:${port}/`, store: this.app.kv.description, model: this.app.models.defaultRef(this.app.defaultAgentId) ?? "none" }, "switchboard listening");
    const missing = this.app.models.missingModel(this.app.defaultAgentId);
    if (missing !== undefined) this.log.warn(`no model configured${missing ? ` (${missing})` : ""} — chats get a notice; see README "Connect a model"`);
    // A platform that is down or slow must not keep the daemon (or the other channels) waiting.
    await Promise.all(
      adapters.map(({ adapter, log }) =>
        within(adapter.start(), ADAPTER_START_GRACE_MS).then(
          (settled) => settled || log.warn(`channel still connecting after ${ADAPTER_START_GRACE_MS / 1000} s; continuing`),
          (err: unknown) => log.error({ err: (err as Error).message }, "channel failed to start; see `switchboard status`"),
        ),
      ),
    );
    this.app.outbox.open();
    this.started = true;
    this.pruner = setInterval(() => {
      this.pruning ??= this.prune().finally(() => (this.pruning = undefined));
    }, this.opts.pruneIntervalMs ?? PRUNE_INTERVAL_MS);
    this.pruner.unref();
    return { port };
  }

  /**
   * An agent removed from `agents.list` (or misspelt in a binding) changes who answers without
   * any error: a binding naming it is skipped, so its chats go to the default agent in new
   * sessions, and its stored sessions run without its model and systemPrompt. Say so at start.
   */
  private warnAboutUnknownAgents(): void {
    const known = new Set(this.config.agents.list.map((a) => normalizeAgentId(a.id)));
    const fallback = this.app.defaultAgentId;
    this.config.bindings.forEach((b, i) => {
      if (!known.has(normalizeAgentId(b.agentId))) {
        this.log.warn({ binding: i, agentId: b.agentId, match: b.match }, `bindings[${i}] names agent "${b.agentId}", which is not in agents.list: its chats go to the default agent "${fallback}"`);
      }
    });
    const orphans: Record<string, number> = {};
    for (const entry of this.app.sessions.list()) if (!known.has(entry.agentId)) orphans[entry.agentId] = (orphans[entry.agentId] ?? 0) + 1;
    if (Object.keys(orphans).length) {
      this.log.warn({ sessions: orphans }, `stored sessions belong to agents not in agents.list (${Object.keys(orphans).join(", ")}): they are kept and listed, their chats' new messages go to the agent routing picks now, and a run in one of them has no model or systemPrompt of its agent`);
    }
  }

  /** Start-up prunes too; this keeps a long-running daemon's store a day deep (see Outbox.prune). */
  private async prune(): Promise<void> {
    try {
      const deliveries = await this.app.outbox.prune();
      const inbound = await this.app.router.prune();
      if (deliveries || inbound) this.log.info({ deliveries, inbound }, "pruned expired delivery and dedupe records");
    } catch (err) {
      this.log.warn({ err: (err as Error).message }, "pruning expired records failed; retrying at the next interval");
    }
  }

  /** Drain in-flight work, then close everything. Safe to call twice. */
  async stop(): Promise<void> {
    this.log.info("stopping: draining runs and deliveries");
    clearInterval(this.pruner);
    await this.pruning;
    for (const a of this.app.adapters.values()) await a.stop().catch((err: unknown) => this.log.warn({ err, channel: a.channel }, "adapter stop failed"));
    if (this.started) {
      this.app.router.stop();
      await this.app.runtime.drain(10_000);
      await this.app.router.idle();
      await this.app.outbox.stop();
    }
    for (const fn of [...this.stopHooks].reverse()) await fn();
    await this.gateway.close();
    await this.app.close();
    this.started = false;
    this.log.info("stopped");
  }

  private async createChannels(): Promise<Array<{ adapter: ChannelAdapter; log: pino.Logger }>> {
    const { channels } = this.app.config;
    const factories = this.opts.adapterFactories ?? {};
    const wanted: Array<["telegram" | "discord" | "whatsapp", AdapterFactory]> = [];
    if (channels.telegram?.enabled) {
      const cfg = channels.telegram;
      wanted.push(["telegram", factories.telegram ?? (async (ctx) => (await import("../adapters/telegram/index.js")).createTelegramAdapter(cfg, ctx))]);
    }
    if (channels.discord?.enabled) {
      const cfg = channels.discord;
      wanted.push(["discord", factories.discord ?? (async (ctx) => (await import("../adapters/discord/index.js")).createDiscordAdapter(cfg, ctx))]);
    }
    if (channels.whatsapp?.enabled) {
      const cfg = channels.whatsapp;
      wanted.push(["whatsapp", factories.whatsapp ?? (async (ctx) => (await import("../adapters/whatsapp/index.js")).createWhatsAppAdapter(cfg, ctx))]);
    }
    const created: Array<{ adapter: ChannelAdapter; log: pino.Logger }> = [];
    for (const [channel, factory] of wanted) {
      const accountId = channels[channel]?.accountId ?? "default";
      const log = this.log.child({ component: "adapter", channel, accountId });
      try {
        const ctx: AdapterContext = {
          onInbound: (msg) => this.app.router.accept(msg).then(() => undefined),
          onNativeCommand: (cmd) => this.app.router.nativeCommand(cmd),
          kv: channel === "whatsapp" ? await this.whatsappLogin(accountId, log) : this.app.adapterKv(channel, accountId),
          log,
        };
        const adapter = await factory(ctx, this.app.config);
        this.app.registerAdapter(adapter);
        created.push({ adapter, log });
      } catch (err) {
        log.error({ err: (err as Error).message }, "channel could not be created");
      }
    }
    return created;
  }

  /** The WhatsApp adapter's space: its login, kept under channels.whatsapp.authDir (default <stateDir>/whatsapp). */
  private async whatsappLogin(accountId: string, log: pino.Logger): Promise<AdapterKv> {
    const dir = path.resolve(this.config.channels.whatsapp?.authDir ?? path.join(this.app.stateDir, "whatsapp"));
    const auth = await openAuthDir(dir, this.app.adapterSpace("whatsapp", accountId));
    this.onStop(() => auth.close());
    log.debug({ authDir: dir }, "whatsapp login kept in authDir");
    return auth.kv;
  }

  private serveWebchat(): void {
    const asset = (file: string, type: string) => async (_req: unknown, res: import("node:http").ServerResponse) => {
      const body = await readFile(new URL(`./web/${file}`, import.meta.url));
      // Another site must not frame the page (clickjacking: the web chat drives the agent) nor
      // have a browser read an asset as another type.
      res.writeHead(200, { "content-type": type, "cache-control": "no-cache", "x-frame-options": "DENY", "content-security-policy": "frame-ancestors 'none'", "x-content-type-options": "nosniff" }).end(body);
    };
    if (this.app.config.channels.webchat.enabled) {
      this.gateway.route("GET", "/", asset("index.html", "text/html; charset=utf-8"));
      this.gateway.route("GET", "/webchat.js", asset("webchat.js", "text/javascript; charset=utf-8"));
      this.gateway.route("GET", "/webchat-client.js", asset("webchat-client.js", "text/javascript; charset=utf-8"));
      this.gateway.route("GET", "/webchat.css", asset("webchat.css", "text/css; charset=utf-8"));
    }
    this.gateway.route("GET", "/healthz", (_req, res) => {
      res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ ok: true, uptimeMs: Date.now() - this.app.startedAt }));
    });
  }
}

const ADAPTER_START_GRACE_MS = 15_000;

/** start refuses what unsafeBindProblem finds. */
export function assertSafeBind(config: Config): void {
  const problem = unsafeBindProblem(config);
  if (problem) throw new Error(problem);
}
