/**
 * A fake WhatsApp for the adapter's SocketFactory seam (adapter-testing.md §4).
 *
 * No network fake of WhatsApp is possible (Noise + Signal), so this fakes one level up: each
 * factory call returns a socket whose `ev` is Baileys' REAL `makeEventBuffer` and whose messages
 * are built with Baileys' own `generateWAMessageFromContent`, so the adapter sees the same event
 * machinery and message shapes as in production. Behaviour mirrored from Baileys 7.0.0-rc14:
 *  - `sendMessage` resolves with the WAMessage and, on the next tick, echoes it as
 *    `messages.upsert` type "append" with `key.fromMe` (emitOwnEvents);
 *  - `end(err)` emits `connection.update` close with `lastDisconnect.error`, then destroys `ev`;
 *  - sending on a socket that is not open fails with a Boom-shaped 428 "Connection Closed".
 *
 * Usage:
 *   const wa = new FakeWhatsApp();
 *   const adapter = createWhatsAppAdapter(config, ctx, { socketFactory: wa.factory });
 *   await adapter.start();            // socket auto-opens on the next macrotask (autoOpen)
 *   wa.injectText({ chatJid: "15551234567@s.whatsapp.net", text: "hi" });
 *   wa.drop(515);                     // server asks for a restart → factory is called again
 *   expect(wa.sent[0].text).toBe("…");
 */
import { assertNodeErrorFree, generateWAMessageFromContent, makeEventBuffer, proto, type GroupMetadata, type WAMessage } from "@whiskeysockets/baileys";
import { pino } from "pino";
import type { AdapterKv } from "../../src/channels/types.js";
import type { SocketFactory, WASocketLike } from "../../adapters/whatsapp/types.js";

export interface FakeWhatsAppOptions {
  /** Our own account, as `sock.user`. */
  self?: { id: string; lid?: string; name?: string };
  /** Emit `connecting` then `open` on the next macrotask after each factory call (default true). */
  autoOpen?: boolean;
}

export interface SentRecord {
  jid: string;
  text: string;
  /** The WAMessage returned to the caller (and echoed as "append"). */
  message: WAMessage;
  /** Id of the message quoted by this send, if any. */
  quotedId?: string;
}

export interface InjectOptions {
  /** remoteJid: a phone JID, a LID, or a group JID. */
  chatJid: string;
  /** Group sender (phone JID or LID). */
  participant?: string;
  /** Group sender's phone JID when `participant` is a LID. */
  participantAlt?: string;
  /** DM sender's phone JID when `chatJid` is a LID. */
  remoteJidAlt?: string;
  fromMe?: boolean;
  id?: string;
  pushName?: string;
  /** "notify" (live, default) or "append" (history). */
  type?: "notify" | "append";
  /** Unix seconds. */
  timestampSec?: number;
}

export interface InjectTextOptions extends InjectOptions {
  text: string;
  mentionedJids?: string[];
  /** Reply to a message: its id and (in groups) its author. */
  quoted?: { id: string; participant?: string };
}

/** Baileys' errors are Boom errors; the adapter only relies on `output.statusCode`. */
export function boomError(statusCode: number, message = `fake error ${statusCode}`): Error {
  return Object.assign(new Error(message), { isBoom: true, output: { statusCode, payload: { statusCode, message }, headers: {} } });
}

/**
 * The error Baileys raises for a query the server answered with an IQ error (`assertNodeErrorFree`,
 * called by its real code here): a Boom whose `output.statusCode` is 500 whatever the server said,
 * with the server's code in `data` (e.g. 403 "forbidden" for a group we are not in).
 */
export function iqError(code: number, text: string): Error {
  try {
    assertNodeErrorFree({ tag: "iq", attrs: { type: "error" }, content: [{ tag: "error", attrs: { code: String(code), text } }] });
  } catch (err) {
    return err as Error;
  }
  throw new Error("assertNodeErrorFree did not throw");
}

export type FakeSocket = WASocketLike & {
  readonly ev: ReturnType<typeof makeEventBuffer>;
  readonly isOpen: boolean;
  readonly ended: boolean;
};

const DEFAULT_SELF = { id: "15550000001:7@s.whatsapp.net", lid: "90000000000001:7@lid", name: "Switchboard" };

export class FakeWhatsApp {
  /** Every socket the factory produced, oldest first. */
  readonly sockets: FakeSocket[] = [];
  readonly sent: SentRecord[] = [];
  readonly presence: Array<{ type: string; jid?: string }> = [];
  private readonly self: { id: string; lid?: string; name?: string };
  private readonly autoOpen: boolean;
  private readonly lidMappings = new Map<string, string>();
  private readonly groups = new Map<string, string>();
  private readonly leftGroups = new Set<string>();
  private sendFailures: number[] = [];
  private factoryFailures = 0;
  private factoryHold: Promise<void> | undefined;
  private nextId = 1;

