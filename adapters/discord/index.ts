/**
 * Discord channel adapter (discord.js 14): gateway events → InboundMessage / NativeCommand, and
 * send/typing over REST. Reconnects and RESUME are discord.js's job; we only mirror its state.
 */
import { Client, Events, GatewayIntentBits, Options, Partials, Routes, type APIMessage, type RESTPostAPIChannelMessageJSONBody } from "discord.js";
import { createHash } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";
import type { AdapterContext, ChannelAdapter, ChannelHealth, InboundMessage, OutboundTarget, RateLimit, SendOptions, SendReceipt } from "../../src/channels/types.js";
import { PlatformError } from "../../src/channels/types.js";
import { retryIo } from "../../src/util/io-retry.js";
import type { DiscordConfig } from "../../src/config/schema.js";
import { registerCommands } from "./commands.js";
import { redact, toPlatformError } from "./errors.js";
import { handleCommandInteraction } from "./interactions.js";
import { mapMessage } from "./map-message.js";
import { within } from "../../src/util/within.js";
import { limitAtRate } from "../../src/delivery/rate-limiter.js";

/**
 * @discordjs/rest waits out 429s itself and retries, so a rate limit never loses a reply. Waits
 * longer than this (abnormal limits; Discord's per-channel window is 5 s) come back as
 * PlatformError rate_limited with retryAfterMs, so the outbox holds the message instead of a send.
 */
const MAX_INLINE_RATE_LIMIT_WAIT_MS = 10_000;
/** Upper bound for one send including rate-limit waits and @discordjs/rest's own 5xx retries. */
const SEND_DEADLINE_MS = 30_000;
const TYPING_DEADLINE_MS = 5_000;
/** client.destroy() waits for the close handshake; a dead peer must not hold up shutdown. */
const STOP_GRACE_MS = 2_000;
/** Users, and members of each guild, that discord.js keeps (oldest dropped first; the bot itself always). */
export const CACHED_PEOPLE = 1000;

/**
 * discord.js caches every message (200 per channel), user, guild member and DM channel it sees, for
 * the client's life: a daemon's memory grew with every person who ever wrote to the bot. Nothing
 * here reads a cache back — each event carries what mapping needs, REST calls take ids — so messages
 * are not kept and people only up to CACHED_PEOPLE (dropping one costs nothing: the next event
 * brings it again). A message's member is resolved from the cache, so members are kept, not 0.
 */
const makeCache = Options.cacheWithLimits({
  ...Options.DefaultMakeCacheSettings,
  MessageManager: 0,
  UserManager: { maxSize: CACHED_PEOPLE, keepOverLimit: (user) => user.id === user.client.user.id },
  GuildMemberManager: { maxSize: CACHED_PEOPLE, keepOverLimit: (member) => member.id === member.client.user.id },
});

/**
 * DM channels cannot be limited that way (discord.js does not support limiting its channel cache),
 * and Partials.Channel makes one afresh from each DM's payload: dropped once its event is mapped.
 */
function forgetDmChannel(c: Client, event: { inGuild(): boolean; channelId: string | null }): void {
  if (!event.inGuild() && event.channelId) c.channels.cache.delete(event.channelId);
}

/** Discord nonces are at most 25 characters: a digest of our per-chunk idempotency key. */
export function discordNonce(key: string): string {
  return createHash("sha256").update(key).digest("base64url").slice(0, 25);
}

/**
 * Discord's own limits (5 messages per 5 s per channel, 50 requests per second per bot), plus any
 * the operator set in `channels.discord.rateLimit`: those can only tighten the pacing, since
 * going past Discord's limits earns 429s.
 */
export function discordRateLimits(to: string, configured: DiscordConfig["rateLimit"] = {}): RateLimit[] {
  const chat = `chat:${to}`;
  return [
    { key: chat, count: 5, intervalMs: 5000 },
    { key: "global", count: 50, intervalMs: 1000 },
    ...(configured.perChatPerSecond ? [limitAtRate(`${chat}:second`, configured.perChatPerSecond, 1000)] : []),
    ...(configured.perChatPerMinute ? [limitAtRate(`${chat}:minute`, configured.perChatPerMinute, 60_000)] : []),
    ...(configured.globalPerSecond ? [limitAtRate("global:configured", configured.globalPerSecond, 1000)] : []),
  ];
}

export interface DiscordAdapterOptions {
  /**
   * Wait before login attempt `attempt + 1` after a retryable failure (Discord's API or the
   * network down at start-up). Default: 1 s doubling up to 60 s.
   */
  loginRetryDelayMs?: (attempt: number) => number;
}

const defaultLoginRetryDelayMs = (attempt: number) => Math.min(60_000, 1000 * 2 ** Math.min(attempt, 6));

