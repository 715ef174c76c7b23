/**
 * Telegram channel adapter: telegraf for the start-up calls (getMe, deleteWebhook,
 * setMyCommands), the calls made per message — getUpdates, sendMessage, sendChatAction — as plain
 * POSTs (bot-api.ts); our own long-poll loop for control over the offset (see poller.ts), and
 * pure mapping in map-update.ts.
 *
 * telegraf's `launch()`/`handleUpdate()` are deliberately not used: handleUpdate wraps handlers
 * in a 90 s timeout that would "finish" an update while onInbound still runs, and its default
 * error handler sets process.exitCode; launch() hides the offset we must persist.
 */
import http from "node:http";
import https from "node:https";
import { Telegraf } from "telegraf";
import { AlbumGate } from "../../src/channels/album-gate.js";
import { type AdapterContext, type ChannelAdapter, type ChannelHealth, type OutboundTarget, PlatformError, type SendOptions, type SendReceipt } from "../../src/channels/types.js";
import type { TelegramConfig } from "../../src/config/schema.js";
import { type BackoffOptions, DEFAULT_BACKOFF } from "./backoff.js";
import { createBotApi } from "./bot-api.js";
import { DEFAULT_COMMANDS, type MenuCommand, syncCommands } from "./commands.js";
import { apiFailureOf, BOT_TOKEN_SHAPE, describeError, operatorHint, toPlatformError } from "./errors.js";
import { type BotIdentity, mapUpdate } from "./map-update.js";
import { chatActionParams, chatTypeOfTarget, rateLimitsFor, sameChatTargets, sendMessageParams } from "./outbound.js";
import { Poller, type PollPhase } from "./poller.js";
import { RepeatGate } from "../../src/util/repeat-gate.js";
import { createWarmAgent } from "./warm-agent.js";
import { ALLOWED_UPDATES, type TgUpdate } from "./wire.js";

export { DEFAULT_COMMANDS, type MenuCommand } from "./commands.js";
export { mapUpdate, type BotIdentity } from "./map-update.js";

export interface TelegramAdapterOptions {
  /** Menu commands to register (default: DEFAULT_COMMANDS). */
  commands?: readonly MenuCommand[];
  /** Retry schedule for polling errors (default 1 s → 30 s, ×2, ±20 %). */
  backoff?: Partial<BackoffOptions>;
  /** Jitter source, injectable for deterministic tests. */
  random?: () => number;
  /** How long stop() waits for an in-flight onInbound before returning (default 1000 ms). */
  stopGraceMs?: number;
}

export type TelegramAdapter = ChannelAdapter & {
  /** The bot's @username (without @) once getMe succeeded. */
  botUsername(): string | undefined;
};

/** The same polling failure is warned about once a minute (each retry is still in the debug log). */
const REPEATED_WARNING_WINDOW_MS = 60_000;