  constructor(options: FakeWhatsAppOptions = {}) {
    this.self = options.self ?? DEFAULT_SELF;
    this.autoOpen = options.autoOpen ?? true;
  }

  /** How many times the factory was called (first connect + reconnects). */
  factoryCallCount = 0;

  /** The SocketFactory to hand to the adapter. */
  readonly factory: SocketFactory = async () => {
    this.factoryCallCount += 1;
    const hold = this.factoryHold;
    this.factoryHold = undefined;
    if (hold) await hold;
    if (this.factoryFailures > 0) {
      this.factoryFailures -= 1;
      throw new Error("fake factory failure");
    }
    return this.newSocket();
  };

  /**
   * A new socket, registered as the newest, without counting as a factory call: the stand-in for
   * Baileys' makeWASocket when a test drives the production factory (createBaileysSocketFactory).
   */
  newSocket(): FakeSocket {
    const sock = this.makeSocket();
    this.sockets.push(sock);
    if (this.autoOpen) setTimeout(() => this.openSocket(sock), 0);
    return sock;
  }

  /** The newest socket. */
  get current(): FakeSocket {
    const sock = this.sockets.at(-1);
    if (!sock) throw new Error("FakeWhatsApp: the factory has not been called yet");
    return sock;
  }

  /** Opens the newest socket (when autoOpen is off, or to re-emit). */
  open(): void {
    this.openSocket(this.current);
  }

  /** Emits a QR on the newest socket, as Baileys does while unlinked. */
  showQr(qr: string): void {
    this.current.ev.emit("connection.update", { qr });
  }

  /** Server-side disconnect of the newest socket with a Baileys status code (515, 401, 408, 440…). */
  drop(statusCode: number, message = `fake disconnect ${statusCode}`): void {
    void this.current.end(boomError(statusCode, message));
  }

  /**
   * What the recipient's WhatsApp shows in a chat: one message per key id, the first send of it.
   * WhatsApp's clients keep a message by its key, and their own retries send the same id again.
   */
  shownIn(jid: string): string[] {
    const seen = new Set<string>();
    const shown: string[] = [];
    for (const s of this.sent) {
      const id = s.message.key.id;
      if (s.jid !== jid || !id || seen.has(id)) continue;
      seen.add(id);
      shown.push(s.text);
    }
    return shown;
  }

  /** The next `n` sends reject with a Boom error of `statusCode`. */
  failNextSends(n: number, statusCode: number): void {
    this.sendFailures.push(...Array.from({ length: n }, () => statusCode));
  }

  /** The next `n` factory calls reject (e.g. the auth store is unreachable). */
  failNextFactoryCalls(n: number): void {
    this.factoryFailures += n;
  }

  /**
   * The next factory call (already counted on entry) returns its socket only once the returned
   * function is called, like a production factory stuck on the auth store or the version fetch.
   */
  holdNextFactoryCall(): () => void {
    let release!: () => void;
    this.factoryHold = new Promise<void>((resolve) => (release = resolve));
    return release;
  }

  /** Makes `signalRepository.lidMapping.getPNForLID(lid)` answer `pn`. */
  setLidMapping(lid: string, pn: string): void {
    this.lidMappings.set(lid, pn);
  }

  /**
   * We are no longer in this group (removed from it, or it was deleted). As with Baileys, whose
   * group send first queries the group's metadata, a send to it and `groupMetadata(jid)` fail with
   * the server's IQ error 403 "forbidden".
   */
  leaveGroup(jid: string): void {
    this.leftGroups.add(jid);
  }

  /** Makes `groupMetadata(jid)` answer with this subject. */
  setGroupSubject(jid: string, subject: string): void {
    this.groups.set(jid, subject);
  }

  /** Delivers a text message on the newest socket as `messages.upsert`; returns the WAMessage. */
  injectText(opts: InjectTextOptions): WAMessage {
    const contextInfo: proto.IContextInfo = {};
    if (opts.mentionedJids?.length) contextInfo.mentionedJid = opts.mentionedJids;
    if (opts.quoted) {
      contextInfo.stanzaId = opts.quoted.id;
      if (opts.quoted.participant) contextInfo.participant = opts.quoted.participant;
      contextInfo.quotedMessage = { conversation: "(quoted)" };
    }
    // WhatsApp clients send plain text as `conversation`, and anything with context as extendedTextMessage.
    return this.injectContent(opts, Object.keys(contextInfo).length ? { extendedTextMessage: { text: opts.text, contextInfo } } : { conversation: opts.text });
  }

