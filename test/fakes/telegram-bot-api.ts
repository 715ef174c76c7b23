/**
 * A fake Telegram Bot API server for tests and benches: real HTTP on 127.0.0.1, the real wire
 * protocol (`POST /bot<token>/<method>`, JSON or urlencoded body, `{ok, result}` /
 * `{ok:false, error_code, description, parameters}` answers, HTTP status = error_code), so any
 * client (telegraf here) is exercised end to end.
 *
 * Usage:
 *   const api = new FakeTelegramBotApi({ enforceRateLimits: true });
 *   const apiRoot = await api.start();                    // "http://127.0.0.1:<port>/"
 *   api.injectText({ chat: privateChat(alice), from: alice, text: "hi" });
 *   await api.waitForCall("sendMessage");
 *   api.failNext("sendMessage", errors.blocked);          // or api.override(method, handler)
 *   await api.stop();
 *
 * Behaviour modelled on the real service:
 * - wrong token → 401 Unauthorized; unknown method → 404 Not Found;
 * - getUpdates: `offset` confirms (forgets) every earlier update; long poll parks until an update
 *   arrives or `timeout` elapses; a second concurrent getUpdates terminates the first with 409;
 *   getUpdates while a webhook is set → 409; `allowed_updates` filters update kinds;
 * - sendMessage: per-chat message ids, a realistic Message result, 400 for empty/too long text,
 *   for message_thread_id=1 in a forum (General topic), for unknown reply targets without
 *   allow_sending_without_reply and for a group upgraded to a supergroup (`migrateChat()`, with
 *   parameters.migrate_to_chat_id); 403 for chats in `blockChat()`;
 * - optional rate limits (Telegram's published ones): >1 msg/s to a private chat, >20 msgs/min to a
 *   group, >30 msgs/s overall → 429 with parameters.retry_after; hits are counted in `rateLimitHits`;
 * - injected messages carry entities (mentions, bot commands) computed the way Telegram does, and
 *   forum topic messages carry the topic-creation reply_to_message Telegram attaches.
 */
import http from "node:http";
import type { AddressInfo } from "node:net";

export interface FakeUser {
  id: number;
  is_bot: boolean;
  first_name: string;
  last_name?: string;
  username?: string;
}

export interface FakeChat {
  id: number;
  type: "private" | "group" | "supergroup" | "channel";
  title?: string;
  username?: string;
  first_name?: string;
  last_name?: string;
  is_forum?: boolean;
}

export interface FakeEntity {
  type: string;
  offset: number;
  length: number;
  user?: FakeUser;
}

export interface FakeMessage {
  message_id: number;
  message_thread_id?: number;
  is_topic_message?: boolean;
  from?: FakeUser;
  chat: FakeChat;
  date: number;
  edit_date?: number;
  text?: string;
  entities?: FakeEntity[];
  caption?: string;
  caption_entities?: FakeEntity[];
  reply_to_message?: FakeMessage;
  forum_topic_created?: { name: string; icon_color: number };
  forward_origin?: { type: "user"; date: number; sender_user: FakeUser };
  [field: string]: unknown;
}

export interface FakeUpdate {
  update_id: number;
  [kind: string]: unknown;
}

export interface ApiFailure {
  ok: false;
  error_code: number;
  description: string;
  parameters?: { retry_after?: number; migrate_to_chat_id?: number };
}
/** What a method handler answers; `destroySocket` drops the connection (a network error). */
export type ApiReply = { ok: true; result: unknown } | ApiFailure | { destroySocket: true };

export interface RecordedCall {
  seq: number;
  method: string;
  body: Record<string, unknown>;
  /** Arrival time (fake clock). */
  at: number;
  /** Filled in when answered; undefined while a long poll is parked. */
  reply?: ApiReply;
  /** The client's port: calls with the same one came over the same (kept-alive) connection. */
  clientPort?: number;
}

/** Return undefined to fall through to the default behaviour. */
export type OverrideHandler = (body: Record<string, unknown>, call: RecordedCall) => ApiReply | undefined | Promise<ApiReply | undefined>;

