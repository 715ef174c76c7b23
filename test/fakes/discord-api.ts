/**
 * A fake Discord — REST (v10) and gateway on 127.0.0.1:0 — speaking the wire protocol discord.js 14
 * uses, so the adapter runs against the real client library instead of a mock of our own code.
 *
 *   const fake = await new FakeDiscord().start();
 *   new Client({ rest: { api: fake.apiBase }, ... }).login(fake.token);
 *   fake.injectDM({ content: "hi" });           // MESSAGE_CREATE from ids.alice
 *   fake.sent(fake.ids.general);                // messages the bot posted
 *   fake.failNext("POST /channels/:id/messages", { status: 403, body: { code: 50001, message: "Missing Access" } });
 *   await fake.stop();
 *
 * Fidelity notes (each one is something discord.js or real Discord actually depends on):
 * - Frames are plain JSON; a `compress` query is refused because zlib-sync is not installed here.
 * - MESSAGE_CREATE carries `channel_type` (discord.js drops DMs without it) and `guild_id`/`member`
 *   for guild messages; the guild and its channels/threads arrive in GUILD_CREATE after READY.
 * - READY's `resume_gateway_url` points at this server (path /resume); RESUME replays the events the
 *   session missed, then RESUMED — like Discord. A client close with 1000/1001 ends the session.
 * - Without the MESSAGE_CONTENT intent, guild message content is blanked unless the bot is
 *   mentioned; privileged intents the app is not approved for close the socket with 4014.
 * - Interaction callbacks need no auth, must come within `interactionDeadlineMs` (Discord: 3 s), and
 *   only once; everything else needs `Authorization: Bot <token>`.
 * - Optional rate-limit enforcement emits `x-ratelimit-*` headers so @discordjs/rest paces itself;
 *   `bucketHeadersOnSuccess: false` leaves them off successful sends (429s still carry them and
 *   `retry-after`), so only the client's own limiter can keep it under the limit.
 * Not modelled: sharding, the bot's own uploads (multipart), non-ephemeral interaction replies on the gateway.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { WebSocket, WebSocketServer, type RawData } from "ws";
import type { APIApplicationCommand, APIMessage } from "discord.js";

type Json = Record<string, unknown>;

/** Gateway intent bits (subset used here). */
export const Intents = {
  Guilds: 1 << 0,
  GuildMembers: 1 << 1,
  GuildPresences: 1 << 8,
  GuildMessages: 1 << 9,
  DirectMessages: 1 << 12,
  MessageContent: 1 << 15,
} as const;
const PRIVILEGED_INTENTS = Intents.GuildMembers | Intents.GuildPresences | Intents.MessageContent;

/** Channel type numbers as Discord sends them. */
export const ChannelKind = { GuildText: 0, DM: 1, GuildAnnouncement: 5, PublicThread: 11, PrivateThread: 12 } as const;

const Op = { Dispatch: 0, Heartbeat: 1, Identify: 2, Resume: 6, Reconnect: 7, InvalidSession: 9, Hello: 10, HeartbeatAck: 11 } as const;
const EPHEMERAL = 1 << 6;
const DISCORD_EPOCH = 1_420_070_400_000n;
const BACKLOG_LIMIT = 1000;

export interface FakeUser {
  id: string;
  username: string;
  globalName?: string | null;
  bot?: boolean;
}

export interface FakeChannel {
  id: string;
  type: number;
  name?: string;
  guildId?: string;
  parentId?: string;
  /** DM channels: the other user. */
  recipientId?: string;
}

export interface RestCall {
  method: string;
  /** Path below /api/v10 without the query, e.g. "/channels/123/messages". */
  path: string;
  /** Route key with ids as parameters, e.g. "POST /channels/:id/messages" — the key for overrides. */
  route: string;
  params: Record<string, string>;
  query: URLSearchParams;
  authorization: string | undefined;
  body: unknown;
  /** Response status, filled in once answered. */
  status: number;
  at: number;
}

export interface RestReply {
  status: number;
  body?: unknown;
  headers?: Record<string, string>;
}

/** Returns a reply to short-circuit the route, or undefined to let it run normally. */
export type RestOverride = (call: RestCall) => RestReply | undefined;

export interface RateLimitRule {
  count: number;
  intervalMs: number;
}

export interface RateLimitRules {
  /** Discord: 5 messages per 5 s per channel. */
  perChannel: RateLimitRule;
  /** Discord: 50 requests per second per bot. */
  global: RateLimitRule;
}

export const PUBLISHED_RATE_LIMITS: RateLimitRules = {
  perChannel: { count: 5, intervalMs: 5000 },
  global: { count: 50, intervalMs: 1000 },
};

export interface FakeDiscordOptions {
  token?: string;
  /** HELLO heartbeat_interval; Discord sends ~41 s. Small values only for heartbeat tests. */
  heartbeatIntervalMs?: number;
  /** Privileged intents the app is approved for in the developer portal (default: all). */
  approvedIntents?: number;
  /** Time allowed for the first interaction response (Discord: 3000 ms). */
  interactionDeadlineMs?: number;
  /** Enforce Discord's published limits (true) or custom ones; off by default. */
  enforceRateLimits?: boolean | Partial<RateLimitRules>;
  /**
   * With enforcement on: whether successful message sends carry the channel bucket's
   * `x-ratelimit-*` headers (default true, as Discord does). Without them @discordjs/rest cannot
   * see the bucket emptying and cannot pace itself, so a test can check a client's own limiter.
   * 429s carry the headers either way.
   */
  bucketHeadersOnSuccess?: boolean;
  /**
   * Clock (ms) for rate-limit windows and `RestCall.at` (default Date.now). `retry-after` is read
   * by the client as wall-clock seconds, so a test on a faster clock should pass wall-clock units.
   */
  now?: () => number;
}

export interface GatewayFrame {
  connection: number;
  op: number;
  d: unknown;
  at: number;
}

export interface FakeInteraction {
  readonly id: string;
  readonly token: string;
  readonly name: string;
  readonly channelId: string;
  readonly guildId: string | undefined;
  readonly userId: string;
  readonly createdAt: number;
  /** POST /interactions/:id/:token/callback bodies, in order. */
  readonly callbacks: Array<{ type: number; data?: Json; at: number }>;
  /** PATCH /webhooks/:appId/:token/messages/@original bodies, in order. */
  readonly edits: Array<{ body: Json; at: number }>;
  readonly followups: Json[];
}

