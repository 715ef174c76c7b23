import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { describe, expect, it, vi } from "vitest";
import { createWhatsAppAdapter } from "../../adapters/whatsapp/index.js";
import type { SocketFactory } from "../../adapters/whatsapp/types.js";
import { FakeWhatsApp, boomError } from "../fakes/whatsapp-socket.js";
import { startHarness } from "../helpers/harness.js";
import { openStoreDb } from "../helpers/store-db.js";
import { runChannelContract, type ContractContext, type Who } from "./channel-contract.js";

const phones: Record<Who, string> = { owner: "15551230001", stranger: "15551230002" };
const GROUP = "120363000000000777@g.us";
const SELF = { id: "15550000001:7@s.whatsapp.net", lid: "90000000000001:7@lid", name: "Switchboard" };

runChannelContract({
  channel: "whatsapp",
  chunkLimit: 500,
  async start(): Promise<ContractContext> {
    const wa = new FakeWhatsApp({ self: SELF });
    let sends = 0;
    let failAt = 0;
    // Wrap each socket so a chosen send fails like a WhatsApp server error.
    const factory: SocketFactory = async () => {
      const sock = await wa.factory();
      const send = sock.sendMessage.bind(sock);
      sock.sendMessage = (async (...args: Parameters<typeof send>) => {
        if (++sends === failAt) throw boomError(500, "internal server error");
        return send(...args);
      }) as typeof send;
      return sock;
    };
    const harness = await startHarness({
      config: { commands: { owners: [`whatsapp:+${phones.owner}`] }, channels: { whatsapp: { enabled: true, textChunkLimit: 500 } } },
      adapterFactories: {
        whatsapp: async (ctx, config) => createWhatsAppAdapter(config.channels.whatsapp!, ctx, { socketFactory: factory, sleep: async () => {} }),
      },
    });
    const texts = (jid: string) => wa.sent.filter((m) => m.jid === jid).map((m) => m.text);
    const dmJid = (who: Who) => `${phones[who]}@s.whatsapp.net`;
    const lastDm = new Map<Who, string>();
    const photo = { imageMessage: { mimetype: "image/jpeg", url: "https://mmg.whatsapp.net/v/t62/photo.enc" } };
    await waitOpen(harness);
    return {
      harness,
      async dm(who, text) {
        lastDm.set(who, wa.injectText({ chatJid: dmJid(who), text }).key.id!);
      },
      async group(who, text, mentioned) {
        // WhatsApp clients write a mention into the text as "@<number>" beside its JID.
        wa.injectText({ chatJid: GROUP, participant: dmJid(who), ...(mentioned ? { text: `@15550000001 ${text}`, mentionedJids: ["15550000001@s.whatsapp.net"] } : { text }) });
      },
      async editDm(who, text) {
        wa.injectEdit({ chatJid: dmJid(who), of: lastDm.get(who)!, text });
      },
      async dmPhoto(who) {
        wa.injectContent({ chatJid: dmJid(who) }, photo);
      },
      async groupPhoto(who) {
        wa.injectContent({ chatJid: GROUP, participant: dmJid(who) }, photo);
      },
      dmSent: (who) => texts(dmJid(who)),
      groupSent: () => texts(GROUP),
      dmTo: (who) => dmJid(who),
      groupTo: GROUP,
      groupKey: `agent:main:whatsapp:group:${GROUP}`,
      async drop() {
        const before = wa.factoryCallCount;
        wa.drop(408);
        await vi.waitFor(() => expect(wa.factoryCallCount > before && wa.current.isOpen).toBe(true));
      },
      failNthSend(n) {
        failAt = sends + n;
      },
      async stop() {
        await harness.stop();
      },
    };
  },
});

async function waitOpen(harness: Awaited<ReturnType<typeof startHarness>>): Promise<void> {
  await vi.waitFor(() => expect([...harness.app.adapters.values()].some((a) => a.channel === "whatsapp" && a.health().connected)).toBe(true));
}

describe("whatsapp end to end: what WhatsApp replays after an outage", () => {
  const WAIT = { timeout: 10_000, interval: 20 };

  it("a message sent while the daemon was down, replayed as upsert type append at the next start, is answered exactly once", async () => {
    // Baileys 7 tags WhatsApp's replay of messages queued during an outage `append`, and the replay
    // may overlap what was already answered (an ack lost in the drop) or repeat itself.
    const stateDir = mkdtempSync(path.join(os.tmpdir(), "sb-wa-offline-"));
    const wa = new FakeWhatsApp({ self: SELF });
    const start = () =>
      startHarness({
        stateDir,
        config: { channels: { whatsapp: { enabled: true } } },
        adapterFactories: { whatsapp: async (ctx, config) => createWhatsAppAdapter(config.channels.whatsapp!, ctx, { socketFactory: wa.factory, sleep: async () => {} }) },
      });
    const alice = `${phones.stranger}@s.whatsapp.net`;
    const replies = () => wa.sent.filter((m) => m.jid === alice).map((m) => m.text);
    let harness = await start();
    try {
      await waitOpen(harness);
      const answered = wa.injectText({ chatJid: alice, text: "before the restart" });
      await vi.waitFor(() => expect(replies()).toEqual(["echo: before the restart"]), WAIT);
      await harness.stop({ keepState: true });

      harness = await start();
      await waitOpen(harness);
      wa.injectMessage(answered, "append");
      const missed = wa.injectText({ chatJid: alice, text: "sent while the daemon was down", type: "append" });
      wa.injectMessage(missed, "append");
      wa.injectText({ chatJid: alice, text: "live again" });
      await vi.waitFor(() => expect(replies()).toHaveLength(3), WAIT);
      expect(replies()).toEqual(["echo: before the restart", "echo: sent while the daemon was down", "echo: live again"]);
    } finally {
      await harness.stop({ keepState: true });
      rmSync(stateDir, { recursive: true, force: true });
    }
  });
});

