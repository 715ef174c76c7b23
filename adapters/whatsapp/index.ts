/**
 * WhatsApp channel adapter (Baileys 7, WhatsApp Web multi-device linking by QR).
 *
 * Owns one socket at a time, built by a SocketFactory that is called again on every reconnect;
 * recovery follows the pure table in reconnect.ts. Baileys itself is only loaded by the
 * production factory (baileys-socket.ts), so importing this module is cheap.
 */
import type { BaileysEventMap, WAMessage, WAMessageKey, proto } from "@whiskeysockets/baileys";
import {
  PlatformError,
  type AdapterContext,
  type ChannelAdapter,
  type ChannelHealth,
  type OutboundTarget,
  type PlatformErrorCode,
  type SendOptions,
  type SendReceipt,
} from "../../src/channels/types.js";
import type { WhatsAppConfig } from "../../src/config/schema.js";
import { resetKvAuthState } from "./auth-state.js";
import { createBaileysSocketFactory, type BaileysSocketFactoryOptions } from "./baileys-socket.js";
import { retryIo } from "../../src/util/io-retry.js";
import { BoundedMap } from "../../src/util/bounded-map.js";
import { AlbumGate } from "../../src/channels/album-gate.js";
import { within } from "../../src/util/within.js";
import { toPlatformError } from "./errors.js";
import { chatTypeOfJid, jidForTarget, jidKind, normalizeJid } from "./jid.js";
import { whatsappRateLimits } from "./limits.js";
import { mapInbound, type MapContext, type SelfIdentity } from "./map-message.js";
import { whatsappMessageId } from "./message-id.js";
import { printQrToTerminal } from "./qr.js";
import { DEFAULT_BACKOFF, DisconnectCode, backoffDelay, classifyDisconnect, statusCodeOf } from "./reconnect.js";
import type { SocketFactory, WASocketLike } from "./types.js";

export type { SocketFactory, WASocketLike } from "./types.js";
export { classifyDisconnect, backoffDelay, DEFAULT_BACKOFF, DisconnectCode, type DisconnectAction, type BackoffPolicy } from "./reconnect.js";
export { createBaileysSocketFactory, type BaileysSocketFactoryOptions } from "./baileys-socket.js";
export { loadKvAuthState, resetKvAuthState, type KvAuthState } from "./auth-state.js";

export interface WhatsAppAdapterOptions {
  /** Default: the Baileys production factory with a kv-backed auth state. */
  socketFactory?: SocketFactory;
  /** Wait between reconnect attempts; tests inject one that returns at once. */
  sleep?: (ms: number) => Promise<void>;
  now?: () => number;
  /** Source of backoff jitter. */
  random?: () => number;
  /** Shows the linking QR; default renders it in the terminal. */
  printQr?: (qr: string) => void | Promise<void>;
  /** Tuning of the default (production) factory, e.g. a stand-in for makeWASocket in tests. */
  baileys?: Pick<BaileysSocketFactoryOptions, "makeSocket" | "resolveVersion">;
}

/** A connection that stayed up this long was healthy: the next failure starts backoff from scratch. */
const HEALTHY_UPTIME_MS = 60_000;
/** More immediate restarts than this in a row means the server is not settling: back off instead. */
const MAX_IMMEDIATE_RESTARTS = 3;
/** Baileys' end() waits for the websocket close; stop() must stay prompt even if that hangs. */
const END_TIMEOUT_MS = 2_000;
const GROUP_NAME_TTL_MS = 60 * 60 * 1000;
/** How long stop() waits for inbound messages still queued for the core (see drainInbound). */
const STOP_INBOUND_GRACE_MS = 5_000;