export interface InjectMessageOptions {
  channelId: string;
  /** Author (user id of a known user, or a user); default ids.alice. */
  author?: string | FakeUser;
  content: string;
  /** Reply to this message id (type 19 with referenced_message). */
  replyTo?: string;
  /** Whether the reply pings the replied-to author (Discord clients default to yes). */
  replyPing?: boolean;
  /** Deliver as a forward: top-level content empty, `content` inside message_snapshots. */
  forwarded?: boolean;
  /** Files the message carries, listed as Discord lists them (in the snapshot, for a forward). */
  attachments?: Array<{ filename: string; content_type?: string }>;
  /** Stickers the message carries (`sticker_items`). */
  stickers?: Array<{ name: string }>;
  /** Message flags, e.g. IsVoiceMessage (1 << 13). */
  flags?: number;
}

export interface SlashCommandOptions {
  userId: string;
  /** Where it was used; default: the user's DM channel with the bot. */
  channelId?: string;
  /** Inferred from the channel when omitted. */
  guildId?: string;
  name: string;
  options?: Record<string, string | number | boolean>;
}

interface Session {
  id: string;
  seq: number;
  intents: number;
  socket: WebSocket | null;
  backlog: Array<{ s: number; t: string; d: unknown }>;
}

interface RouteDef {
  method: string;
  pattern: string;
  regex: RegExp;
  keys: string[];
  auth: boolean;
  handler: (call: RestCall) => RestReply;
}

let snowflakeIncrement = 0n;
/** Real-looking snowflakes: discord.js derives createdTimestamp from the id. */
export function snowflake(at = Date.now()): string {
  snowflakeIncrement = (snowflakeIncrement + 1n) & 0xfffn;
  return (((BigInt(at) - DISCORD_EPOCH) << 22n) | snowflakeIncrement).toString();
}