export function createTelegramAdapter(config: TelegramConfig, ctx: AdapterContext, options: TelegramAdapterOptions = {}): TelegramAdapter {
  const token = config.botToken;
  const accountId = config.accountId;
  const { log } = ctx;
  const apiRoot = config.apiRoot.endsWith("/") ? config.apiRoot : `${config.apiRoot}/`;
  // Our own agent (telegraf's default is a process-wide singleton) so stop() can close its
  // sockets: the long poll's, and telegraf's for https:// roots (it ignores `agent` for http://
  // ones and uses Node's global agent).
  const agent = new (apiRoot.startsWith("https:") ? https.Agent : http.Agent)({ keepAlive: true, keepAliveMsecs: 10_000 });
  const bot = new Telegraf(token, { telegram: { apiRoot, agent } });
  const botApi = createBotApi(apiRoot, token);
  // Sends use an agent of their own that keeps a connection ready for each (warm-agent.ts).
  const sendAgent = createWarmAgent(apiRoot);
  const backoff: BackoffOptions = { ...DEFAULT_BACKOFF, ...options.backoff };
  const keys = { offset: `telegram:${accountId}:offset`, commands: `telegram:${accountId}:commands` };

  let identity: BotIdentity | undefined;
  let booted = false;
  /** Bumped by stop(), so a boot still awaiting Telegram can tell it was overtaken. */
  let stopEpoch = 0;
  let poller: Poller | undefined;
  const health: ChannelHealth = { connected: false, lastInboundAt: null, lastError: null };
  const pollWarnings = new RepeatGate(REPEATED_WARNING_WINDOW_MS);
  const albums = new AlbumGate();
  /**
   * Basic groups upgraded to supergroups (old chat id → new): Telegram refuses the old id for
   * good, but sessions, cron jobs and replies in flight still address it.
   */
  const migrated = new Map<string, string>();

  function noteMigration(from: string, to: string): void {
    if (migrated.get(from) === to) return;
    migrated.set(from, to);
    log.warn(
      { from, to },
      "telegram group upgraded to a supergroup: replies to the old id now go to the new one; its messages now come from the new id, a session of its own (config keyed by the old id no longer applies to them)",
    );
  }

  function recordError(err: unknown, what: string): string {
    const text = `${what}: ${describeError(err, token)}${operatorHint(err)}`;
    health.lastError = text;
    return text;
  }

  async function boot(): Promise<void> {
    // stop() may run while any of these awaits is pending: a boot it overtook must not mark the
    // adapter connected nor keep calling Telegram for an adapter that is no longer running.
    const epoch = stopEpoch;
    const overtaken = (): boolean => epoch !== stopEpoch;
    const me = await bot.telegram.getMe();
    if (overtaken()) return;
    identity = { id: me.id, username: me.username };
    health.connected = true;
    // A webhook left behind by another deployment makes every getUpdates fail with 409.
    await bot.telegram.deleteWebhook({ drop_pending_updates: false });
    if (overtaken()) return;
    try {
      const outcome = await syncCommands({
        kv: ctx.kv,
        key: keys.commands,
        commands: options.commands ?? DEFAULT_COMMANDS,
        setMyCommands: (commands) => bot.telegram.setMyCommands(commands),
      });
      log.debug({ outcome }, "telegram command menu");
    } catch (err) {
      // The menu is cosmetic: never block inbound on it. Not retried now; next start tries again.
      if (!overtaken()) log.warn({ err: recordError(err, "setMyCommands") }, "telegram command menu not registered");
    }
    if (overtaken()) return;
    booted = true;
    const privacyMode = me.can_read_all_group_messages !== true;
    log.info({ bot: identity.username, privacyMode }, "telegram connected");
    const answersAll = [config.requireMention, ...Object.values(config.groups).map((g) => g.requireMention)].includes(false);
    if (privacyMode && answersAll) {
      log.warn(
        { bot: identity.username },
        "telegram privacy mode is on for this bot: in groups Telegram only delivers commands, mentions and replies to it, so requireMention: false has no effect there (unless the bot is a group admin). To let it read every message: @BotFather → /setprivacy → Disable, then remove and re-add the bot to each group",
      );
    }
  }

  async function handle(update: TgUpdate): Promise<void> {
    if (!identity) throw new Error("update before getMe");
    // A group's upgrade comes as two service messages, one in each chat; either is enough.
    const service = update.message;
    if (service && Number.isSafeInteger(service.migrate_to_chat_id)) noteMigration(String(service.chat.id), String(service.migrate_to_chat_id));
    if (service && Number.isSafeInteger(service.migrate_from_chat_id)) noteMigration(String(service.migrate_from_chat_id), String(service.chat.id));
    const mapped = mapUpdate(update, identity, accountId);
    if (mapped.kind === "ignore") {
      log.trace({ updateId: update.update_id, reason: mapped.reason }, "telegram update ignored");
      return;
    }
    if (mapped.album && !albums.admit(mapped.album, mapped.msg.messageId)) {
      log.trace({ updateId: update.update_id, reason: "album_item" }, "telegram update ignored");
      return;
    }
    health.lastInboundAt = Date.now();
    await ctx.onInbound(mapped.msg);
  }

  function onError(err: unknown, phase: PollPhase, retryInMs: number): void {
    if (phase === "poll" || phase === "prepare") {
      health.connected = false;
      // A kept-alive socket can be the stuck part (ecosystem B.3): retry on a fresh connection.
      dropIdleSockets(agent);
    }
    const text = recordError(err, phase === "handle" ? "onInbound" : phase);
    const repeated = pollWarnings.pass(text);
    if (repeated === undefined) log.debug({ err: text, phase, retryInMs }, "telegram polling error (repeated)");
    else log.warn({ err: text, phase, retryInMs, ...(repeated ? { repeatedSinceLastWarning: repeated } : {}) }, "telegram polling error");
  }

  return {
    channel: "telegram",
    accountId,
    textChunkLimit: config.textChunkLimit,

    botUsername: () => identity?.username,

    async start(): Promise<void> {
      if (poller) return;
      // Said in health too: `switchboard status` shows it, not a bare "disconnected".
      const refuse = (problem: string): never => {
        health.lastError = problem;
        throw new PlatformError("telegram", "auth", problem);
      };
      if (!token) refuse("channels.telegram.botToken is empty: set it to the token @BotFather gave you (or set the environment variable it names)");
      if (!BOT_TOKEN_SHAPE.test(token)) refuse("channels.telegram.botToken is not a bot token: expected <bot id>:<secret> (like 123456789:AAE…), exactly as @BotFather gives it");
      const p = new Poller({
        prepare: () => (booted ? Promise.resolve() : boot()),
        getUpdates: (params, signal) => botApi<TgUpdate[]>("getUpdates", params, { agent, signal }),
        handle,
        kv: ctx.kv,
        offsetKey: keys.offset,
        timeoutSeconds: config.pollTimeoutSeconds,
        allowedUpdates: ALLOWED_UPDATES,
        backoff,
        random: options.random,
        onPollOk: () => {
          health.connected = true;
        },
        onError,
      });
      poller = p;
      // A revoked or mistyped token will not heal by retrying: fail start() so the operator sees it.
      // Anything else (network down, Telegram 5xx) is retried in the background by the poller.
      try {
        await boot();
      } catch (err) {
        // Stopped meanwhile: nothing to report or retry.
        if (poller !== p) return;
        // 404: a token Telegram cannot even parse, or an apiRoot that is not the Bot API.
        const code = apiFailureOf(err)?.error_code;
        if (code === 401 || code === 404) {
          poller = undefined;
          recordError(err, "getMe");
          throw toPlatformError(err, "getMe", token);
        }
        log.warn({ err: recordError(err, "start") }, "telegram not reachable yet; retrying in background");
      }
      // stop() may have run while booting; a stopped poller's start() would exit at once anyway.
      if (poller === p) p.start();
    },

    async stop(): Promise<void> {
      const p = poller;
      poller = undefined;
      stopEpoch++;
      booted = false;
      health.connected = false;
      if (p) await p.stop(options.stopGraceMs ?? 1000);
      agent.destroy();
      sendAgent.destroy();
    },

    prepareSend: () => sendAgent.prepare(),
    reportsWire: true,

    async send(target: OutboundTarget, text: string, opts?: SendOptions): Promise<SendReceipt> {
      const params = sendMessageParams({ ...target, to: migrated.get(target.to) ?? target.to }, text);
      // The journal line (onWire) is written microseconds before the bytes leave, not when the
      // send was begun, a whole run of other promise continuations earlier (~0.35 ms median,
      // ms at worst, measured in the crash test).
      const post = () => botApi<{ message_id: number }>("sendMessage", params, { agent: sendAgent, onWire: opts?.onWire });
      try {
        let result: { message_id: number };
        try {
          result = await post();
        } catch (err) {
          // A group upgraded to a supergroup (while this reply was written, or before a cron job's
          // turn): the 400 names the new id, and Telegram acted on nothing, so sending there is no
          // duplicate — and failing would lose the reply.
          const upgradedTo = apiFailureOf(err)?.parameters?.migrate_to_chat_id;
          if (!Number.isSafeInteger(upgradedTo) || String(upgradedTo) === params.chat_id) throw err;
          noteMigration(params.chat_id, String(upgradedTo));
          params.chat_id = String(upgradedTo);
          result = await post();
        }
        return { messageId: String(result.message_id) };
      } catch (err) {
        throw toPlatformError(err, "sendMessage", token);
      }
    },

    async typing(target: OutboundTarget): Promise<void> {
      // Best effort by contract: a lost typing indicator must never surface as a failure.
      try {
        await botApi<true>("sendChatAction", chatActionParams({ ...target, to: migrated.get(target.to) ?? target.to }), { agent });
      } catch (err) {
        log.debug({ err: describeError(err, token) }, "telegram typing failed");
      }
    },

    health: () => ({ ...health }),

    chatTypeOf: (target) => chatTypeOfTarget(target.to),

    sameChatTargets,

    rateLimitsFor: (target) => rateLimitsFor(target, config.rateLimit),
  };
}

function dropIdleSockets(agent: http.Agent): void {
  for (const sockets of Object.values(agent.freeSockets)) for (const socket of sockets ?? []) socket.destroy();
}