export function createWhatsAppAdapter(config: WhatsAppConfig, ctx: AdapterContext, opts: WhatsAppAdapterOptions = {}): ChannelAdapter {
  const { log } = ctx;
  const now = opts.now ?? Date.now;
  const random = opts.random ?? Math.random;
  const printQr = opts.printQr ?? printQrToTerminal;

  // Our sends, kept for Baileys' retry requests (getMessage) and to recognise replies to us.
  const sent = new BoundedMap<string, proto.IMessage>(1_000);
  // Recent inbound, so a reply can quote the message it answers.
  const recentInbound = new BoundedMap<string, WAMessage>(500);
  const lidToPn = new BoundedMap<string, string>(10_000);
  const groupNames = new BoundedMap<string, { name: string; at: number }>(1_000);
  const groupFetches = new Set<string>();
  const albums = new AlbumGate();

  const factory =
    opts.socketFactory ??
    createBaileysSocketFactory({
      ...opts.baileys,
      ctx: { kv: ctx.kv, log },
      getMessage: async (key: WAMessageKey) => (key.id ? sent.get(key.id) : undefined),
    });

  let sock: WASocketLike | undefined;
  let connected = false;
  let running = false;
  let halted: { code: PlatformErrorCode; message: string } | undefined;
  let lastInboundAt: number | null = null;
  let lastError: string | null = null;
  let attempt = 0;
  let immediateRestarts = 0;
  let openedAt: number | undefined;
  let reconnectPending = false;
  // Bumped by start/stop, so a reconnect scheduled before a stop can never dial after a restart.
  let runId = 0;
  let cancelPause: (() => void) | undefined;
  let inbound: Promise<void> = Promise.resolve();
  /** Messages in `inbound` not yet handed to the core. */
  let queued = 0;
  /** Aborted once stop() has waited for the queue: a hand-over still retrying gives up. */
  let handing = new AbortController();

  function pause(ms: number): Promise<void> {
    return new Promise((resolve) => {
      let timer: NodeJS.Timeout | undefined;
      const done = () => {
        clearTimeout(timer);
        cancelPause = undefined;
        resolve();
      };
      cancelPause = done;
      if (opts.sleep) opts.sleep(ms).then(done, done);
      else timer = setTimeout(done, ms);
    });
  }

  async function endQuietly(s: WASocketLike): Promise<void> {
    await within(Promise.resolve(s.end(undefined)).catch(() => undefined), END_TIMEOUT_MS);
  }

  /** `run` is the runId the caller dials for: a stop() (and a new start()) while the factory works disowns the socket. */
  async function openSocket(run: number): Promise<void> {
    const s = await factory();
    if (run !== runId || !running || halted) {
      await endQuietly(s);
      return;
    }
    sock = s;
    s.ev.on("connection.update", (update) => onConnectionUpdate(s, update));
    s.ev.on("messages.upsert", (upsert) => onUpsert(s, upsert));
    s.ev.on("lid-mapping.update", ({ lid, pn }) => lidToPn.set(normalizeJid(lid), normalizeJid(pn)));
    s.ev.on("groups.update", (updates) => {
      for (const u of updates) if (u.id && u.subject) groupNames.set(u.id, { name: u.subject, at: now() });
    });
  }

  function onConnectionUpdate(s: WASocketLike, update: BaileysEventMap["connection.update"]): void {
    if (s !== sock) return;
    if (update.qr) {
      log.warn("WhatsApp is not linked yet: scan the QR code below with WhatsApp → Settings → Linked devices → Link a device");
      Promise.resolve(printQr(update.qr)).catch((err: unknown) => log.error({ err }, "whatsapp: could not render the QR code"));
    }
    if (update.connection === "open") {
      connected = true;
      openedAt = now();
      log.info({ user: s.user?.id }, "whatsapp connected");
    } else if (update.connection === "close") {
      onClose(update.lastDisconnect?.error);
    }
  }

  function onClose(error: Error | undefined): void {
    const uptime = openedAt === undefined ? 0 : now() - openedAt;
    sock = undefined;
    connected = false;
    openedAt = undefined;
    if (uptime >= HEALTHY_UPTIME_MS) {
      attempt = 0;
      immediateRestarts = 0;
    }
    if (!running) return;
    const code = statusCodeOf(error);
    const detail = `status ${code ?? "unknown"}: ${error?.message ?? "connection closed"}`;
    const action = classifyDisconnect(code);
    if (action === "fatal") return halt(code, detail);
    lastError = `disconnected (${detail})`;
    const immediate = action === "restart" && immediateRestarts++ < MAX_IMMEDIATE_RESTARTS;
    log.warn({ code, action, immediate }, `whatsapp disconnected (${detail}); reconnecting`);
    scheduleReconnect(immediate);
  }

  function halt(code: number | undefined, detail: string): void {
    if (code === DisconnectCode.loggedOut) {
      // The phone removed this linked device: these creds can only ever get 401 again, so drop
      // them now and the next start shows a fresh QR instead of failing the same way.
      halted = { code: "auth", message: "WhatsApp session logged out" };
      lastError = `logged out (${detail}); restart to scan a new QR`;
      log.error(
        "WhatsApp session logged out — the dead login was deleted from the adapter's auth store; restart Switchboard and scan the new QR with WhatsApp → Settings → Linked devices",
      );
      resetKvAuthState(ctx.kv).catch((err: unknown) => log.error({ err }, "whatsapp: could not delete the dead auth state"));
    } else if (code === DisconnectCode.connectionReplaced) {
      halted = { code: "transport", message: "WhatsApp connection replaced by another client" };
      lastError = `connection replaced (${detail})`;
      log.error("WhatsApp connection replaced — another client opened this WhatsApp Web session; stop it, then restart Switchboard");
    } else {
      halted = { code: code === DisconnectCode.forbidden ? "forbidden" : "auth", message: `WhatsApp refused the session (${detail})` };
      lastError = `refused (${detail})`;
      log.error(`WhatsApp refused the session (${detail}) — not reconnecting; check the account in the WhatsApp app, then restart`);
    }
  }

  function scheduleReconnect(immediate: boolean): void {
    if (reconnectPending) return;
    reconnectPending = true;
    const run = runId;
    void (async () => {
      if (!immediate) {
        attempt += 1;
        const delay = backoffDelay(attempt, DEFAULT_BACKOFF, random);
        log.info({ attempt, delayMs: delay }, "whatsapp reconnect scheduled");
        await pause(delay);
      }
      // Cleared before dialling, so a close of the new socket can schedule the next attempt.
      reconnectPending = false;
      if (run !== runId || !running || halted || sock) return;
      try {
        await openSocket(run);
      } catch (err) {
        lastError = `reconnect failed: ${err instanceof Error ? err.message : String(err)}`;
        log.warn({ err }, "whatsapp reconnect failed");
        if (run === runId && running && !halted && !sock) scheduleReconnect(false);
      }
    })();
  }

  function onUpsert(s: WASocketLike, upsert: BaileysEventMap["messages.upsert"]): void {
    // Both types are taken. Baileys 7 tags what WhatsApp queued for this device while it was
    // offline (a restart, a reconnect) "append", not "notify" (messages-recv: `node.attrs.offline
    // ? 'append' : 'notify'`), and has acknowledged it: skipping it lost the message for good.
    // History sync comes on messaging-history.set, never here; the other appends — our own sends'
    // echoes, notification stubs, newsletters — are not someone's text in a DM or group, which
    // mapInbound ignores, and the router drops a message id it has seen.
    if (upsert.type !== "notify" && upsert.type !== "append") return;
    for (const msg of upsert.messages) {
      // Serialised so the core sees messages in the order WhatsApp delivered them.
      queued++;
      inbound = inbound
        .then(() => handleInbound(s, msg))
        .catch((err: unknown) => log.error({ err, messageId: msg.key?.id }, "whatsapp inbound failed"))
        .finally(() => queued--);
    }
  }

  /**
   * Baileys acknowledges a message to WhatsApp as it arrives, so one still queued for the core
   * when the adapter stops is never delivered again: stop() hands the queue over first (the
   * daemon stops its router only after the adapters), for at most STOP_INBOUND_GRACE_MS.
   */
  async function drainInbound(): Promise<void> {
    if (queued && !(await within(inbound, STOP_INBOUND_GRACE_MS))) log.error({ queued }, "whatsapp stopped with inbound messages not yet handed to the core: WhatsApp will not deliver them again");
  }

  async function handleInbound(s: WASocketLike, msg: WAMessage): Promise<void> {
    learnLidMapping(msg.key);
    if (msg.key?.id && sent.has(msg.key.id)) return;
    const mapped = await mapInbound(msg, mapContext(s));
    if (!mapped) return;
    lastInboundAt = now();
    recentInbound.set(mapped.messageId, msg);
    if (mapped.chatType === "group") refreshGroupName(s, mapped.peerId);
    await retryIo(() => ctx.onInbound(mapped), {
      signal: handing.signal,
      onRetry(err, attempt, retryInMs) {
        lastError = `inbound message not accepted, retrying: ${err instanceof Error ? err.message : String(err)}`;
        log.warn({ err, messageId: mapped.messageId, attempt, retryInMs }, "whatsapp: the core could not store an inbound message; retrying (WhatsApp will not deliver it again)");
      },
    });
  }

  function learnLidMapping(key: WAMessageKey | undefined): void {
    for (const [primary, alt] of [
      [key?.remoteJid, key?.remoteJidAlt],
      [key?.participant, key?.participantAlt],
    ]) {
      if (primary && alt && jidKind(primary) === "lid" && jidKind(alt) === "pn") lidToPn.set(normalizeJid(primary), normalizeJid(alt));
    }
  }

  function selfOf(s: WASocketLike): SelfIdentity {
    const ids = [s.user?.id, s.user?.lid, s.user?.phoneNumber].filter((j): j is string => !!j);
    return { pn: ids.find((j) => jidKind(j) === "pn"), lid: ids.find((j) => jidKind(j) === "lid") };
  }

  function mapContext(s: WASocketLike): MapContext {
    return {
      accountId: config.accountId,
      self: selfOf(s),
      isOwnMessageId: (id) => sent.has(id),
      lookupPn: async (lid) => {
        const known = lidToPn.get(lid);
        if (known) return known;
        const pn = await s.signalRepository?.lidMapping?.getPNForLID(lid).catch(() => null);
        if (pn) lidToPn.set(lid, normalizeJid(pn));
        return pn ?? undefined;
      },
      albums,
      groupName: (jid) => groupNames.get(jid)?.name,
    };
  }

  /** Learns a group's subject off the inbound path: a metadata query is a network round trip. */
  function refreshGroupName(s: WASocketLike, jid: string): void {
    const known = groupNames.get(jid);
    if (!s.groupMetadata || groupFetches.has(jid) || (known && now() - known.at < GROUP_NAME_TTL_MS)) return;
    groupFetches.add(jid);
    s.groupMetadata(jid)
      .then((meta) => meta.subject && groupNames.set(jid, { name: meta.subject, at: now() }))
      .catch((err: unknown) => log.debug({ err, jid }, "whatsapp group metadata unavailable"))
      .finally(() => groupFetches.delete(jid));
  }

  return {
    channel: "whatsapp",
    accountId: config.accountId,
    textChunkLimit: config.textChunkLimit,

    async start() {
      // A halted adapter (logged out, replaced) may be started again once the operator fixed it.
      if (running && !halted) return;
      running = true;
      runId += 1;
      if (handing.signal.aborted) handing = new AbortController();
      halted = undefined;
      attempt = 0;
      immediateRestarts = 0;
      try {
        await openSocket(runId);
      } catch (err) {
        running = false;
        lastError = `start failed: ${err instanceof Error ? err.message : String(err)}`;
        throw err;
      }
    },

    async stop() {
      running = false;
      runId += 1;
      cancelPause?.();
      const s = sock;
      sock = undefined;
      connected = false;
      openedAt = undefined;
      if (s) await endQuietly(s);
      await drainInbound();
      handing.abort();
    },

    // A chunk repeated under its idempotency key keeps its message id (whatsappMessageId), and
    // WhatsApp shows one message per id.
    idempotentSends: true,

    async send(target: OutboundTarget, text: string, opts?: SendOptions): Promise<SendReceipt> {
      if (halted) throw new PlatformError("whatsapp", halted.code, halted.message);
      const s = sock;
      if (!s || !connected) throw new PlatformError("whatsapp", "transport", "not connected");
      const jid = jidForTarget(target.to);
      if (!jid) throw new PlatformError("whatsapp", "invalid", `not a WhatsApp JID or E.164 number: ${target.to}`);
      const quoted = target.replyToMessageId ? recentInbound.get(target.replyToMessageId) : undefined;
      let result: WAMessage | undefined;
      try {
        const messageId = opts?.idempotencyKey ? whatsappMessageId(opts.idempotencyKey) : undefined;
        // Undefined values are left out: Baileys spreads these options over its generated id.
        result = await s.sendMessage(jid, { text }, { ...(quoted ? { quoted } : {}), ...(messageId ? { messageId } : {}) });
      } catch (err) {
        throw toPlatformError(err);
      }
      const id = result?.key?.id;
      if (!id) throw new PlatformError("whatsapp", "transport", "send returned no message id");
      if (result?.message) sent.set(id, result.message);
      return { messageId: id };
    },

    async typing(target: OutboundTarget) {
      const s = sock;
      const jid = jidForTarget(target.to);
      if (!s || !connected || !s.sendPresenceUpdate || !jid) return;
      await s.sendPresenceUpdate("composing", jid).catch((err: unknown) => log.debug({ err }, "whatsapp typing failed"));
    },

    health(): ChannelHealth {
      return { connected, lastInboundAt, lastError };
    },

    chatTypeOf(target: OutboundTarget) {
      return chatTypeOfJid(target.to);
    },

    rateLimitsFor(target: OutboundTarget) {
      return whatsappRateLimits(target.to, config.rateLimit);
    },
  };
}