  /** Delivers a message of any content (media, an album item…) from a sender, as injectText does text. */
  injectContent(opts: InjectOptions, content: proto.IMessage): WAMessage {
    return this.injectMessage(
      {
        key: {
          remoteJid: opts.chatJid,
          fromMe: opts.fromMe ?? false,
          id: opts.id ?? this.messageId(),
          participant: opts.participant,
          participantAlt: opts.participantAlt,
          remoteJidAlt: opts.remoteJidAlt,
          addressingMode: (opts.participant ?? opts.chatJid).endsWith("@lid") ? "lid" : "pn",
        },
        message: proto.Message.fromObject(content),
        messageTimestamp: opts.timestampSec ?? Math.floor(Date.now() / 1000),
        pushName: opts.pushName,
        broadcast: opts.chatJid.endsWith("@broadcast"),
      },
      opts.type ?? "notify",
    );
  }

  /**
   * The sender edits their message `of` to `text`: WhatsApp delivers the edit as a message of its
   * own id carrying a MESSAGE_EDIT protocol message, inside its editedMessage wrapper.
   */
  injectEdit(opts: InjectOptions & { of: string; text: string }): WAMessage {
    const original = { remoteJid: opts.chatJid, fromMe: false, id: opts.of, ...(opts.participant ? { participant: opts.participant } : {}) };
    return this.injectContent(opts, { editedMessage: { message: { protocolMessage: { type: proto.Message.ProtocolMessage.Type.MESSAGE_EDIT, key: original, editedMessage: { conversation: opts.text } } } } });
  }

  /** Delivers any WAMessage (media, protocol messages, recorded fixtures) on the newest socket. */
  injectMessage(message: WAMessage, type: "notify" | "append" = "notify"): WAMessage {
    this.current.ev.emit("messages.upsert", { messages: [message], type });
    return message;
  }

  private messageId(): string {
    return `FAKE${String(this.nextId++).padStart(12, "0")}`;
  }

  private openSocket(sock: FakeSocket): void {
    if (sock.ended) return;
    (sock as { isOpen: boolean }).isOpen = true;
    sock.ev.emit("connection.update", { connection: "connecting" });
    sock.ev.emit("connection.update", { connection: "open", receivedPendingNotifications: true });
  }

  private makeSocket(): FakeSocket {
    const ev = makeEventBuffer(pino({ level: "silent" }));
    const self = this.self;
    const sock: FakeSocket & { isOpen: boolean; ended: boolean } = {
      ev,
      isOpen: false,
      ended: false,
      user: { id: self.id, lid: self.lid, name: self.name },
      sendMessage: async (jid, content, options) => {
        const failure = this.sendFailures.shift();
        if (failure !== undefined) throw boomError(failure, `fake send failure ${failure}`);
        if (!sock.isOpen || sock.ended) throw boomError(428, "Connection Closed");
        if (this.leftGroups.has(jid)) throw iqError(403, "forbidden");
        if (!("text" in content) || typeof content.text !== "string") throw new Error("FakeWhatsApp: only text messages are supported");
        // As Baileys: a caller's messageId is the message's key.id, else a fresh one.
        const message = generateWAMessageFromContent(jid, { extendedTextMessage: { text: content.text } }, { userJid: self.id, quoted: options?.quoted, ...(options?.messageId ? { messageId: options.messageId } : {}) });
        this.sent.push({ jid, text: content.text, message, quotedId: options?.quoted?.key.id ?? undefined });
        process.nextTick(() => {
          if (!sock.ended) ev.emit("messages.upsert", { messages: [message], type: "append" });
        });
        return message;
      },
      end: async (error) => {
        if (sock.ended) return;
        sock.ended = true;
        sock.isOpen = false;
        ev.emit("connection.update", { connection: "close", lastDisconnect: { error, date: new Date() } });
        ev.removeAllListeners("connection.update");
        ev.destroy();
      },
      sendPresenceUpdate: async (type, jid) => {
        this.presence.push({ type, jid });
      },
      signalRepository: { lidMapping: { getPNForLID: async (lid) => this.lidMappings.get(lid) ?? null } },
      groupMetadata: async (jid) => {
        if (this.leftGroups.has(jid)) throw iqError(403, "forbidden");
        const subject = this.groups.get(jid);
        if (subject === undefined) throw boomError(404, "item-not-found");
        return { id: jid, subject, participants: [] } as unknown as GroupMetadata;
      },
    };
    return sock;
  }
}

/**
 * An in-memory AdapterKv that JSON-serialises values like a real keyv store does, so a test
 * proves values survive storage rather than just sharing object references. `data` is exposed
 * for assertions.
 */
export function memoryKv(): AdapterKv & { data: Map<string, string> } {
  const data = new Map<string, string>();
  return {
    data,
    async get<T>(key: string) {
      const raw = data.get(key);
      return raw === undefined ? undefined : (JSON.parse(raw) as T);
    },
    async set<T>(key: string, value: T) {
      data.set(key, JSON.stringify(value));
    },
    async delete(key: string) {
      data.delete(key);
    },
  };
}
