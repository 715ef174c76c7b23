import { FakeTelegramBotApi, errors, fakeUser, groupChat, privateChat, type FakeUser } from "../fakes/telegram-bot-api.js";
import { startHarness } from "../helpers/harness.js";
import { runChannelContract, type ContractContext, type Who } from "./channel-contract.js";

const users: Record<Who, FakeUser> = { owner: fakeUser("Olive", { id: 5001 }), stranger: fakeUser("Sam", { id: 5002 }) };
const GROUP = groupChat(-100777, "Team");

runChannelContract({
  channel: "telegram",
  chunkLimit: 500,
  async start(): Promise<ContractContext> {
    const api = new FakeTelegramBotApi({ maxLongPollMs: 200 });
    const apiRoot = await api.start();
    const harness = await startHarness({
      config: {
        commands: { owners: [`telegram:${users.owner.id}`] },
        channels: { telegram: { enabled: true, botToken: api.token, apiRoot, textChunkLimit: 500, pollTimeoutSeconds: 1 } },
      },
    });
    await api.waitForCall("getUpdates");
    let sends = 0;
    const texts = (chatId: number) => api.sent.filter((m) => m.chat.id === chatId).map((m) => m.text ?? "");
    const lastDm = new Map<Who, number>();
    const photo = { photo: [{ file_id: "photo-1", file_unique_id: "p1", width: 90, height: 90 }] };
    return {
      harness,
      async dm(who, text) {
        const update = api.injectText({ chat: privateChat(users[who]), from: users[who], text });
        lastDm.set(who, (update.message as { message_id: number }).message_id);
      },
      async group(who, text, mentioned) {
        api.injectText({ chat: GROUP, from: users[who], text: mentioned ? `@${api.bot.username} ${text}` : text });
      },
      async editDm(who, text) {
        api.injectText({ chat: privateChat(users[who]), from: users[who], text, editOf: lastDm.get(who) });
      },
      async dmPhoto(who) {
        api.injectText({ chat: privateChat(users[who]), from: users[who], media: photo });
      },
      async groupPhoto(who) {
        api.injectText({ chat: GROUP, from: users[who], media: photo });
      },
      dmSent: (who) => texts(users[who].id),
      groupSent: () => texts(GROUP.id),
      dmTo: (who) => String(users[who].id),
      groupTo: String(GROUP.id),
      groupKey: `agent:main:telegram:group:${GROUP.id}`,
      async drop() {
        api.failNext("getUpdates", { destroySocket: true });
        api.failNext("getUpdates", errors.badGateway);
        await api.waitForCall("getUpdates", () => true);
      },
      failNthSend(n) {
        api.override("sendMessage", () => (++sends === n ? errors.serverError : undefined));
      },
      async stop() {
        await harness.stop();
        await api.stop();
      },
    };
  },
});