export interface FakeTelegramOptions {
  /** Default "123456789:AAF-fake-token_for-tests". */
  token?: string;
  bot?: Partial<FakeUser>;
  /** Enforce Telegram's published send limits (default false). Can be toggled later. */
  enforceRateLimits?: boolean;
  /** Answer sendMessage to chats never seen in an update (or registerChat) with 400 chat not found. */
  strictChats?: boolean;
  /** Cap on how long a long poll parks, whatever `timeout` asks (default: no cap). */
  maxLongPollMs?: number;
  /** Clock (ms), injectable for rate-limit tests. */
  now?: () => number;
  /**
   * Keep `calls`, `sent` and the messages replies can point at (default true). Benchmarks turn
   * it off: a fake that remembers every request grows its heap, and its GC pauses would be
   * measured as the daemon's latency.
   */
  history?: boolean;
}

export interface InjectTextOptions {
  chat: FakeChat;
  from: FakeUser;
  text?: string;
  /** Sent as a media caption instead of text. */
  caption?: string;
  /** Forum topic id (supergroup with is_forum), reply-thread id (plain supergroup) or DM topic. */
  threadId?: number;
  /** Overrides the entities Telegram would compute. */
  entities?: FakeEntity[];
  /** The message replied to, e.g. one of `api.sent`. */
  replyTo?: FakeMessage;
  /** Deliver as edited_message of this earlier message id. */
  editOf?: number;
  forwardedFrom?: FakeUser;
  /**
   * The message's media fields as Telegram sends them (`{ voice: {…} }`, `{ document: { file_name } }`),
   * instead of the photo a caption comes with or the sticker a message with neither text nor caption is.
   */
  media?: Record<string, unknown>;
  /** The album this message is an item of (Telegram's media_group_id). */
  mediaGroupId?: string;
}

export const ok = (result: unknown): ApiReply => ({ ok: true, result });
export const fail = (error_code: number, description: string, parameters?: ApiFailure["parameters"]): ApiFailure => ({ ok: false, error_code, description, ...(parameters ? { parameters } : {}) });

/** Error answers exactly as Telegram words them. */
export const errors = {
  unauthorized: fail(401, "Unauthorized"),
  notFound: fail(404, "Not Found"),
  conflict: fail(409, "Conflict: terminated by other getUpdates request; make sure that only one bot instance is running"),
  webhookActive: fail(409, "Conflict: can't use getUpdates method while webhook is active; use deleteWebhook to delete the webhook first"),
  blocked: fail(403, "Forbidden: bot was blocked by the user"),
  kicked: fail(403, "Forbidden: bot was kicked from the group chat"),
  chatNotFound: fail(400, "Bad Request: chat not found"),
  threadNotFound: fail(400, "Bad Request: message thread not found"),
  migrated: (to: number): ApiFailure => fail(400, "Bad Request: group chat was upgraded to a supergroup chat", { migrate_to_chat_id: to }),
  serverError: fail(500, "Internal Server Error"),
  badGateway: fail(502, "Bad Gateway"),
  tooManyRequests: (retryAfter: number): ApiFailure => fail(429, `Too Many Requests: retry after ${retryAfter}`, { retry_after: retryAfter }),
};

let nextUserId = 1000;
export function fakeUser(first_name: string, extra: Partial<FakeUser> = {}): FakeUser {
  return { id: nextUserId++, is_bot: false, first_name, ...extra };
}
export function privateChat(user: FakeUser): FakeChat {
  return { id: user.id, type: "private", first_name: user.first_name, ...(user.username ? { username: user.username } : {}) };
}
export function groupChat(id: number, title: string): FakeChat {
  return { id, type: "group", title };
}
export function supergroupChat(id: number, title: string, opts: { forum?: boolean } = {}): FakeChat {
  return { id, type: "supergroup", title, ...(opts.forum ? { is_forum: true } : {}) };
}