/** Polls `probe` until it returns a truthy value (for callers without vitest's vi.waitFor). */
export async function waitUntil<T>(probe: () => T | Promise<T>, { timeoutMs = 5000, intervalMs = 10 } = {}): Promise<NonNullable<T>> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value) return value as NonNullable<T>;
    if (Date.now() > deadline) throw new Error(`waitUntil: timed out after ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}

function apiError(status: number, code: number, message: string, extra: Json = {}): RestReply {
  return { status, body: { message, code, ...extra } };
}

export class FakeDiscord {
  readonly token: string;
  readonly applicationId = "1200000000000000001";
  readonly ids = {
    bot: "1100000000000000001",
    guild: "1300000000000000001",
    general: "1300000000000000010",
    random: "1300000000000000011",
    thread: "1300000000000000020",
    alice: "1400000000000000001",
    bob: "1400000000000000002",
    otherBot: "1400000000000000009",
    /** The role Discord creates for the bot when it joins a guild (managed, tags.bot_id), named like the bot. */
    botRole: "1500000000000000001",
    /** An ordinary role. */
    staffRole: "1500000000000000002",
  } as const;
  readonly guildName = "Switchboard Test";

  /** Every REST call, in arrival order. */
  readonly calls: RestCall[] = [];
  /** Every gateway frame the client sent. */
  readonly gatewayFrames: GatewayFrame[] = [];
  /** Every WebSocket connection: the path it used ("/gateway" or "/resume") and its query. */
  readonly connections: Array<{ path: string; query: string }> = [];
  readonly interactions = new Map<string, FakeInteraction>();
  /** Every dispatch() call (before per-session intent shaping), in order. */
  readonly dispatched: Array<{ t: string; d: unknown; at: number }> = [];
  /** Count of 429 responses (overrides and enforcement). */
  rateLimitHits = 0;
  /** Dispatches re-sent to a client on RESUME because its socket missed them. */
  replayedEvents = 0;
  /** Count of PUT /applications/:id/commands. */
  commandPuts = 0;

  private readonly users = new Map<string, FakeUser>();
  private readonly channels = new Map<string, FakeChannel>();
  private readonly messages = new Map<string, APIMessage>();
  private readonly posted: APIMessage[] = [];
  private readonly nonces = new Map<string, APIMessage>();
  private commands: APIApplicationCommand[] = [];
  private readonly sessions = new Map<string, Session>();
  private readonly sockets = new Set<WebSocket>();
  private readonly overrides = new Map<string, RestOverride[]>();
  private readonly windows = new Map<string, { start: number; count: number }>();
  private readonly routes: RouteDef[] = [];
  private readonly opts: Required<Omit<FakeDiscordOptions, "enforceRateLimits" | "token">> & { limits: RateLimitRules | null };
  private server: Server | null = null;
  private wss: WebSocketServer | null = null;
  private portNumber = 0;
  private connectionCount = 0;
  private heldUpgrades: Array<() => void> | null = null;
  private identifyRefusal: { code: number; reason: string } | null = null;

  constructor(options: FakeDiscordOptions = {}) {
    this.token = options.token ?? "fake-bot-token";
    const enforce = options.enforceRateLimits ?? false;
    this.opts = {
      heartbeatIntervalMs: options.heartbeatIntervalMs ?? 41_250,
      approvedIntents: options.approvedIntents ?? PRIVILEGED_INTENTS,
      interactionDeadlineMs: options.interactionDeadlineMs ?? 3000,
      limits: enforce === false ? null : { ...PUBLISHED_RATE_LIMITS, ...(enforce === true ? {} : enforce) },
      bucketHeadersOnSuccess: options.bucketHeadersOnSuccess ?? true,
      now: options.now ?? Date.now,
    };
    const { ids } = this;
    for (const u of [
      { id: ids.bot, username: "switchboard", bot: true },
      { id: ids.alice, username: "alice", globalName: "Alice" },
      { id: ids.bob, username: "bob" },
      { id: ids.otherBot, username: "otherbot", bot: true },
    ]) this.users.set(u.id, u);
    for (const c of [
      { id: ids.general, type: ChannelKind.GuildText, name: "general", guildId: ids.guild },
      { id: ids.random, type: ChannelKind.GuildText, name: "random", guildId: ids.guild },
      { id: ids.thread, type: ChannelKind.PublicThread, name: "design-thread", guildId: ids.guild, parentId: ids.general },
    ]) this.channels.set(c.id, c);
    this.defineRoutes();
  }

  // ── lifecycle ────────────────────────────────────────────────────────────────────────────────

  async start(): Promise<this> {
    const server = createServer((req, res) => void this.onHttp(req, res));
    const wss = new WebSocketServer({ noServer: true });
    server.on("upgrade", (req, socket, head) => {
      const url = new URL(req.url ?? "/", "http://fake");
      // Without zlib-sync discord.js never asks for compression; refusing it keeps that assumption honest.
      if (url.searchParams.has("compress") || url.searchParams.get("encoding") !== "json" || url.searchParams.get("v") !== "10") {
        socket.end("HTTP/1.1 400 Bad Request\r\n\r\n");
        return;
      }
      const accept = () => wss.handleUpgrade(req, socket, head, (ws) => this.onSocket(ws, url));
      if (this.heldUpgrades) this.heldUpgrades.push(accept);
      else accept();
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    this.server = server;
    this.wss = wss;
    this.portNumber = (server.address() as AddressInfo).port;
    return this;
  }

  async stop(): Promise<void> {
    for (const ws of this.sockets) ws.terminate();
    this.sockets.clear();
    this.sessions.clear();
    this.wss?.close();
    const server = this.server;
    this.server = null;
    if (server) {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    }
  }

  get port(): number {
    return this.portNumber;
  }
  /** For `rest: { api }` — discord.js appends /v10. */
  get apiBase(): string {
    return `http://127.0.0.1:${this.portNumber}/api`;
  }
  get gatewayUrl(): string {
    return `ws://127.0.0.1:${this.portNumber}/gateway`;
  }
  /** Open gateway sockets. */
  get openSockets(): number {
    return this.sockets.size;
  }

  // ── world ────────────────────────────────────────────────────────────────────────────────────

  user(id: string): FakeUser {
    const u = this.users.get(id);
    if (!u) throw new Error(`fake discord: unknown user ${id}`);
    return u;
  }

  addUser(user: FakeUser): FakeUser {
    this.users.set(user.id, user);
    return user;
  }

  channel(id: string): FakeChannel | undefined {
    return this.channels.get(id);
  }

  /** The DM channel between `userId` and the bot, created on first use (like POST /users/@me/channels). */
  dmChannelId(userId: string): string {
    for (const c of this.channels.values()) if (c.type === ChannelKind.DM && c.recipientId === userId) return c.id;
    const id = snowflake();
    this.channels.set(id, { id, type: ChannelKind.DM, recipientId: userId });
    return id;
  }

  /** Creates a public thread under `parentId` and announces it with THREAD_CREATE. */
  addThread(parentId: string, name: string): string {
    const parent = this.channels.get(parentId);
    if (!parent?.guildId) throw new Error(`fake discord: ${parentId} is not a guild channel`);
    const thread: FakeChannel = { id: snowflake(), type: ChannelKind.PublicThread, name, guildId: parent.guildId, parentId };
    this.channels.set(thread.id, thread);
    this.dispatch("THREAD_CREATE", { ...this.channelPayload(thread), newly_created: true });
    return thread.id;
  }

  /** Messages the bot created through REST, optionally only in one channel. */
  sent(channelId?: string): APIMessage[] {
    return channelId ? this.posted.filter((m) => m.channel_id === channelId) : [...this.posted];
  }

  /** Application commands as last written with PUT /applications/:id/commands. */
  registeredCommands(): APIApplicationCommand[] {
    return [...this.commands];
  }

  callsTo(route: string): RestCall[] {
    return this.calls.filter((c) => c.route === route);
  }

  /** Gateway frames with this opcode (2 IDENTIFY, 6 RESUME, 1 heartbeat). */
  framesWithOp(op: number): GatewayFrame[] {
    return this.gatewayFrames.filter((f) => f.op === op);
  }

  // ── REST overrides ───────────────────────────────────────────────────────────────────────────

  /** Runs before the route's handler on every call; remove with the returned function. */
  override(route: string, fn: RestOverride): () => void {
    const list = this.overrides.get(route) ?? [];
    list.push(fn);
    this.overrides.set(route, list);
    return () => {
      const i = list.indexOf(fn);
      if (i >= 0) list.splice(i, 1);
    };
  }

  /** Answers the next `times` calls to `route` with `reply`. */
  failNext(route: string, reply: RestReply, times = 1): void {
    let left = times;
    const remove = this.override(route, () => {
      if (left <= 0) return undefined;
      if (--left === 0) remove();
      return reply;
    });
  }

  /** A realistic 429 body+headers for `failNext`. */
  static rateLimitReply(retryAfterSeconds: number, global = false): RestReply {
    return {
      status: 429,
      headers: {
        "retry-after": String(retryAfterSeconds),
        "x-ratelimit-scope": global ? "global" : "user",
        ...(global ? { "x-ratelimit-global": "true" } : {}),
      },
      body: { message: "You are being rate limited.", retry_after: retryAfterSeconds, global },
    };
  }

  // ── gateway ──────────────────────────────────────────────────────────────────────────────────

  /** Sends a dispatch to every session (queued for resume while a session has no socket). */
  dispatch(t: string, d: unknown): number {
    this.dispatched.push({ t, d, at: Date.now() });
    let delivered = 0;
    for (const session of this.sessions.values()) {
      const shaped = this.shapeFor(session, t, d);
      if (shaped === null) continue;
      this.sendDispatch(session, t, shaped);
      delivered++;
    }
    return delivered;
  }

  /** Op 7: Discord asks the client to reconnect; discord.js resumes on resume_gateway_url. */
  requestReconnect(): void {
    for (const ws of this.sockets) ws.send(JSON.stringify({ op: Op.Reconnect, d: null }));
  }

  /**
   * A gateway outage: new gateway connections get no answer to their upgrade until the returned
   * function is called, when they are all accepted.
   */
  holdConnections(): () => void {
    const held: Array<() => void> = [];
    this.heldUpgrades = held;
    return () => {
      if (this.heldUpgrades === held) this.heldUpgrades = null;
      for (const accept of held.splice(0)) accept();
    };
  }

  /** Gateway connections waiting in holdConnections(). */
  get heldConnections(): number {
    return this.heldUpgrades?.length ?? 0;
  }

  /** Every IDENTIFY from now on is answered by closing with this code (e.g. 4011 sharding required); null to stop. */
  refuseIdentify(refusal: { code: number; reason: string } | null): void {
    this.identifyRefusal = refusal;
  }

  /** Server-side close of every socket (default 4000, which clients resume from). */
  dropConnections(code = 4000, reason = "fake drop"): void {
    for (const ws of this.sockets) ws.close(code, reason);
  }

  // ── inbound helpers ──────────────────────────────────────────────────────────────────────────

  /** A user posts in a guild channel/thread (or DM channel); returns the message as dispatched. */
  injectMessage(opts: InjectMessageOptions): APIMessage {
    const channel = this.channels.get(opts.channelId);
    if (!channel) throw new Error(`fake discord: unknown channel ${opts.channelId}`);
    const author = typeof opts.author === "object" ? this.addUser(opts.author) : this.user(opts.author ?? this.ids.alice);
    const msg = this.buildMessage(channel, author, opts);
    this.dispatchMessage(msg, channel);
    return msg;
  }

  /** A user DMs the bot. */
  injectDM(opts: Omit<InjectMessageOptions, "channelId">): APIMessage {
    const authorId = typeof opts.author === "object" ? this.addUser(opts.author).id : (opts.author ?? this.ids.alice);
    return this.injectMessage({ ...opts, author: authorId, channelId: this.dmChannelId(authorId) });
  }

  /** A user runs a registered slash command; the record collects the bot's responses. */
  injectSlashCommand(opts: SlashCommandOptions): FakeInteraction {
    const command = this.commands.find((c) => c.name === opts.name);
    if (!command) throw new Error(`fake discord: /${opts.name} is not registered`);
    const channelId = opts.channelId ?? this.dmChannelId(opts.userId);
    const channel = this.channels.get(channelId);
    if (!channel) throw new Error(`fake discord: unknown channel ${channelId}`);
    const guildId = opts.guildId ?? channel.guildId;
    const user = this.user(opts.userId);
    const record: FakeInteraction = {
      id: snowflake(),
      token: `ix-token-${Math.random().toString(36).slice(2)}`,
      name: opts.name,
      channelId,
      guildId,
      userId: user.id,
      createdAt: Date.now(),
      callbacks: [],
      edits: [],
      followups: [],
    };
    this.interactions.set(record.id, record);
    const declared = new Map((command.options ?? []).map((o) => [o.name, o.type]));
    const options = Object.entries(opts.options ?? {}).map(([name, value]) => ({ name, type: declared.get(name) ?? 3, value }));
    this.dispatch("INTERACTION_CREATE", {
      id: record.id,
      application_id: this.applicationId,
      type: 2,
      token: record.token,
      version: 1,
      data: { id: command.id, name: command.name, type: 1, options, ...(guildId ? { guild_id: guildId } : {}) },
      channel_id: channelId,
      channel: this.channelPayload(channel),
      ...(guildId
        ? { guild_id: guildId, guild_locale: "en-US", member: { ...this.memberPayload(user), permissions: "2248473465835073" } }
        : { user: this.userPayload(user) }),
      locale: "en-US",
      app_permissions: "2248473465835073",
      entitlements: [],
      authorizing_integration_owners: { "0": guildId ?? "0" },
      context: guildId ? 0 : 1,
      attachment_size_limit: 10_485_760,
    });
    return record;
  }

  /** What the invoking user finally sees for an interaction, if anything. */
  visibleReply(ix: FakeInteraction): { content: string; ephemeral: boolean } | undefined {
    const first = ix.callbacks[0];
    if (!first) return undefined;
    const flags = Number(first.data?.flags ?? 0);
    const lastEdit = ix.edits.at(-1)?.body;
    const content = lastEdit?.content ?? (first.type === 4 ? first.data?.content : undefined);
    if (typeof content !== "string") return undefined;
    return { content, ephemeral: (flags & EPHEMERAL) !== 0 };
  }

  // ── payloads ─────────────────────────────────────────────────────────────────────────────────

  userPayload(u: FakeUser): Json {
    return {
      id: u.id,
      username: u.username,
      discriminator: "0",
      global_name: u.globalName ?? null,
      avatar: null,
      public_flags: 0,
      ...(u.bot ? { bot: true } : {}),
    };
  }

  private memberPayload(u: FakeUser): Json {
    const roles = u.id === this.ids.bot ? [this.ids.botRole] : [];
    return { user: this.userPayload(u), nick: null, avatar: null, roles, joined_at: new Date(0).toISOString(), premium_since: null, deaf: false, mute: false, flags: 0, pending: false };
  }

  private channelPayload(c: FakeChannel): Json {
    if (c.type === ChannelKind.DM) {
      const recipient = this.users.get(c.recipientId ?? "");
      return { id: c.id, type: c.type, last_message_id: null, flags: 0, recipients: recipient ? [this.userPayload(recipient)] : [] };
    }
    const base = { id: c.id, type: c.type, guild_id: c.guildId, name: c.name, last_message_id: null, rate_limit_per_user: 0, flags: 0 };
    if (c.parentId && (c.type === ChannelKind.PublicThread || c.type === ChannelKind.PrivateThread)) {
      const created = new Date().toISOString();
      return {
        ...base,
        parent_id: c.parentId,
        owner_id: this.ids.alice,
        message_count: 0,
        member_count: 1,
        total_message_sent: 0,
        thread_metadata: { archived: false, auto_archive_duration: 1440, archive_timestamp: created, locked: false, create_timestamp: created },
      };
    }
    return { ...base, position: 0, permission_overwrites: [], parent_id: null, topic: null, nsfw: false };
  }

  private buildMessage(channel: FakeChannel, author: FakeUser, opts: Partial<InjectMessageOptions> & { content: string; nonce?: string | number }): APIMessage {
    const now = Date.now();
    const referenced = opts.replyTo ? this.messages.get(opts.replyTo) : undefined;
    if (opts.replyTo && !referenced) throw new Error(`fake discord: unknown message ${opts.replyTo}`);
    // Discord parses <@id> / <@!id> in content into `mentions`; a pinging reply adds the replied author.
    const mentioned = new Map<string, FakeUser>();
    for (const m of opts.content.matchAll(/<@!?(\d+)>/g)) {
      const u = this.users.get(m[1]!);
      if (u) mentioned.set(u.id, u);
    }
    if (referenced && opts.replyPing !== false) {
      const u = this.users.get(referenced.author.id);
      if (u) mentioned.set(u.id, u);
    }
    // <@&id> of one of the guild's roles goes into `mention_roles`; @everyone/@here only set the flag.
    const guildRoles: string[] = channel.guildId ? [this.ids.botRole, this.ids.staffRole] : [];
    const mentionedRoles = [...new Set([...opts.content.matchAll(/<@&(\d+)>/g)].map((m) => m[1]!))].filter((id) => guildRoles.includes(id));
    const forwarded = opts.forwarded === true;
    // What the author posted: the message's own, or the forwarded snapshot's.
    const posted = {
      content: opts.content,
      attachments: (opts.attachments ?? []).map((a) => {
        const id = snowflake(now);
        const url = `https://cdn.discordapp.com/attachments/${channel.id}/${id}/${a.filename}`;
        return { id, filename: a.filename, size: 1024, url, proxy_url: url, ...(a.content_type ? { content_type: a.content_type } : {}) };
      }),
      ...(opts.stickers ? { sticker_items: opts.stickers.map((st) => ({ id: snowflake(now), name: st.name, format_type: 1 })) } : {}),
      flags: opts.flags ?? 0,
    };
    const msg: Json = {
      id: snowflake(now),
      channel_id: channel.id,
      author: this.userPayload(author),
      ...(forwarded ? { content: "", attachments: [], flags: 0 } : posted),
      timestamp: new Date(now).toISOString(),
      edited_timestamp: null,
      tts: false,
      mention_everyone: !forwarded && !!channel.guildId && /@(everyone|here)\b/.test(opts.content),
      mentions: forwarded ? [] : [...mentioned.values()].map((u) => this.userPayload(u)),
      mention_roles: forwarded ? [] : mentionedRoles,
      embeds: [],
      components: [],
      pinned: false,
      type: referenced ? 19 : 0,
      ...(opts.nonce !== undefined ? { nonce: opts.nonce } : {}),
    };
    if (referenced) {
      msg.message_reference = { type: 0, message_id: referenced.id, channel_id: referenced.channel_id, ...(channel.guildId ? { guild_id: channel.guildId } : {}) };
      msg.referenced_message = referenced;
    }
    if (forwarded) {
      msg.message_reference = { type: 1, message_id: snowflake(now - 60_000), channel_id: this.ids.random, guild_id: this.ids.guild };
      msg.message_snapshots = [
        { message: { type: 0, ...posted, embeds: [], timestamp: new Date(now - 60_000).toISOString(), edited_timestamp: null, mentions: [], mention_roles: [] } },
      ];
    }
    const built = msg as unknown as APIMessage;
    this.messages.set(built.id, built);
    return built;
  }

  private dispatchMessage(msg: APIMessage, channel: FakeChannel): void {
    const author = this.users.get(msg.author.id);
    this.dispatch("MESSAGE_CREATE", {
      ...msg,
      channel_type: channel.type,
      ...(channel.guildId ? { guild_id: channel.guildId, ...(author ? { member: this.memberNoUser(author) } : {}) } : {}),
    });
  }

  private memberNoUser(u: FakeUser): Json {
    const { user: _user, ...rest } = this.memberPayload(u);
    return rest;
  }

  private guildCreatePayload(): Json {
    const guildChannels = [...this.channels.values()].filter((c) => c.guildId === this.ids.guild);
    const strip = (c: FakeChannel) => {
      const { guild_id: _g, ...rest } = this.channelPayload(c);
      return rest;
    };
    const members = [...this.users.values()].map((u) => this.memberPayload(u));
    // Every field discord.js's Guild reads; the values are those of a fresh small server.
    return {
      id: this.ids.guild, name: this.guildName, owner_id: this.ids.alice, joined_at: new Date(0).toISOString(),
      icon: null, splash: null, discovery_splash: null, banner: null, description: null, vanity_url_code: null,
      afk_channel_id: null, afk_timeout: 300, system_channel_id: null, system_channel_flags: 0, rules_channel_id: null,
      public_updates_channel_id: null, safety_alerts_channel_id: null, application_id: null,
      verification_level: 0, default_message_notifications: 0, explicit_content_filter: 0, mfa_level: 0, nsfw_level: 0,
      premium_tier: 0, premium_progress_bar_enabled: false, preferred_locale: "en-US", features: [],
      roles: [
        { id: this.ids.guild, name: "@everyone", color: 0, hoist: false, icon: null, unicode_emoji: null, position: 0, permissions: "2248473465835073", managed: false, mentionable: false, flags: 0 },
        { id: this.ids.botRole, name: this.user(this.ids.bot).username, color: 0, hoist: false, icon: null, unicode_emoji: null, position: 1, permissions: "2248473465835073", managed: true, mentionable: true, flags: 0, tags: { bot_id: this.ids.bot } },
        { id: this.ids.staffRole, name: "staff", color: 0, hoist: false, icon: null, unicode_emoji: null, position: 2, permissions: "0", managed: false, mentionable: true, flags: 0 },
      ],
      emojis: [], stickers: [], voice_states: [], presences: [], stage_instances: [], guild_scheduled_events: [], soundboard_sounds: [],
      large: false, unavailable: false, member_count: members.length, members,
      channels: guildChannels.filter((c) => !c.parentId).map(strip),
      threads: guildChannels.filter((c) => c.parentId).map((c) => this.channelPayload(c)),
    };
  }

  // ── gateway internals ────────────────────────────────────────────────────────────────────────

  private onSocket(ws: WebSocket, url: URL): void {
    const connection = ++this.connectionCount;
    this.sockets.add(ws);
    this.connections.push({ path: url.pathname, query: url.search });
    let session: Session | null = null;
    ws.on("message", (raw: RawData) => {
      let frame: { op: number; d: unknown };
      try {
        frame = JSON.parse(raw.toString()) as { op: number; d: unknown };
      } catch {
        ws.close(4002, "Error while decoding payload.");
        return;
      }
      this.gatewayFrames.push({ connection, op: frame.op, d: frame.d, at: Date.now() });
      switch (frame.op) {
        case Op.Heartbeat:
          ws.send(JSON.stringify({ op: Op.HeartbeatAck }));
          return;
        case Op.Identify:
          session = this.identify(ws, frame.d as { token: string; intents: number });
          return;
        case Op.Resume:
          session = this.resume(ws, frame.d as { token: string; session_id: string; seq: number });
          return;
        default:
          if (!session) ws.close(4003, "Not authenticated.");
      }
    });
    ws.on("close", (code: number) => {
      this.sockets.delete(ws);
      if (session && session.socket === ws) {
        session.socket = null;
        // A client's normal close ends the session (Discord invalidates it); other codes keep it resumable.
        if (code === 1000 || code === 1001) this.sessions.delete(session.id);
      }
    });
    ws.send(JSON.stringify({ op: Op.Hello, d: { heartbeat_interval: this.opts.heartbeatIntervalMs } }));
  }

  private identify(ws: WebSocket, d: { token: string; intents: number }): Session | null {
    if (d.token !== this.token) {
      ws.close(4004, "Authentication failed.");
      return null;
    }
    if ((d.intents & PRIVILEGED_INTENTS & ~this.opts.approvedIntents) !== 0) {
      ws.close(4014, "Disallowed intent(s).");
      return null;
    }
    if (this.identifyRefusal) {
      ws.close(this.identifyRefusal.code, this.identifyRefusal.reason);
      return null;
    }
    const session: Session = { id: `fake-session-${snowflake()}`, seq: 0, intents: d.intents, socket: ws, backlog: [] };
    this.sessions.set(session.id, session);
    const messageContentFlag = (this.opts.approvedIntents & Intents.MessageContent) !== 0 ? 1 << 18 : 0;
    this.sendDispatch(session, "READY", {
      v: 10,
      user: { ...this.userPayload(this.user(this.ids.bot)), verified: true, mfa_enabled: false, flags: 0 },
      guilds: [{ id: this.ids.guild, unavailable: true }],
      session_id: session.id,
      resume_gateway_url: `ws://127.0.0.1:${this.portNumber}/resume`,
      shard: [0, 1],
      application: { id: this.applicationId, flags: messageContentFlag },
      private_channels: [], relationships: [], presences: [], guild_join_requests: [], geo_ordered_rtc_regions: [],
      user_settings: {}, session_type: "normal", _trace: ["fake-discord"],
    });
    this.sendDispatch(session, "GUILD_CREATE", this.guildCreatePayload());
    return session;
  }

  private resume(ws: WebSocket, d: { token: string; session_id: string; seq: number }): Session | null {
    if (d.token !== this.token) {
      ws.close(4004, "Authentication failed.");
      return null;
    }
    const session = this.sessions.get(d.session_id);
    if (!session) {
      ws.send(JSON.stringify({ op: Op.InvalidSession, d: false }));
      return null;
    }
    if (session.socket && session.socket !== ws) session.socket.close(4000, "Session resumed elsewhere");
    session.socket = ws;
    for (const event of session.backlog) {
      if (event.s <= d.seq) continue;
      ws.send(JSON.stringify({ op: Op.Dispatch, t: event.t, s: event.s, d: event.d }));
      this.replayedEvents++;
    }
    this.sendDispatch(session, "RESUMED", { _trace: ["fake-discord"] });
    return session;
  }

  private sendDispatch(session: Session, t: string, d: unknown): void {
    const s = ++session.seq;
    session.backlog.push({ s, t, d });
    if (session.backlog.length > BACKLOG_LIMIT) session.backlog.shift();
    if (session.socket?.readyState === WebSocket.OPEN) session.socket.send(JSON.stringify({ op: Op.Dispatch, t, s, d }));
  }

  /** Applies intents the way Discord does: event filtering and MESSAGE_CONTENT blanking. */
  private shapeFor(session: Session, t: string, d: unknown): unknown {
    if (t !== "MESSAGE_CREATE" && t !== "MESSAGE_UPDATE") return d;
    const msg = d as Json & { guild_id?: string; author: { id: string }; mentions?: Array<{ id: string }> };
    const needed = msg.guild_id ? Intents.GuildMessages : Intents.DirectMessages;
    if ((session.intents & needed) === 0) return null;
    const contentVisible =
      (session.intents & Intents.MessageContent) !== 0 ||
      !msg.guild_id ||
      msg.author.id === this.ids.bot ||
      (msg.mentions ?? []).some((u) => u.id === this.ids.bot);
    if (contentVisible) return d;
    return { ...msg, content: "", embeds: [], attachments: [], components: [], ...(msg.message_snapshots ? { message_snapshots: [] } : {}) };
  }

  // ── REST internals ───────────────────────────────────────────────────────────────────────────

  private async onHttp(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? "/", "http://fake");
    const raw = await new Promise<string>((resolve) => {
      const chunks: Buffer[] = [];
      req.on("data", (c: Buffer) => chunks.push(c));
      req.on("end", () => resolve(Buffer.concat(chunks).toString("utf8")));
    });
    const m = /^\/api(?:\/v\d+)?(\/.*)$/.exec(url.pathname);
    // discord.js percent-encodes "@original"; routes are matched on the decoded path.
    const path = decodeURIComponent(m?.[1] ?? url.pathname);
    let body: unknown = raw || undefined;
    if (raw && req.headers["content-type"]?.startsWith("application/json")) {
      try {
        body = JSON.parse(raw);
      } catch {
        body = raw;
      }
    }
    const method = req.method ?? "GET";
    const found = m ? this.match(method, path) : null;
    const call: RestCall = {
      method,
      path,
      route: found ? `${method} ${found.def.pattern}` : `${method} ${path}`,
      params: found?.params ?? {},
      query: url.searchParams,
      authorization: req.headers.authorization,
      body,
      status: 0,
      at: this.opts.now(),
    };
    this.calls.push(call);
    const after: Array<() => void> = [];
    const reply = found ? this.answer(call, found.def, after) : apiError(404, 0, "404: Not Found");
    call.status = reply.status;
    if (reply.status === 429) this.rateLimitHits++;
    const headers: Record<string, string> = { ...reply.headers };
    if (reply.status === 204 || reply.body === undefined) {
      res.writeHead(reply.status, headers).end();
    } else {
      res.writeHead(reply.status, { ...headers, "content-type": "application/json" }).end(JSON.stringify(reply.body));
    }
    // Gateway echoes go out after the HTTP answer, as they do from Discord.
    if (after.length) setImmediate(() => after.forEach((fn) => fn()));
  }

  private match(method: string, path: string): { def: RouteDef; params: Record<string, string> } | null {
    for (const def of this.routes) {
      if (def.method !== method) continue;
      const m = def.regex.exec(path);
      if (!m) continue;
      const params: Record<string, string> = {};
      def.keys.forEach((k, i) => (params[k] = m[i + 1]!));
      return { def, params };
    }
    return null;
  }

  private answer(call: RestCall, def: RouteDef, after: Array<() => void>): RestReply {
    if (def.auth && call.authorization !== `Bot ${this.token}`) return apiError(401, 0, "401: Unauthorized");
    for (const fn of [...(this.overrides.get(call.route) ?? [])]) {
      const reply = fn(call);
      if (reply) return reply;
    }
    const limits = this.opts.limits;
    if (!limits || !def.auth) return this.runHandler(def, call, after);
    const global = this.take("global", limits.global, call.at);
    if (!global.ok) return this.limited(global.retryAfterMs, true, {});
    if (call.route !== "POST /channels/:id/messages") return this.runHandler(def, call, after);
    const bucket = this.take(`msg:${call.params.id}`, limits.perChannel, call.at);
    const headers = {
      "x-ratelimit-limit": String(limits.perChannel.count),
      "x-ratelimit-remaining": String(bucket.remaining),
      "x-ratelimit-reset": ((call.at + bucket.resetAfterMs) / 1000).toFixed(3),
      "x-ratelimit-reset-after": (bucket.resetAfterMs / 1000).toFixed(3),
      "x-ratelimit-bucket": "fake0channel0messages0bucket",
    };
    if (!bucket.ok) return this.limited(bucket.retryAfterMs, false, headers);
    const reply = this.runHandler(def, call, after);
    if (!this.opts.bucketHeadersOnSuccess) return reply;
    return { ...reply, headers: { ...headers, ...reply.headers } };
  }

  private runHandler(def: RouteDef, call: RestCall, after: Array<() => void>): RestReply {
    const reply = def.handler(call);
    const effect = (reply as RestReply & { after?: () => void }).after;
    if (effect) after.push(effect);
    return reply;
  }

  /** Fixed windows starting at the first request, which is how Discord's buckets behave. */
  private take(key: string, rule: RateLimitRule, now: number): { ok: boolean; remaining: number; resetAfterMs: number; retryAfterMs: number } {
    let w = this.windows.get(key);
    if (!w || now - w.start >= rule.intervalMs) {
      w = { start: now, count: 0 };
      this.windows.set(key, w);
    }
    const resetAfterMs = Math.max(0, w.start + rule.intervalMs - now);
    if (w.count >= rule.count) return { ok: false, remaining: 0, resetAfterMs, retryAfterMs: resetAfterMs };
    w.count++;
    return { ok: true, remaining: rule.count - w.count, resetAfterMs, retryAfterMs: 0 };
  }

  private limited(retryAfterMs: number, global: boolean, headers: Record<string, string>): RestReply {
    const seconds = Number((retryAfterMs / 1000).toFixed(3));
    return {
      status: 429,
      headers: {
        ...headers,
        "retry-after": String(seconds),
        "x-ratelimit-scope": global ? "global" : "user",
        ...(global ? { "x-ratelimit-global": "true" } : {}),
      },
      body: { message: "You are being rate limited.", retry_after: seconds, global },
    };
  }

  private defineRoutes(): void {
    const route = (method: string, pattern: string, auth: boolean, handler: RouteDef["handler"]) => {
      const keys: string[] = [];
      const source = pattern.replace(/[.*+?^${}()|[\]\\]/g, "\\$&").replace(/:(\w+)/g, (_m, k: string) => {
        keys.push(k);
        return "([^/]+)";
      });
      this.routes.push({ method, pattern, regex: new RegExp(`^${source}$`), keys, auth, handler });
    };
    const ok = (body: unknown, after?: () => void): RestReply & { after?: () => void } => ({ status: 200, body, after });

    route("GET", "/gateway", false, () => ok({ url: this.gatewayUrl }));
    route("GET", "/gateway/bot", true, () =>
      ok({ url: this.gatewayUrl, shards: 1, session_start_limit: { total: 1000, remaining: 999, reset_after: 86_400_000, max_concurrency: 1 } }),
    );
    route("GET", "/users/@me", true, () => ok(this.userPayload(this.user(this.ids.bot))));
    route("POST", "/users/@me/channels", true, (call) => {
      const recipient = (call.body as { recipient_id?: string } | undefined)?.recipient_id;
      if (!recipient || !this.users.has(recipient)) return apiError(400, 50035, "Invalid Form Body");
      return ok(this.channelPayload(this.channels.get(this.dmChannelId(recipient))!));
    });
    route("GET", "/channels/:id", true, (call) => {
      const c = this.channels.get(call.params.id!);
      return c ? ok(this.channelPayload(c)) : apiError(404, 10003, "Unknown Channel");
    });
    route("POST", "/channels/:id/messages", true, (call) => this.createMessage(call));
    route("POST", "/channels/:id/typing", true, (call) =>
      this.channels.has(call.params.id!) ? { status: 204 } : apiError(404, 10003, "Unknown Channel"),
    );
    route("GET", "/applications/:id/commands", true, () => ok(this.commands));
    route("PUT", "/applications/:id/commands", true, (call) => {
      if (call.params.id !== this.applicationId) return apiError(403, 50001, "Missing Access");
      this.commandPuts++;
      const defs = (call.body ?? []) as Array<Json & { name: string }>;
      this.commands = defs.map((def) => {
        const existing = this.commands.find((c) => c.name === def.name);
        return { ...def, id: existing?.id ?? snowflake(), application_id: this.applicationId, version: snowflake(), default_member_permissions: null, type: def.type ?? 1 } as unknown as APIApplicationCommand;
      });
      return ok(this.commands);
    });
    route("POST", "/interactions/:id/:token/callback", false, (call) => this.interactionCallback(call));
    route("PATCH", "/webhooks/:appId/:token/messages/@original", false, (call) => this.editOriginal(call));
    route("GET", "/webhooks/:appId/:token/messages/@original", false, (call) => {
      const ix = this.interactionByToken(call.params.appId!, call.params.token!);
      return ix && ix.callbacks.length ? ok(this.interactionMessage(ix)) : apiError(404, 10008, "Unknown Message");
    });
    route("POST", "/webhooks/:appId/:token", false, (call) => {
      const ix = this.interactionByToken(call.params.appId!, call.params.token!);
      if (!ix || !ix.callbacks.length) return apiError(404, 10015, "Unknown Webhook");
      ix.followups.push((call.body ?? {}) as Json);
      return ok({ ...this.interactionMessage(ix), id: snowflake(), content: (call.body as Json | undefined)?.content ?? "" });
    });
  }

  private createMessage(call: RestCall): RestReply & { after?: () => void } {
    const channel = this.channels.get(call.params.id!);
    if (!channel) return apiError(404, 10003, "Unknown Channel");
    const b = (call.body ?? {}) as { content?: unknown; nonce?: string | number; enforce_nonce?: boolean; message_reference?: { message_id?: string; fail_if_not_exists?: boolean } };
    const content = typeof b.content === "string" ? b.content : "";
    if (content.length > 2000) {
      return apiError(400, 50035, "Invalid Form Body", { errors: { content: { _errors: [{ code: "BASE_TYPE_MAX_LENGTH", message: "Must be 2000 or fewer in length." }] } } });
    }
    if (!content.trim()) return apiError(400, 50006, "Cannot send an empty message");
    const nonceKey = b.enforce_nonce && b.nonce !== undefined ? `${channel.id}:${b.nonce}` : null;
    const prior = nonceKey ? this.nonces.get(nonceKey) : undefined;
    if (prior) return { status: 200, body: prior };
    let replyTo = b.message_reference?.message_id;
    // Discord posts a reply to a missing message as a plain message when fail_if_not_exists is false.
    if (replyTo && !this.messages.has(replyTo) && b.message_reference?.fail_if_not_exists === false) replyTo = undefined;
    if (replyTo && !this.messages.has(replyTo)) return apiError(400, 50035, "Invalid Form Body", { errors: { message_reference: { _errors: [{ code: "MESSAGE_REFERENCE_UNKNOWN_MESSAGE", message: "Unknown message" }] } } });
    const msg = this.buildMessage(channel, this.user(this.ids.bot), { content, replyTo, replyPing: false, nonce: b.nonce });
    this.posted.push(msg);
    if (nonceKey) this.nonces.set(nonceKey, msg);
    return { status: 200, body: msg, after: () => this.dispatchMessage(msg, channel) };
  }

  private interactionCallback(call: RestCall): RestReply {
    const ix = this.interactions.get(call.params.id!);
    if (!ix || ix.token !== call.params.token) return apiError(404, 10062, "Unknown interaction");
    if (ix.callbacks.length > 0) return apiError(400, 40060, "Interaction has already been acknowledged.");
    if (Date.now() - ix.createdAt > this.opts.interactionDeadlineMs) return apiError(404, 10062, "Unknown interaction");
    const body = (call.body ?? {}) as { type?: number; data?: Json };
    if (body.type !== 4 && body.type !== 5) return apiError(400, 50035, "Invalid Form Body");
    ix.callbacks.push({ type: body.type, data: body.data, at: Date.now() });
    if (call.query.get("with_response") !== "true") return { status: 204 };
    return {
      status: 200,
      body: {
        interaction: { id: ix.id, type: 2, activity_instance_id: null, response_message_id: ix.id, response_message_loading: body.type === 5, response_message_ephemeral: (Number(body.data?.flags ?? 0) & EPHEMERAL) !== 0 },
        resource: { type: body.type, message: this.interactionMessage(ix) },
      },
    };
  }

  private editOriginal(call: RestCall): RestReply {
    const ix = this.interactionByToken(call.params.appId!, call.params.token!);
    if (!ix) return apiError(404, 10015, "Unknown Webhook");
    if (!ix.callbacks.length) return apiError(404, 10008, "Unknown Message");
    const body = (call.body ?? {}) as Json;
    if (typeof body.content === "string" && body.content.length > 2000) return apiError(400, 50035, "Invalid Form Body");
    ix.edits.push({ body, at: Date.now() });
    return { status: 200, body: this.interactionMessage(ix) };
  }

  private interactionByToken(appId: string, token: string): FakeInteraction | undefined {
    if (appId !== this.applicationId) return undefined;
    for (const ix of this.interactions.values()) if (ix.token === token) return ix;
    return undefined;
  }

  private interactionMessage(ix: FakeInteraction): Json {
    const first = ix.callbacks[0];
    const content = ix.edits.at(-1)?.body.content ?? (first?.type === 4 ? first.data?.content : "") ?? "";
    const user = this.user(ix.userId);
    return {
      id: ix.id,
      type: 20,
      channel_id: ix.channelId,
      author: this.userPayload(this.user(this.ids.bot)),
      content,
      timestamp: new Date(ix.createdAt).toISOString(),
      edited_timestamp: ix.edits.length ? new Date().toISOString() : null,
      tts: false,
      mention_everyone: false,
      mentions: [],
      mention_roles: [],
      attachments: [],
      embeds: [],
      components: [],
      pinned: false,
      flags: Number(first?.data?.flags ?? 0),
      webhook_id: this.applicationId,
      application_id: this.applicationId,
      interaction_metadata: { id: ix.id, type: 2, user: this.userPayload(user), authorizing_integration_owners: { "0": ix.guildId ?? "0" }, name: ix.name, command_type: 1 },
    };
  }
}
