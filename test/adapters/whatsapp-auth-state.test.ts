import * as baileys from "@whiskeysockets/baileys";
import type { AuthenticationState, UserFacingSocketConfig, WAVersion } from "@whiskeysockets/baileys";
import { mkdtempSync, readdirSync, readlinkSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import os from "node:os";
import path from "node:path";
import { pino } from "pino";
import { afterEach, describe, expect, it, vi } from "vitest";
import { loadKvAuthState, resetKvAuthState } from "../../adapters/whatsapp/auth-state.js";
import { createBaileysSocketFactory, createWhatsAppAdapter } from "../../adapters/whatsapp/index.js";
import type { AdapterKv, ChannelAdapter } from "../../src/channels/types.js";
import { ConfigSchema } from "../../src/config/schema.js";
import { FakeWhatsApp, memoryKv } from "../fakes/whatsapp-socket.js";
import { startHarness } from "../helpers/harness.js";
import { openStoreDb } from "../helpers/store-db.js";
import { openKvStore } from "../../src/store/kv.js";
import { openAuthDir } from "../../src/store/adapter-kv.js";

/** Files under `dir` this process holds open (Linux: /proc/self/fd). */
function openFilesUnder(dir: string): string[] {
  return readdirSync("/proc/self/fd").flatMap((fd) => {
    try {
      const target = readlinkSync(`/proc/self/fd/${fd}`);
      return target.startsWith(`${dir}/`) ? [target] : [];
    } catch {
      return [];
    }
  });
}

const log = pino({ level: "silent" });

async function waitFor(cond: () => boolean, what: string, timeoutMs = 2_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

/** Lets already-scheduled work run; used only to give a wrong path the chance to happen. */
const settle = () => new Promise((r) => setTimeout(r, 25));

const bytes = (...values: number[]) => Uint8Array.from(values);

/** What a completed QR pairing plus some Signal traffic leaves behind in the key store. */
async function writeSampleKeys(auth: AuthenticationState): Promise<void> {
  await auth.keys.set({
    "pre-key": { "1": { public: bytes(1, 2, 3), private: bytes(4, 5, 6) }, "2": { public: bytes(7), private: bytes(8) } },
    session: { "15551234567.0": Buffer.from("session-bytes") },
    "lid-mapping": { "15551234567": "123456789012345" },
    "app-state-sync-key": { AAAA: { keyData: bytes(9, 9, 9), timestamp: 1_700_000_000 } },
  });
}

describe("kv-backed Baileys auth state", () => {
  it("starts from fresh creds and round-trips creds and keys with their Buffers intact", async () => {
    const kv = memoryKv();
    const first = await loadKvAuthState(kv, baileys);
    expect(first.state.creds.registered).toBe(false);
    await first.saveCreds({ registered: true, me: { id: "15550000001:7@s.whatsapp.net", name: "Bot" } });
    await writeSampleKeys(first.state);

    const second = await loadKvAuthState(kv, baileys);
    const [a, b] = [first.state.creds, second.state.creds];
    expect(b.registered).toBe(true);
    expect(b.me?.id).toBe("15550000001:7@s.whatsapp.net");
    expect(Buffer.isBuffer(b.noiseKey.private)).toBe(true);
    expect(Buffer.from(b.noiseKey.private).equals(Buffer.from(a.noiseKey.private))).toBe(true);
    expect(Buffer.from(b.signedPreKey.signature).equals(Buffer.from(a.signedPreKey.signature))).toBe(true);
    expect(b.registrationId).toBe(a.registrationId);

    const preKeys = await second.state.keys.get("pre-key", ["1", "2", "3"]);
    expect(Object.keys(preKeys).sort()).toEqual(["1", "2"]);
    expect(Buffer.isBuffer(preKeys["1"].private)).toBe(true);
    expect([...preKeys["1"].private]).toEqual([4, 5, 6]);
    const sessions = await second.state.keys.get("session", ["15551234567.0"]);
    expect(Buffer.from(sessions["15551234567.0"]).toString()).toBe("session-bytes");
    expect(await second.state.keys.get("lid-mapping", ["15551234567"])).toEqual({ "15551234567": "123456789012345" });
    const sync = await second.state.keys.get("app-state-sync-key", ["AAAA"]);
    expect(sync.AAAA).toBeInstanceOf(baileys.proto.Message.AppStateSyncKeyData);
    expect([...(sync.AAAA.keyData ?? [])]).toEqual([9, 9, 9]);
  });

  it("deletes keys set to null (consumed pre-keys)", async () => {
    const kv = memoryKv();
    const auth = await loadKvAuthState(kv, baileys);
    await writeSampleKeys(auth.state);
    await auth.state.keys.set({ "pre-key": { "1": null } });
    expect(Object.keys(await auth.state.keys.get("pre-key", ["1", "2"]))).toEqual(["2"]);
  });

  it("keeps creds writes in call order", async () => {
    const kv = memoryKv();
    // A store that finishes the newest of its pending writes first: unserialised writes would
    // leave the oldest creds on disk.
    const pending: Array<() => void> = [];
    const reorderingKv: AdapterKv = { ...kv, set: async (k, v) => (await new Promise<void>((r) => pending.push(r)), kv.set(k, v)) };
    const auth = await loadKvAuthState(reorderingKv, baileys);
    let done = false;
    void Promise.all([1, 2, 3, 4, 5].map((n) => auth.saveCreds({ nextPreKeyId: n }))).then(() => (done = true));
    while (!done) {
      await new Promise((r) => setTimeout(r, 1));
      pending.pop()?.();
    }
    expect((await loadKvAuthState(kv, baileys)).state.creds.nextPreKeyId).toBe(5);
  });

  it("a failed creds write does not stop later ones from being saved", async () => {
    const kv = memoryKv();
    let failures = 1;
    const flakyKv: AdapterKv = { ...kv, set: async (k, v) => (failures-- > 0 ? Promise.reject(new Error("disk full")) : kv.set(k, v)) };
    const auth = await loadKvAuthState(flakyKv, baileys);
    await expect(auth.saveCreds({ registered: true })).rejects.toThrow("disk full");
    await auth.saveCreds({ me: { id: "15550000001:7@s.whatsapp.net" } });
    const reloaded = (await loadKvAuthState(kv, baileys)).state.creds;
    expect(reloaded.registered).toBe(true);
    expect(reloaded.me?.id).toBe("15550000001:7@s.whatsapp.net");
  });

  it("reset forgets the login: next load has new creds and an empty key space", async () => {
    const kv = memoryKv();
    const before = await loadKvAuthState(kv, baileys);
    await before.saveCreds({ registered: true });
    await writeSampleKeys(before.state);
    await resetKvAuthState(kv);
    const after = await loadKvAuthState(kv, baileys);
    expect(after.generation).toBe(before.generation + 1);
    expect(after.state.creds.registered).toBe(false);
    expect(Buffer.from(after.state.creds.noiseKey.private).equals(Buffer.from(before.state.creds.noiseKey.private))).toBe(false);
    expect(await after.state.keys.get("pre-key", ["1", "2"])).toEqual({});
  });
});

describe("production socket factory across adapter restarts", () => {
  const running: ChannelAdapter[] = [];
  afterEach(async () => {
    await Promise.all(running.splice(0).map((a) => a.stop()));
  });

  /** The adapter's default (production) factory, with only makeWASocket swapped for the fake. */
  function adapterWithProductionFactory(kv: AdapterKv, wa: FakeWhatsApp, captured: UserFacingSocketConfig[], resolveVersion = async (): Promise<WAVersion | undefined> => undefined) {
    const config = ConfigSchema.parse({ channels: { whatsapp: { enabled: true } } }).channels.whatsapp!;
    const adapter = createWhatsAppAdapter(config, { kv, log, onInbound: async () => {} }, {
      baileys: {
        makeSocket: (cfg) => (captured.push(cfg), wa.newSocket()),
        resolveVersion, // no network in tests
      },
    });
    running.push(adapter);
    return adapter;
  }

  it("a second adapter sharing the kv resumes the first one's login (creds.update persisted, keys kept)", async () => {
    const kv = memoryKv();
    const wa = new FakeWhatsApp();
    const captured: UserFacingSocketConfig[] = [];

    const first = adapterWithProductionFactory(kv, wa, captured);
    await first.start();
    const auth1 = captured[0].auth;
    expect(auth1.creds.registered).toBe(false);
    expect(captured[0].browser).toEqual(baileys.Browsers.ubuntu("Switchboard"));
    // What Baileys does when the QR is scanned: mutate creds and announce them on creds.update.
    wa.current.ev.emit("creds.update", { registered: true, me: { id: "15550000001:7@s.whatsapp.net", name: "Bot" } });
    await writeSampleKeys(auth1);
    await waitFor(() => [...kv.data.keys()].some((k) => k.endsWith(":creds") && kv.data.get(k)!.includes('\\"registered\\":true')), "creds saved");
    await first.stop();

    const second = adapterWithProductionFactory(kv, wa, captured);
    await second.start();
    const auth2 = captured[1].auth;
    expect(auth2.creds.registered).toBe(true);
    expect(auth2.creds.me?.id).toBe("15550000001:7@s.whatsapp.net");
    expect(Buffer.isBuffer(auth2.creds.signedIdentityKey.private)).toBe(true);
    expect(Buffer.from(auth2.creds.signedIdentityKey.private).equals(Buffer.from(auth1.creds.signedIdentityKey.private))).toBe(true);
    const sessions = await auth2.keys.get("session", ["15551234567.0"]);
    expect(Buffer.isBuffer(sessions["15551234567.0"])).toBe(true);
    const preKeys = await auth2.keys.get("pre-key", ["1"]);
    expect(Buffer.isBuffer(preKeys["1"].public)).toBe(true);
    expect([...preKeys["1"].public]).toEqual([1, 2, 3]);
  });

  it("interfaces §2 channels.whatsapp.authDir: the login is kept in <authDir>/auth.sqlite, not in the shared store, and a daemon with another state dir but that authDir resumes it", async () => {
    const authDir = mkdtempSync(path.join(os.tmpdir(), "sb-wa-auth-"));
    const wa = new FakeWhatsApp();
    const captured: UserFacingSocketConfig[] = [];
    const daemon = (stateDir?: string) =>
      startHarness({
        ...(stateDir ? { stateDir } : {}),
        config: { channels: { whatsapp: { enabled: true, authDir } } },
        adapterFactories: {
          whatsapp: async (ctx, config) =>
            createWhatsAppAdapter(config.channels.whatsapp!, ctx, { printQr: () => {}, baileys: { makeSocket: (cfg) => (captured.push(cfg), wa.newSocket()), resolveVersion: async () => undefined } }),
        },
      });
    try {
      const first = await daemon();
      await waitFor(() => captured.length === 1, "first socket");
      wa.current.ev.emit("creds.update", { registered: true, me: { id: "15550000001:7@s.whatsapp.net", name: "Bot" } });
      const authDb = await openStoreDb(path.join(authDir, "auth.sqlite"));
      try {
        await vi.waitFor(async () => expect(await authDb.all("SELECT key FROM keyv WHERE value LIKE '%registered%true%'")).not.toEqual([]));
      } finally {
        await authDb.close();
      }
      const shared = await openStoreDb(first.stateDir);
      try {
        expect(await shared.all("SELECT key FROM keyv WHERE key LIKE '%whatsapp%'")).toEqual([]);
      } finally {
        await shared.close();
      }
      await first.stop();
      // Stopped, the daemon holds no file of the login open: it can be backed up, moved or deleted.
      expect(openFilesUnder(authDir)).toEqual([]);

      const second = await daemon();
      try {
        await waitFor(() => captured.length === 2, "second daemon's socket");
        expect(captured[1].auth.creds).toMatchObject({ registered: true, me: { id: "15550000001:7@s.whatsapp.net" } });
        expect(Buffer.from(captured[1].auth.creds.noiseKey.private).equals(Buffer.from(captured[0].auth.creds.noiseKey.private))).toBe(true);
      } finally {
        await second.stop();
      }
    } finally {
      rmSync(authDir, { recursive: true, force: true });
    }
  });

  it("interfaces §2 channels.whatsapp.authDir defaults to <stateDir>/whatsapp; a login an earlier version kept in the shared store moves there, so no new QR is needed", async () => {
    const stateDir = mkdtempSync(path.join(os.tmpdir(), "sb-wa-legacy-"));
    try {
      // The earlier layout: creds and keys in the shared store's adapter space.
      const store = await openKvStore(`sqlite://${path.join(stateDir, "switchboard.sqlite")}`, stateDir);
      const space = store.space<unknown>("adapter:whatsapp:default");
      const legacyKv: AdapterKv = { get: async <T>(k: string) => (await space.get(k)) as T | undefined, set: (k, v) => space.set(k, v), delete: (k) => space.delete(k) };
      const legacy = await loadKvAuthState(legacyKv, baileys);
      await legacy.saveCreds({ registered: true, me: { id: "15550000001:7@s.whatsapp.net", name: "Bot" } });
      await writeSampleKeys(legacy.state);
      await store.close();

      const wa = new FakeWhatsApp();
      const captured: UserFacingSocketConfig[] = [];
      const harness = await startHarness({
        stateDir,
        config: { channels: { whatsapp: { enabled: true } } },
        adapterFactories: {
          whatsapp: async (ctx, config) =>
            createWhatsAppAdapter(config.channels.whatsapp!, ctx, { printQr: () => {}, baileys: { makeSocket: (cfg) => (captured.push(cfg), wa.newSocket()), resolveVersion: async () => undefined } }),
        },
      });
      try {
        await waitFor(() => captured.length === 1, "socket");
        expect(captured[0].auth.creds).toMatchObject({ registered: true, me: { id: "15550000001:7@s.whatsapp.net" } });
        expect(Buffer.from(captured[0].auth.creds.noiseKey.private).equals(Buffer.from(legacy.state.creds.noiseKey.private))).toBe(true);
        expect(Object.keys(await captured[0].auth.keys.get("pre-key", ["1", "2"])).sort()).toEqual(["1", "2"]);
        const authDb = await openStoreDb(path.join(stateDir, "whatsapp", "auth.sqlite"));
        const shared = await openStoreDb(stateDir);
        try {
          expect((await authDb.all("SELECT key FROM keyv")).length).toBeGreaterThan(0);
          expect(await shared.all("SELECT key FROM keyv WHERE key LIKE '%whatsapp%'")).toEqual([]);
        } finally {
          await authDb.close();
          await shared.close();
        }
      } finally {
        await harness.stop();
      }
    } finally {
      rmSync(stateDir, { recursive: true, force: true });
    }
  });

  it("interfaces §2 a login that cannot be moved into channels.whatsapp.authDir fails naming that file, and leaves no file of it open", async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), "sb-wa-move-"));
    try {
      // The earlier store, unreadable (here: closed), as a store that fails mid-move would be.
      const shared = await openKvStore(`sqlite://${path.join(dir, "shared.sqlite")}`, dir);
      const legacy = shared.space<unknown>("adapter:whatsapp:default");
      await shared.close();
      const authDir = path.join(dir, "auth");
      await expect(openAuthDir(authDir, legacy)).rejects.toThrow(`cannot move the WhatsApp login into ${path.join(authDir, "auth.sqlite")}`);
      expect(openFilesUnder(authDir)).toEqual([]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("the restart WhatsApp asks for right after a QR scan (515) resumes the new login, even while the store is slow to commit it", async () => {
    // Baileys announces the paired creds on creds.update and does not wait for them to be saved;
    // the server's 515 follows one round trip later. The reconnect loaded the auth state from the
    // store before that write had committed, so it came back unpaired (a fresh identity, a new
    // QR): the scan was lost. Real SQLite, with a lock of the test's own holding the write back.
    const wa = new FakeWhatsApp({ autoOpen: false });
    const captured: UserFacingSocketConfig[] = [];
    const harness = await startHarness({
      config: { channels: { whatsapp: { enabled: true } } },
      adapterFactories: {
        whatsapp: async (ctx, config) =>
          createWhatsAppAdapter(config.channels.whatsapp!, ctx, {
            printQr: () => {},
            baileys: { makeSocket: (cfg) => (captured.push(cfg), wa.newSocket()), resolveVersion: async () => undefined },
          }),
      },
    });
    const db = await openStoreDb(path.join(harness.stateDir, "whatsapp", "auth.sqlite"));
    try {
      await waitFor(() => captured.length === 1, "first socket");
      const creds = captured[0].auth.creds;
      expect(creds.registered).toBe(false);
      wa.showQr("2@QRDATA");
      // What Baileys does on pair-success: mutate the creds, announce them, and soon get a 515.
      const paired = { registered: true, me: { id: "15550000001:7@s.whatsapp.net", name: "Bot" } };
      Object.assign(creds, paired);
      await db.exec("BEGIN IMMEDIATE");
      wa.current.ev.emit("creds.update", paired);
      wa.drop(515, "Stream Errored (restart required)");
      await settle(); // a reconnect that does not wait for the write loads the store meanwhile
      await db.exec("COMMIT");
      await waitFor(() => captured.length === 2, "the restart's socket");
      const resumed = captured[1].auth.creds;
      expect(resumed.registered).toBe(true);
      expect(resumed.me?.id).toBe("15550000001:7@s.whatsapp.net");
      expect(Buffer.from(resumed.noiseKey.private).equals(Buffer.from(creds.noiseKey.private))).toBe(true);
    } finally {
      await db.exec("ROLLBACK").catch(() => undefined);
      await db.close();
      await harness.stop();
    }
  });

  it("announces the current WhatsApp Web version, fetched once and reused across reconnects, and stays offline so the phone keeps notifying", async () => {
    const wa = new FakeWhatsApp();
    const captured: UserFacingSocketConfig[] = [];
    let lookups = 0;
    const adapter = adapterWithProductionFactory(memoryKv(), wa, captured, async () => (lookups++, [2, 3000, 1027934701]));
    await adapter.start();
    await waitFor(() => adapter.health().connected, "connected");
    wa.drop(515);
    await waitFor(() => captured.length === 2 && adapter.health().connected, "restarted");
    expect(captured.map((c) => c.version)).toEqual([
      [2, 3000, 1027934701],
      [2, 3000, 1027934701],
    ]);
    expect(lookups).toBe(1);
    expect(captured[0].markOnlineOnConnect).toBe(false);
  });

  it("a failed lookup of the current WhatsApp Web version does not stop the connection: Baileys' built-in version is used", async () => {
    const wa = new FakeWhatsApp();
    const captured: UserFacingSocketConfig[] = [];
    const adapter = adapterWithProductionFactory(memoryKv(), wa, captured, () => Promise.reject(new Error("web.whatsapp.com unreachable")));
    await adapter.start();
    await waitFor(() => adapter.health().connected, "connected");
    expect(captured).toHaveLength(1);
    expect(captured[0].version).toBeUndefined();
  });

  it("looks the WhatsApp Web version up again once the one it has is an hour old", async () => {
    const realNow = Date.now;
    let skew = 0;
    const clock = vi.spyOn(Date, "now").mockImplementation(() => realNow() + skew);
    try {
      const wa = new FakeWhatsApp();
      const captured: UserFacingSocketConfig[] = [];
      let lookups = 0;
      const adapter = adapterWithProductionFactory(memoryKv(), wa, captured, async () => (++lookups, [2, 3000, lookups]));
      await adapter.start();
      await waitFor(() => adapter.health().connected, "connected");
      skew = 61 * 60 * 1000;
      wa.drop(515);
      await waitFor(() => captured.length === 2 && adapter.health().connected, "restarted");
      expect(lookups).toBe(2);
      expect(captured.map((c) => c.version)).toEqual([
        [2, 3000, 1],
        [2, 3000, 2],
      ]);
    } finally {
      clock.mockRestore();
    }
  });

  it("gives Baileys a logger at warn under a daemon logging at info, and keeps a stricter daemon level", async () => {
    const wa = new FakeWhatsApp();
    const levels: string[] = [];
    for (const daemonLevel of ["info", "error"]) {
      const factory = createBaileysSocketFactory({
        ctx: { kv: memoryKv(), log: pino({ level: daemonLevel }, { write: () => {} }) },
        getMessage: async () => undefined,
        makeSocket: (cfg) => (levels.push(cfg.logger!.level), wa.newSocket()),
        resolveVersion: async () => undefined,
      });
      await (await factory()).end(undefined);
    }
    expect(levels).toEqual(["warn", "error"]);
  });

  it("a credentials write that fails is logged, not left as an unhandled rejection", async () => {
    const kv = memoryKv();
    const failingKv: AdapterKv = { ...kv, set: async (k, v) => (k.endsWith(":creds") ? Promise.reject(new Error("disk full")) : kv.set(k, v)) };
    const lines: Array<{ msg: string }> = [];
    const wa = new FakeWhatsApp();
    const factory = createBaileysSocketFactory({
      ctx: { kv: failingKv, log: pino({ level: "warn" }, { write: (line: string) => void lines.push(JSON.parse(line)) }) },
      getMessage: async () => undefined,
      makeSocket: () => wa.newSocket(),
      resolveVersion: async () => undefined,
    });
    const sock = await factory();
    sock.ev.emit("creds.update", { registered: true });
    await waitFor(() => lines.some((l) => l.msg === "whatsapp: failed to persist credentials"), "the failed write logged");
    await sock.end(undefined);
  });

  it("answers Baileys' getMessage retries with the content of messages the adapter sent", async () => {
    const wa = new FakeWhatsApp();
    const captured: UserFacingSocketConfig[] = [];
    const adapter = adapterWithProductionFactory(memoryKv(), wa, captured);
    await adapter.start();
    await waitFor(() => adapter.health().connected, "connected");
    const receipt = await adapter.send({ channel: "whatsapp", accountId: "default", to: "15551234567@s.whatsapp.net" }, "retry me");
    const getMessage = captured[0].getMessage!;
    const content = await getMessage({ id: receipt.messageId, remoteJid: "15551234567@s.whatsapp.net", fromMe: true });
    expect(content?.extendedTextMessage?.text).toBe("retry me");
    expect(await getMessage({ id: "NEVER-SENT", remoteJid: "15551234567@s.whatsapp.net", fromMe: true })).toBeUndefined();
  });

  it("drives the REAL makeWASocket with the kv auth state: a refused dial (408) is retried with backoff", async () => {
    // A port that was just free: the dial is refused locally, no WhatsApp server is contacted.
    const port = await new Promise<number>((resolve) => {
      const srv = createServer().listen(0, "127.0.0.1", () => {
        const { port } = srv.address() as { port: number };
        srv.close(() => resolve(port));
      });
    });
    const sleeps: number[] = [];
    const config = ConfigSchema.parse({ channels: { whatsapp: { enabled: true } } }).channels.whatsapp!;
    const adapter = createWhatsAppAdapter(config, { kv: memoryKv(), log, onInbound: async () => {} }, {
      sleep: async (ms) => void sleeps.push(ms),
      random: () => 0,
      baileys: {
        resolveVersion: async () => undefined,
        makeSocket: (cfg) => baileys.makeWASocket({ ...cfg, waWebSocketUrl: `ws://127.0.0.1:${port}` }),
      },
    });
    running.push(adapter);
    await adapter.start();
    await waitFor(() => sleeps.length >= 2, "two backoff sleeps", 10_000);
    expect(sleeps.slice(0, 2)).toEqual([2_000, 3_600]);
    expect(adapter.health()).toMatchObject({ connected: false, lastError: expect.stringContaining("408") });
    await adapter.stop();
  });
});