describe("whatsapp end to end: a group the bot was removed from", () => {
  it("a reply to a group the bot is no longer in is failed at the first refusal, not retried for twenty minutes", async () => {
    // Baileys' group send first queries the group; the server's IQ error 403 "forbidden" reaches
    // us as a Boom with status 500, which read as a transport error was retried ~50 times.
    const wa = new FakeWhatsApp({ self: SELF });
    let groupSends = 0;
    const factory: SocketFactory = async () => {
      const sock = await wa.factory();
      const send = sock.sendMessage.bind(sock);
      sock.sendMessage = (async (...args: Parameters<typeof send>) => {
        if (args[0] === GROUP) groupSends++;
        return send(...args);
      }) as typeof send;
      return sock;
    };
    const harness = await startHarness({
      config: { channels: { whatsapp: { enabled: true } } },
      adapterFactories: { whatsapp: async (ctx, config) => createWhatsAppAdapter(config.channels.whatsapp!, ctx, { socketFactory: factory, sleep: async () => {} }) },
    });
    try {
      await waitOpen(harness);
      // Mentioned, then removed from the group before the reply goes out.
      wa.leaveGroup(GROUP);
      wa.injectText({ chatJid: GROUP, participant: `${phones.stranger}@s.whatsapp.net`, text: "@bot hi", mentionedJids: [SELF.lid] });
      const client = await harness.client();
      await vi.waitFor(async () => expect((await client.request("health", {})).outbox.failed).toBe(1), { timeout: 10_000, interval: 20 });
      expect(groupSends).toBe(1);
      expect(wa.sent).toHaveLength(0);
    } finally {
      await harness.stop();
    }
  });
});

describe("whatsapp end to end: a store that cannot write", () => {
  it("a message arriving while the store refuses writes (a full disk) is answered once the store writes again: WhatsApp does not deliver it twice", async () => {
    // Baileys acknowledges a message as it arrives, so the adapter is the last holder of it.
    const wa = new FakeWhatsApp({ self: SELF });
    const harness = await startHarness({
      config: { channels: { whatsapp: { enabled: true } } },
      adapterFactories: { whatsapp: async (ctx, config) => createWhatsAppAdapter(config.channels.whatsapp!, ctx, { socketFactory: wa.factory, sleep: async () => {} }) },
    });
    const alice = `${phones.stranger}@s.whatsapp.net`;
    const replies = () => wa.sent.filter((m) => m.jid === alice).map((m) => m.text);
    const db = await openStoreDb(harness.stateDir);
    try {
      await waitOpen(harness);
      await db.exec("CREATE TRIGGER test_disk_full BEFORE INSERT ON keyv WHEN NEW.key LIKE 'inbound:%' BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END");
      wa.injectText({ chatJid: alice, text: "while the disk is full" });
      wa.injectText({ chatJid: alice, text: "and another" });
      const whatsapp = () => [...harness.app.adapters.values()].find((a) => a.channel === "whatsapp")!;
      // The operator sees why in `status`.
      await vi.waitFor(() => expect(whatsapp().health().lastError).toMatch(/database or disk is full/), { timeout: 5000 });
      expect(harness.model.requests).toHaveLength(0);
      await db.exec("DROP TRIGGER test_disk_full");
      await vi.waitFor(() => expect(replies()).toEqual(["echo: while the disk is full", "echo: and another"]), { timeout: 10_000, interval: 20 });
      expect(harness.model.requests).toHaveLength(2);
    } finally {
      await db.close();
      await harness.stop();
    }
  });
});

describe("whatsapp end to end: a send whose outcome is unknown", () => {
  it("a reply whose socket dropped as it was relayed is sent again under the same message id: the recipient is shown it once", async () => {
    // The stanza may have left before the socket dropped; the outbox repeats the chunk, and a
    // repeat under a fresh id would be a second message on the user's phone.
    const wa = new FakeWhatsApp({ self: SELF });
    let dropAfterRelay = true;
    const factory: SocketFactory = async () => {
      const sock = await wa.factory();
      const send = sock.sendMessage.bind(sock);
      sock.sendMessage = (async (...args: Parameters<typeof send>) => {
        const message = await send(...args);
        if (!dropAfterRelay) return message;
        dropAfterRelay = false;
        throw boomError(428, "Connection Closed");
      }) as typeof send;
      return sock;
    };
    const harness = await startHarness({
      config: { channels: { whatsapp: { enabled: true } } },
      adapterFactories: { whatsapp: async (ctx, config) => createWhatsAppAdapter(config.channels.whatsapp!, ctx, { socketFactory: factory, sleep: async () => {} }) },
    });
    const alice = `${phones.stranger}@s.whatsapp.net`;
    try {
      await waitOpen(harness);
      wa.injectText({ chatJid: alice, text: "are you there" });
      await vi.waitFor(() => expect(wa.sent.filter((m) => m.jid === alice)).toHaveLength(2), { timeout: 10_000, interval: 20 });
      expect(wa.shownIn(alice)).toEqual(["echo: are you there"]);
    } finally {
      await harness.stop();
    }
  });
});