/** Polls `cond` (sync or async) until it returns a truthy value; rejects after `timeoutMs`. */
export async function waitFor<T>(cond: () => T | Promise<T>, timeoutMs = 5000, label = "condition"): Promise<Exclude<T, false | null | undefined | 0 | "">> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await cond();
    if (v) return v as Exclude<T, false | null | undefined | 0 | "">;
    if (Date.now() > deadline) throw new Error(`waitFor timed out after ${timeoutMs} ms: ${label}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

interface ParkedPoll {
  wake(): void;
  conflict(): void;
}

const LIMITS = { privatePerSecond: 1, groupPerMinute: 20, globalPerSecond: 30 };

export class FakeTelegramBotApi {
  readonly token: string;
  readonly bot: FakeUser;
  enforceRateLimits: boolean;
  strictChats: boolean;
  /** Every request in arrival order, getUpdates included. */
  readonly calls: RecordedCall[] = [];
  /** Messages the bot sent (the Message objects returned to sendMessage). */
  readonly sent: FakeMessage[] = [];
  /** Number of 429 answers produced by rate-limit enforcement. */
  rateLimitHits = 0;
  webhookUrl = "";
  /** Registered command menus by scope+language key ("default" for the plain list). */
  readonly commands = new Map<string, unknown[]>();

  private readonly now: () => number;
  private readonly history: boolean;
  private readonly maxLongPollMs: number;
  private server: http.Server | undefined;
  private root = "";
  private queue: FakeUpdate[] = [];
  private nextUpdateId = 1;
  private confirmed = 0;
  private allowedUpdates: string[] = [];
  private parked: ParkedPoll | undefined;
  private readonly overrides = new Map<string, OverrideHandler>();
  private readonly chats = new Map<number, FakeChat>();
  private readonly messages = new Map<number, Map<number, FakeMessage>>();
  private readonly lastMessageId = new Map<number, number>();
  private readonly blocked = new Set<number>();
  /** Basic groups upgraded to supergroups: old id → new id. */
  private readonly migrations = new Map<number, number>();
  private readonly sendLog: { chatId: number; at: number }[] = [];
  private readonly timers = new Set<NodeJS.Timeout>();
  private readonly openPorts = new Set<number>();

  constructor(opts: FakeTelegramOptions = {}) {
    this.token = opts.token ?? "123456789:AAF-fake-token_for-tests";
    const botId = Number(this.token.split(":")[0]) || 123456789;
    this.bot = { id: botId, is_bot: true, first_name: "Switchboard", username: "SwitchboardTestBot", ...opts.bot };
    this.enforceRateLimits = opts.enforceRateLimits ?? false;
    this.strictChats = opts.strictChats ?? false;
    this.maxLongPollMs = opts.maxLongPollMs ?? Infinity;
    this.now = opts.now ?? Date.now;
    this.history = opts.history ?? true;
  }

  // ---- lifecycle -------------------------------------------------------------------------------

  /** Listens on 127.0.0.1:0 and returns the apiRoot to give the client (with trailing slash). */
  async start(): Promise<string> {
    const server = http.createServer((req, res) => void this.onRequest(req, res));
    server.on("connection", (socket) => {
      const port = socket.remotePort;
      if (port === undefined) return;
      this.openPorts.add(port);
      socket.once("close", () => this.openPorts.delete(port));
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    this.server = server;
    this.root = `http://127.0.0.1:${(server.address() as AddressInfo).port}/`;
    return this.root;
  }

  get apiRoot(): string {
    return this.root;
  }

  async stop(): Promise<void> {
    for (const t of this.timers) clearTimeout(t);
    this.timers.clear();
    const server = this.server;
    this.server = undefined;
    if (!server) return;
    const closed = new Promise<void>((resolve) => server.close(() => resolve()));
    // Parked long polls and keep-alive sockets would otherwise hold close() open.
    server.closeAllConnections();
    await closed;
  }

  // ---- scripting -------------------------------------------------------------------------------

  /** Replaces the default behaviour of `method` (pass undefined to remove). */
  override(method: string, handler: OverrideHandler | undefined): void {
    if (handler) this.overrides.set(method, handler);
    else this.overrides.delete(method);
  }

  /** Answers the next `times` calls of `method` with `reply`, then behaves normally again. */
  failNext(method: string, reply: ApiReply, times = 1): void {
    let left = times;
    const previous = this.overrides.get(method);
    this.override(method, (body, call) => {
      if (left-- > 0) return reply;
      this.override(method, previous);
      return previous?.(body, call);
    });
  }

  /** Makes sends to this chat fail with 403 like a user who blocked the bot. */
  blockChat(chatId: number): void {
    this.blocked.add(chatId);
  }

  /**
   * Upgrades a basic group to a supergroup as Telegram does: the old id is gone for good (sends
   * to it fail 400 with parameters.migrate_to_chat_id), and unless `announce` is false the bot
   * gets the two service messages, `migrate_to_chat_id` in the old chat and
   * `migrate_from_chat_id` in the new one.
   */
  migrateChat(old: FakeChat, to: FakeChat, by: FakeUser, opts: { announce?: boolean } = {}): void {
    this.migrations.set(old.id, to.id);
    this.registerChat(to);
    if (opts.announce === false) return;
    const date = this.unixNow();
    this.pushUpdate({ message: { message_id: this.nextMessageId(old.id), from: by, chat: old, date, migrate_to_chat_id: to.id } });
    this.pushUpdate({ message: { message_id: this.nextMessageId(to.id), from: by, chat: to, date, migrate_from_chat_id: old.id } });
  }

  registerChat(chat: FakeChat): void {
    this.chats.set(chat.id, chat);
  }

  /**
   * Numbers the next updates from `nextId`, as Telegram does after a week without updates ("the
   * identifier of the next update will be chosen randomly instead of sequentially"), which may
   * be below the offset a client last confirmed.
   */
  renumberUpdates(nextId: number): void {
    this.nextUpdateId = nextId;
  }

  /** Queues an update (update_id assigned) and wakes a parked long poll. */
  pushUpdate(payload: Record<string, unknown>): FakeUpdate {
    const update: FakeUpdate = { ...payload, update_id: this.nextUpdateId++ };
    this.queue.push(update);
    this.parked?.wake();
    return update;
  }

  /** Builds a realistic message update from a user and pushes it. */
  injectText(o: InjectTextOptions): FakeUpdate {
    this.registerChat(o.chat);
    const editing = o.editOf !== undefined ? this.messages.get(o.chat.id)?.get(o.editOf) : undefined;
    const id = o.editOf ?? this.nextMessageId(o.chat.id);
    const body = o.text ?? o.caption ?? "";
    const ents = o.entities ?? computeEntities(body);
    const msg: FakeMessage = { message_id: id, from: o.from, chat: o.chat, date: editing?.date ?? this.unixNow() };
    if (o.caption !== undefined) {
      msg.caption = o.caption;
      if (ents.length) msg.caption_entities = ents;
      if (!o.media) msg.photo = [{ file_id: `photo-${id}`, file_unique_id: `u${id}`, width: 90, height: 90 }];
    } else if (o.text !== undefined) {
      msg.text = o.text;
      if (ents.length) msg.entities = ents;
    } else if (!o.media) {
      msg.sticker = { file_id: `sticker-${id}`, file_unique_id: `s${id}`, type: "regular", width: 512, height: 512 };
    }
    if (o.media) Object.assign(msg, o.media);
    if (o.mediaGroupId !== undefined) msg.media_group_id = o.mediaGroupId;
    this.applyThread(msg, o);
    if (o.forwardedFrom) msg.forward_origin = { type: "user", date: this.unixNow() - 60, sender_user: o.forwardedFrom };
    if (o.editOf !== undefined) msg.edit_date = this.unixNow();
    if (this.history) this.remember(msg);
    return this.pushUpdate(o.editOf !== undefined ? { edited_message: msg } : { message: msg });
  }

  // ---- inspection ------------------------------------------------------------------------------

  /** Calls other than getUpdates. */
  get apiCalls(): RecordedCall[] {
    return this.calls.filter((c) => c.method !== "getUpdates");
  }

  callsTo(method: string): RecordedCall[] {
    return this.calls.filter((c) => c.method === method);
  }

  /** Updates still held (not yet confirmed by an offset). */
  get pendingUpdates(): FakeUpdate[] {
    return [...this.queue];
  }

  /** Whether a client's long poll is parked right now (it is gone once the client aborts). */
  get isPolling(): boolean {
    return this.parked !== undefined;
  }

  /** Whether the connection a call came over (its `clientPort`) is still open. */
  isConnectionOpen(clientPort: number): boolean {
    return this.openPorts.has(clientPort);
  }

  /** Highest offset a client has confirmed with (0 before any). */
  get confirmedOffset(): number {
    return this.confirmed;
  }

  /** Resolves with the first call (already made or future) of `method` matching `pred`. */
  async waitForCall(method: string, pred: (c: RecordedCall) => boolean = () => true, timeoutMs = 5000): Promise<RecordedCall> {
    return waitFor(() => this.calls.find((c) => c.method === method && pred(c)), timeoutMs, `call ${method}`);
  }

  // ---- HTTP ------------------------------------------------------------------------------------

  private async onRequest(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    // The path alone: a request line such as "//bot…" would otherwise parse as a host.
    const url = new URL(`http://fake${req.url ?? "/"}`);
    const m = /^\/bot([^/]+)\/([A-Za-z]+)$/.exec(url.pathname);
    let body: Record<string, unknown>;
    try {
      body = await readBody(req, url);
    } catch {
      return this.respond(res, fail(400, "Bad Request: can't parse request body"));
    }
    if (!m) return this.respond(res, errors.notFound);
    const call: RecordedCall = { seq: this.calls.length, method: m[2], body, at: this.now(), clientPort: req.socket.remotePort };
    if (this.history) this.calls.push(call);
    const answer = (reply: ApiReply): void => {
      call.reply = reply;
      this.respond(res, reply);
    };
    if (m[1] !== this.token) return answer(errors.unauthorized);
    const override = this.overrides.get(call.method);
    const overridden = override ? await override(body, call) : undefined;
    if (overridden) return answer(overridden);
    if (call.method === "getUpdates") return this.getUpdates(body, res, answer);
    const handler = this.methods[call.method];
    answer(handler ? handler(body) : errors.notFound);
  }

  private respond(res: http.ServerResponse, reply: ApiReply): void {
    if (res.writableEnded || res.destroyed) return;
    if ("destroySocket" in reply) {
      res.socket?.destroy();
      return;
    }
    res.writeHead(reply.ok ? 200 : reply.error_code, { "content-type": "application/json" });
    res.end(JSON.stringify(reply));
  }

  // ---- methods ---------------------------------------------------------------------------------

  private readonly methods: Record<string, (body: Record<string, unknown>) => ApiReply> = {
    getMe: () => ok({ ...this.bot, can_join_groups: true, can_read_all_group_messages: false, supports_inline_queries: false }),
    deleteWebhook: (b) => {
      this.webhookUrl = "";
      if (b.drop_pending_updates === true) this.queue = [];
      return ok(true);
    },
    setWebhook: (b) => {
      this.webhookUrl = String(b.url ?? "");
      return ok(true);
    },
    getWebhookInfo: () => ok({ url: this.webhookUrl, has_custom_certificate: false, pending_update_count: this.queue.length }),
    sendMessage: (b) => this.sendMessage(b),
    sendChatAction: (b) => {
      const chatId = Number(b.chat_id);
      if (!b.chat_id) return fail(400, "Bad Request: chat_id is empty");
      if (this.blocked.has(chatId)) return errors.blocked;
      const migratedTo = this.migrations.get(chatId);
      if (migratedTo !== undefined) return errors.migrated(migratedTo);
      if (b.action !== "typing" && typeof b.action !== "string") return fail(400, "Bad Request: wrong parameter action in request");
      return ok(true);
    },
    setMyCommands: (b) => {
      const list = b.commands;
      if (!Array.isArray(list)) return fail(400, "Bad Request: can't parse commands JSON object");
      if (list.length > 100) return fail(400, "Bad Request: BOT_COMMANDS_TOO_MUCH");
      const valid = list.every((c: { command?: unknown; description?: unknown }) => typeof c.command === "string" && /^[a-z0-9_]{1,32}$/.test(c.command) && typeof c.description === "string" && c.description.length >= 1 && c.description.length <= 256);
      if (!valid) return fail(400, "Bad Request: BOT_COMMAND_INVALID");
      this.commands.set(commandsKey(b), list);
      return ok(true);
    },
    getMyCommands: (b) => ok(this.commands.get(commandsKey(b)) ?? []),
    deleteMyCommands: (b) => {
      this.commands.delete(commandsKey(b));
      return ok(true);
    },
  };

  private sendMessage(b: Record<string, unknown>): ApiReply {
    if (b.chat_id === undefined || b.chat_id === "") return fail(400, "Bad Request: chat_id is empty");
    const chatId = Number(b.chat_id);
    const text = typeof b.text === "string" ? b.text : "";
    const limited = this.checkRateLimit(chatId);
    if (limited) return limited;
    if (this.blocked.has(chatId)) return chatId < 0 ? errors.kicked : errors.blocked;
    const migratedTo = this.migrations.get(chatId);
    if (migratedTo !== undefined) return errors.migrated(migratedTo);
    const known = this.chats.get(chatId);
    if (!known && (this.strictChats || !Number.isFinite(chatId))) return errors.chatNotFound;
    if (text.trim() === "") return fail(400, "Bad Request: message text is empty");
    if (text.length > 4096) return fail(400, "Bad Request: message is too long");
    const chat = known ?? inferChat(chatId);
    const thread = b.message_thread_id === undefined ? undefined : Number(b.message_thread_id);
    if (thread === 1 && chat.is_forum) return errors.threadNotFound;
    const rp = b.reply_parameters as { message_id?: number; allow_sending_without_reply?: boolean } | undefined;
    const replied = rp?.message_id !== undefined ? this.messages.get(chatId)?.get(Number(rp.message_id)) : undefined;
    if (rp?.message_id !== undefined && !replied && !rp.allow_sending_without_reply) return fail(400, "Bad Request: message to be replied not found");

    const msg: FakeMessage = { message_id: this.nextMessageId(chatId), from: this.bot, chat, date: this.unixNow(), text };
    if (thread !== undefined) {
      msg.message_thread_id = thread;
      if (chat.is_forum) msg.is_topic_message = true;
    }
    if (replied) msg.reply_to_message = replied;
    if (this.history) {
      this.remember(msg);
      this.sent.push(msg);
    }
    this.logSend(chatId);
    return ok(msg);
  }

  /** Accepted sends of the longest rate-limit window (a minute), for checkRateLimit. */
  private logSend(chatId: number): void {
    const at = this.now();
    this.sendLog.push({ chatId, at });
    let old = 0;
    while (old < this.sendLog.length && this.sendLog[old].at <= at - 60_000) old++;
    if (old) this.sendLog.splice(0, old);
  }

  /** Sliding windows over accepted sends; a refused send does not count. */
  private checkRateLimit(chatId: number): ApiFailure | undefined {
    if (!this.enforceRateLimits) return undefined;
    const now = this.now();
    const windows = [
      chatId < 0 ? { ms: 60_000, max: LIMITS.groupPerMinute, chat: chatId } : { ms: 1000, max: LIMITS.privatePerSecond, chat: chatId },
      { ms: 1000, max: LIMITS.globalPerSecond, chat: undefined },
    ];
    for (const w of windows) {
      const inWindow = this.sendLog.filter((s) => s.at > now - w.ms && (w.chat === undefined || s.chatId === w.chat));
      if (inWindow.length >= w.max) {
        this.rateLimitHits++;
        const retryAfter = Math.max(1, Math.ceil((inWindow[0].at + w.ms - now) / 1000));
        return errors.tooManyRequests(retryAfter);
      }
    }
    return undefined;
  }

  private getUpdates(b: Record<string, unknown>, res: http.ServerResponse, answer: (r: ApiReply) => void): void {
    if (this.webhookUrl) return answer(errors.webhookActive);
    // Telegram serves one getUpdates per bot: the newcomer wins, a parked one gets 409.
    this.parked?.conflict();
    if (Array.isArray(b.allowed_updates) && b.allowed_updates.length > 0) this.allowedUpdates = b.allowed_updates.map(String);
    const offset = b.offset === undefined ? undefined : Number(b.offset);
    const limit = Math.min(100, Math.max(1, Number(b.limit ?? 100)));
    const timeoutMs = Math.min(Math.max(0, Number(b.timeout ?? 0)) * 1000, this.maxLongPollMs);

    const take = (): FakeUpdate[] => {
      // An offset ahead of the next update id by more than 10 is one the real server cannot
      // serve (telegram-bot-api's TQueue: "from_id is in the future"): it answers from the
      // queue's head instead, lower ids included, and confirms nothing.
      const servable = offset === undefined || offset <= this.nextUpdateId + 10;
      if (offset !== undefined && offset < 0) {
        this.queue = this.queue.slice(offset);
      } else if (offset !== undefined && offset > 0 && servable) {
        this.queue = this.queue.filter((u) => u.update_id >= offset);
        this.confirmed = Math.max(this.confirmed, offset);
      }
      if (this.allowedUpdates.length) this.queue = this.queue.filter((u) => this.allowedUpdates.some((k) => k in u));
      return this.queue.slice(0, limit);
    };

    const ready = take();
    if (ready.length > 0 || timeoutMs <= 0) return answer(ok(ready));

    let timer: NodeJS.Timeout | undefined;
    const finish = (reply: ApiReply): void => {
      if (this.parked === entry) this.parked = undefined;
      if (timer) {
        clearTimeout(timer);
        this.timers.delete(timer);
      }
      answer(reply);
    };
    const entry: ParkedPoll = {
      wake: () => {
        const r = take();
        if (r.length > 0) finish(ok(r));
      },
      conflict: () => finish(errors.conflict),
    };
    this.parked = entry;
    if (Number.isFinite(timeoutMs)) {
      timer = setTimeout(() => finish(ok(take())), timeoutMs);
      this.timers.add(timer);
    }
    res.on("close", () => {
      if (this.parked === entry) this.parked = undefined;
      if (timer) {
        clearTimeout(timer);
        this.timers.delete(timer);
      }
    });
  }

  // ---- helpers ---------------------------------------------------------------------------------

  private applyThread(msg: FakeMessage, o: InjectTextOptions): void {
    if (o.replyTo) msg.reply_to_message = o.replyTo;
    if (o.threadId === undefined) return;
    msg.message_thread_id = o.threadId;
    const forumTopic = o.chat.type === "supergroup" && o.chat.is_forum;
    if (forumTopic || o.chat.type === "private") msg.is_topic_message = true;
    // Telegram makes every plain message in a topic a reply to the topic's creation message.
    if (forumTopic && !o.replyTo) {
      msg.reply_to_message = { message_id: o.threadId, from: o.from, chat: o.chat, date: msg.date - 3600, message_thread_id: o.threadId, forum_topic_created: { name: `Topic ${o.threadId}`, icon_color: 7322096 } };
    }
  }

  private nextMessageId(chatId: number): number {
    const id = (this.lastMessageId.get(chatId) ?? 0) + 1;
    this.lastMessageId.set(chatId, id);
    return id;
  }

  private remember(msg: FakeMessage): void {
    let byId = this.messages.get(msg.chat.id);
    if (!byId) this.messages.set(msg.chat.id, (byId = new Map()));
    byId.set(msg.message_id, msg);
  }

  private unixNow(): number {
    return Math.floor(this.now() / 1000);
  }
}