export function createDiscordAdapter(config: DiscordConfig, ctx: AdapterContext, options: DiscordAdapterOptions = {}): ChannelAdapter {
  const { log } = ctx;
  const loginRetryDelayMs = options.loginRetryDelayMs ?? defaultLoginRetryDelayMs;
  const clean = (text: string) => redact(text, config.token);
  const health: ChannelHealth = { connected: false, lastInboundAt: null, lastError: null };
  let client: Client | null = null;
  let starting: Promise<void> | null = null;
  let cancelStart: ((reason: PlatformError) => void) | null = null;
  /** Aborted by stop(): ends the start in progress, also while it waits to retry its login. */
  let startAbort: AbortController | null = null;
  const loggingIn = new WeakSet<Client>();

  const noteError = (err: unknown, what: string) => {
    const message = clean(err instanceof Error ? err.message : String(err));
    health.lastError = `${what}: ${message}`;
    log.warn({ err: message }, `discord: ${what}`);
  };

  // Messages of one conversation reach the core in gateway order; different conversations don't wait.
  const lanes = new Map<string, Promise<void>>();
  /** Aborted once stop() has waited for the lanes: a hand-over still retrying gives up. */
  let handing = new AbortController();
  const onRetry = (msg: InboundMessage) => (err: unknown, attempt: number, retryInMs: number) => {
    health.lastError = `inbound ${msg.messageId} not accepted, retrying: ${clean(err instanceof Error ? err.message : String(err))}`;
    log.warn({ err: health.lastError, attempt, retryInMs }, "discord: the core could not store an inbound message; retrying (Discord will not deliver it again)");
  };
  const deliver = (msg: InboundMessage) => {
    const prev = lanes.get(msg.peerId) ?? Promise.resolve();
    const next = prev
      .then(() => retryIo(() => ctx.onInbound(msg), { signal: handing.signal, onRetry: onRetry(msg) }))
      .catch((err: unknown) => noteError(err, `inbound ${msg.messageId} not accepted`))
      .finally(() => {
        if (lanes.get(msg.peerId) === next) lanes.delete(msg.peerId);
      });
    lanes.set(msg.peerId, next);
  };

  /**
   * Discord never delivers a message again, so the ones still queued for the core when the
   * adapter stops are handed over first (the daemon stops its router after the adapters), for at
   * most STOP_GRACE_MS.
   */
  const drainLanes = async () => {
    if (lanes.size && !(await within(Promise.all(lanes.values()), STOP_GRACE_MS))) {
      log.error({ conversations: lanes.size }, "discord stopped with inbound messages not yet handed to the core: Discord will not deliver them again");
    }
  };

  function wire(c: Client): void {
    const live = () => client === c;
    const setConnected = (value: boolean) => () => {
      if (live()) health.connected = value;
    };
    c.on(Events.ShardReady, setConnected(true));
    c.on(Events.ShardResume, setConnected(true));
    c.on(Events.ShardReconnecting, setConnected(false));
    c.on(Events.ShardDisconnect, (event) => {
      if (!live()) return;
      health.connected = false;
      noteError(`gateway closed with ${event.code}, not reconnecting`, "disconnected");
    });
    c.on(Events.ShardError, (err) => {
      if (!live()) return;
      health.connected = false;
      // Mapped, so that a close it will not recover from (4014) says what the operator must do.
      noteError(toPlatformError(err, config.token), "gateway error");
    });
    c.on(Events.Invalidated, setConnected(false));
    c.on(Events.Error, (err) => noteError(err, "client error"));
    c.on(Events.MessageCreate, (message) => {
      if (!live() || !c.user) return;
      const mapped = mapMessage(message, { botId: c.user.id, botName: c.user.username, accountId: config.accountId });
      forgetDmChannel(c, message);
      if (!mapped) return;
      health.lastInboundAt = Date.now();
      deliver(mapped);
    });
    // Edits (MessageUpdate) are deliberately not subscribed: an edit is never a new message or a command.
    c.on(Events.InteractionCreate, (interaction) => {
      if (!live() || !interaction.isChatInputCommand()) return;
      // Its channel is read before the first await: it can be forgotten once this returns.
      void handleCommandInteraction(interaction, { accountId: config.accountId, ctx, log, token: config.token });
      forgetDmChannel(c, interaction);
    });
  }

  async function register(c: Client): Promise<void> {
    const appId = config.applicationId ?? c.application?.id;
    if (!appId) {
      noteError("no application id in READY and none configured", "slash commands not registered");
      return;
    }
    try {
      await registerCommands({ rest: c.rest, appId, kv: ctx.kv, log });
    } catch (err) {
      // The adapter still works without slash commands; text commands remain.
      noteError(toPlatformError(err, config.token), "slash command registration failed");
    }
  }

  async function connect(): Promise<void> {
    const c = new Client({
      intents: [GatewayIntentBits.Guilds, GatewayIntentBits.GuildMessages, GatewayIntentBits.DirectMessages, GatewayIntentBits.MessageContent],
      // Without the Channel partial discord.js drops DMs from uncached DM channels.
      partials: [Partials.Channel],
      makeCache,
      allowedMentions: { parse: [] },
      rest: { api: config.apiBase, rejectOnRateLimit: (limit) => limit.retryAfter > MAX_INLINE_RATE_LIMIT_WAIT_MS },
    });
    client = c;
    wire(c);
    // stop() during start must not leave start() waiting for a READY that will never come.
    let cancel!: (reason: PlatformError) => void;
    const ready = new Promise<void>((resolve, reject) => {
      c.once(Events.ClientReady, () => resolve());
      cancel = reject;
    });
    cancelStart = cancel;
    loggingIn.add(c);
    const login = c.login(config.token).finally(() => loggingIn.delete(c));
    try {
      await Promise.race([login, ready]);
      await ready;
    } catch (err) {
      const stopped = client !== c;
      if (!stopped) client = null;
      health.connected = false;
      const failure = toPlatformError(err, config.token);
      if (!stopped) noteError(failure, "login failed");
      // discord.js ignores destroy() while login is still connecting (the socket opens afterwards),
      // so the client is destroyed once login has settled either way.
      void login.then(
        () => c.destroy(),
        () => c.destroy(),
      ).catch(() => undefined);
      throw failure;
    } finally {
      // A start() made after a stop() may already be logging in with a canceller of its own.
      if (cancelStart === cancel) cancelStart = null;
    }
    log.info({ user: c.user?.tag }, "discord: connected");
    if (config.registerCommands) await register(c);
  }

  /**
   * login() fails for good on a network error or a 5xx of `GET /gateway/bot` (discord.js retries
   * neither beyond @discordjs/rest's immediate tries), so a daemon started while the network or
   * Discord's API was down stayed without Discord until restarted. A retryable failure is tried
   * again with backoff, as Telegram and WhatsApp do; a rejected token or intent is not (it fails
   * start() at once, for the operator to see).
   */
  async function connectRetrying(signal: AbortSignal): Promise<void> {
    for (let attempt = 0; ; attempt++) {
      try {
        return await connect();
      } catch (err) {
        const failure = toPlatformError(err, config.token);
        if (!failure.retryable || signal.aborted) throw failure;
        const delayMs = Math.max(failure.retryAfterMs ?? 0, loginRetryDelayMs(attempt));
        log.warn({ err: clean(failure.message), attempt: attempt + 1, retryInMs: delayMs }, "discord: not reachable yet; retrying login");
        await sleep(delayMs, undefined, { signal }).catch(() => undefined);
        if (signal.aborted) throw new PlatformError("discord", "transport", "stopped while starting");
      }
    }
  }

  return {
    channel: "discord",
    accountId: config.accountId,
    textChunkLimit: config.textChunkLimit,

    start() {
      if (handing.signal.aborted) handing = new AbortController();
      if (client && !starting) return Promise.resolve();
      // Concurrent callers share one login; a failed start leaves nothing behind and can be retried.
      if (!starting) {
        const abort = new AbortController();
        startAbort = abort;
        const login: Promise<void> = connectRetrying(abort.signal).finally(() => {
          if (starting === login) starting = null;
          if (startAbort === abort) startAbort = null;
        });
        starting = login;
      }
      return starting;
    },

    async stop() {
      const c = client;
      client = null;
      health.connected = false;
      startAbort?.abort();
      startAbort = null;
      cancelStart?.(new PlatformError("discord", "transport", "stopped while starting"));
      // That start is over for its callers: a start() from here on logs in afresh.
      starting = null;
      // A start in progress cleans up its own client once its login settles (see connect()).
      if (c && !loggingIn.has(c)) await within(c.destroy().catch(() => undefined), STOP_GRACE_MS);
      await drainLanes();
      handing.abort();
    },

    // Discord dedupes message creation by nonce for a few minutes when enforce_nonce is set.
    idempotentSends: true,

    async send(target: OutboundTarget, text: string, opts?: SendOptions): Promise<SendReceipt> {
      const c = client;
      if (!c) throw new PlatformError("discord", "transport", "adapter not started");
      // Discord threads are channels: a thread id, when given, is where the message goes.
      const channelId = target.threadId ?? target.to;
      const body: RESTPostAPIChannelMessageJSONBody = { content: text, allowed_mentions: { parse: [] } };
      if (target.replyToMessageId) body.message_reference = { message_id: target.replyToMessageId, fail_if_not_exists: false };
      if (opts?.idempotencyKey) Object.assign(body, { nonce: discordNonce(opts.idempotencyKey), enforce_nonce: true });
      try {
        const message = (await c.rest.post(Routes.channelMessages(channelId), { body, signal: AbortSignal.timeout(SEND_DEADLINE_MS) })) as APIMessage;
        return { messageId: message.id };
      } catch (err) {
        throw toPlatformError(err, config.token);
      }
    },

    async typing(target: OutboundTarget) {
      const c = client;
      if (!c) return;
      try {
        await c.rest.post(Routes.channelTyping(target.threadId ?? target.to), { signal: AbortSignal.timeout(TYPING_DEADLINE_MS) });
      } catch (err) {
        // Best effort: a missing typing indicator is not worth an error path.
        log.debug({ err: toPlatformError(err, config.token).message }, "discord: typing failed");
      }
    },

    health: () => ({ ...health }),

    rateLimitsFor: (target) => discordRateLimits(target.threadId ?? target.to, config.rateLimit),
  };
}
