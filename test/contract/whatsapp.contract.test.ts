import { expect, vi } from "vitest";
import { createWhatsAppAdapter } from "../../adapters/whatsapp/index.js";
import type { SocketFactory } from "../../adapters/whatsapp/types.js";
import { FakeWhatsApp, boomError } from "../fakes/whatsapp-socket.js";
import { startHarness } from "../helpers/harness.js";
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
    await waitOpen(harness);
    return {
      harness,
      async dm(who, text) {
        wa.injectText({ chatJid: dmJid(who), text });
      },
      async group(who, text, mentioned) {
        wa.injectText({ chatJid: GROUP, participant: dmJid(who), text, ...(mentioned ? { mentionedJids: ["15550000001@s.whatsapp.net"] } : {}) });
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
