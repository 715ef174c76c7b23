/**
 * The production SocketFactory: a real Baileys socket with a kv-backed auth state.
 * Baileys is imported lazily here, so a daemon with WhatsApp disabled never pays its ~0.5 s load.
 */
import type { UserFacingSocketConfig, WAMessageKey, WAVersion, proto } from "@whiskeysockets/baileys";
import type { AdapterContext } from "../../src/channels/types.js";
import { loadKvAuthState, type KvAuthState } from "./auth-state.js";
import type { SocketFactory, WASocketLike } from "./types.js";

export interface BaileysSocketFactoryOptions {
  ctx: Pick<AdapterContext, "kv" | "log">;
  /** Content of a message we sent, so Baileys can answer a recipient's retry request. */
  getMessage(key: WAMessageKey): Promise<proto.IMessage | undefined>;
  /** Test seam replacing makeWASocket, which dials WhatsApp as soon as it is called. */
  makeSocket?: (config: UserFacingSocketConfig) => WASocketLike;
  /**
   * WhatsApp Web client version to announce. Default: the current one from web.whatsapp.com,
   * because WhatsApp rejects clients whose built-in version has gone stale (close code 405);
   * undefined falls back to the version Baileys ships with.
   */
  resolveVersion?: () => Promise<WAVersion | undefined>;
}

const VERSION_TTL_MS = 60 * 60 * 1000;
const VERSION_FETCH_TIMEOUT_MS = 5_000;
const PINO_WARN = 40;

export function createBaileysSocketFactory(opts: BaileysSocketFactoryOptions): SocketFactory {
  const log = opts.ctx.log;
  let version: { value: WAVersion | undefined; at: number } | undefined;
  let previous: KvAuthState | undefined;

  return async () => {
    const baileys = await import("@whiskeysockets/baileys");
    // Baileys does not wait for creds.update to be saved: right after a QR scan it announces the
    // new login and the server's 515 follows one round trip later. Loading before the previous
    // socket's writes have landed would read the unpaired creds and lose the scan.
    await previous?.settled();
    const auth = await loadKvAuthState(opts.ctx.kv, baileys);
    previous = auth;

    if (!version || Date.now() - version.at > VERSION_TTL_MS) {
      const resolve =
        opts.resolveVersion ??
        (async () => {
          const latest = await baileys.fetchLatestWaWebVersion({ signal: AbortSignal.timeout(VERSION_FETCH_TIMEOUT_MS) });
          return latest.isLatest ? latest.version : undefined;
        });
      version = { value: await resolve().catch(() => undefined), at: Date.now() };
      log.debug({ version: version.value ?? "baileys built-in" }, "whatsapp web version");
    }

    // Baileys is chatty at info; warn and above is what an operator can act on, and a stricter
    // daemon level still wins.
    const level = log.levelVal > PINO_WARN ? log.level : "warn";
    const make = opts.makeSocket ?? baileys.makeWASocket;
    const sock = make({
      auth: auth.state,
      logger: log.child({ lib: "baileys" }, { level }),
      browser: baileys.Browsers.ubuntu("Switchboard"),
      getMessage: opts.getMessage,
      // Staying "offline" keeps notifications flowing to the owner's phone.
      markOnlineOnConnect: false,
      ...(version.value ? { version: version.value } : {}),
    });
    sock.ev.on("creds.update", (update) => {
      auth.saveCreds(update).catch((err: unknown) => log.error({ err }, "whatsapp: failed to persist credentials"));
    });
    return sock;
  };
}