/** Entities Telegram's server would attach: @mentions and /commands (UTF-16 offsets). */
export function computeEntities(text: string): FakeEntity[] {
  const out: FakeEntity[] = [];
  for (const m of text.matchAll(/(^|[\s(])(\/[A-Za-z0-9_]{1,32}(?:@[A-Za-z0-9_]{3,32})?)(?=$|[\s.,!?)])/g)) {
    out.push({ type: "bot_command", offset: (m.index ?? 0) + m[1].length, length: m[2].length });
  }
  for (const m of text.matchAll(/(^|[^A-Za-z0-9_@])(@[A-Za-z][A-Za-z0-9_]{4,31})(?![A-Za-z0-9_])/g)) {
    out.push({ type: "mention", offset: (m.index ?? 0) + m[1].length, length: m[2].length });
  }
  return out.sort((a, b) => a.offset - b.offset);
}

function inferChat(id: number): FakeChat {
  return id < 0 ? { id, type: "supergroup", title: `Group ${id}` } : { id, type: "private", first_name: `User ${id}` };
}

function commandsKey(b: Record<string, unknown>): string {
  const scope = b.scope ? JSON.stringify(b.scope) : "default";
  return b.language_code ? `${scope}/${String(b.language_code)}` : scope;
}

async function readBody(req: http.IncomingMessage, url: URL): Promise<Record<string, unknown>> {
  const chunks: Buffer[] = [];
  for await (const c of req) chunks.push(c as Buffer);
  const raw = Buffer.concat(chunks).toString("utf8");
  const type = String(req.headers["content-type"] ?? "");
  if (type.startsWith("application/json")) return raw ? (JSON.parse(raw) as Record<string, unknown>) : {};
  if (type.startsWith("multipart/")) throw new Error("multipart bodies are not supported by the fake");
  const params = type.startsWith("application/x-www-form-urlencoded") ? new URLSearchParams(raw) : url.searchParams;
  const out: Record<string, unknown> = {};
  // Telegram accepts JSON-serialised objects and arrays inside form and query parameters.
  for (const [k, v] of params) out[k] = /^[[{]/.test(v) ? JSON.parse(v) : v;
  return out;
}
