import { ChannelType, type APIMessage } from "discord.js";
import pino from "pino";
import { afterEach, describe, expect, it, vi } from "vitest";
import { FakeDiscord } from "../fakes/discord-api.js";
import { startHarness } from "../helpers/harness.js";
import { openStoreDb } from "../helpers/store-db.js";
import { runChannelContract, type ContractContext, type Who } from "./channel-contract.js";

runChannelContract({
  channel: "discord",
  chunkLimit: 500,
  async start(): Promise<ContractContext> {
    const fake = await new FakeDiscord().start();
    const users: Record<Who, string> = { owner: fake.ids.alice, stranger: fake.ids.bob };
    const harness = await startHarness({
      config: {
        commands: { owners: [`discord:${users.owner}`] },
        channels: { discord: { enabled: true, token: fake.token, apiBase: fake.apiBase, textChunkLimit: 500 } },
      },
    });
    let sends = 0;
    const texts = (channelId: string) => fake.sent(channelId).map((m) => m.content);
    const lastDm = new Map<Who, APIMessage>();
    const photo = [{ filename: "cat.png", content_type: "image/png" }];
    return {
      harness,
      async dm(who, text) {
        lastDm.set(who, fake.injectDM({ author: users[who], content: text }));
      },
      async group(who, text, mentioned) {
        fake.injectMessage({ channelId: fake.ids.general, author: users[who], content: mentioned ? `<@${fake.ids.bot}> ${text}` : text });
      },
      async editDm(who, text) {
        fake.dispatch("MESSAGE_UPDATE", { ...lastDm.get(who), content: text, edited_timestamp: new Date().toISOString(), channel_type: ChannelType.DM });
      },
      async dmPhoto(who) {
        fake.injectDM({ author: users[who], content: "", attachments: photo });
      },
      async groupPhoto(who) {
        fake.injectMessage({ channelId: fake.ids.general, author: users[who], content: "", attachments: photo });
      },
      dmSent: (who) => texts(fake.dmChannelId(users[who])),
      groupSent: () => texts(fake.ids.general),
      dmTo: (who) => fake.dmChannelId(users[who]),
      groupTo: fake.ids.general,
      groupKey: `agent:main:discord:channel:${fake.ids.general}`,
      async drop() {
        fake.dropConnections(4000, "contract drop");
      },
      failNthSend(n) {
        fake.override("POST /channels/:id/messages", () => (++sends === n ? { status: 500, body: { message: "500: Internal Server Error", code: 0 } } : undefined));
      },
      async stop() {
        await harness.stop();
        await fake.stop();
      },
    };
  },
});

describe("Discord native slash commands", () => {
  let fake: FakeDiscord | undefined;
  let harness: Awaited<ReturnType<typeof startHarness>> | undefined;
  afterEach(async () => {
    await harness?.stop();
    await fake?.stop();
  });

  const replyText = (ix: { callbacks: Array<{ data?: Record<string, unknown> }>; edits: Array<{ body: Record<string, unknown> }> }) =>
    String(ix.edits.at(-1)?.body.content ?? ix.callbacks.at(-1)?.data?.content ?? "");

  it("R28 /send mode:off from the owner acts on the channel's session (ephemeral answer); a stranger's /send on is refused and changes nothing", async () => {
    fake = await new FakeDiscord().start();
    harness = await startHarness({
      config: { commands: { owners: [`discord:${fake.ids.alice}`] }, channels: { discord: { enabled: true, token: fake.token, apiBase: fake.apiBase } } },
    });
    await vi.waitFor(() => expect(fake!.registeredCommands().map((c) => c.name)).toContain("send"), { timeout: 5000 });
    const key = `agent:main:discord:channel:${fake.ids.general}`;

    const own = fake.injectSlashCommand({ userId: fake.ids.alice, channelId: fake.ids.general, name: "send", options: { mode: "off" } });
    await vi.waitFor(() => expect(replyText(own)).toBe("⚙️ Send policy set to off."), { timeout: 5000 });
    expect(own.callbacks[0]?.data?.flags).toBe(64);
    expect(harness.app.sessions.get(key)?.sendPolicy).toBe("deny");
    expect(harness.app.sessions.get(`agent:main:discord:slash:${fake.ids.alice}`)).toBeUndefined();

    const other = fake.injectSlashCommand({ userId: fake.ids.bob, channelId: fake.ids.general, name: "send", options: { mode: "on" } });
    await vi.waitFor(() => expect(replyText(other)).toMatch(/Not allowed/), { timeout: 5000 });
    expect(harness.app.sessions.get(key)?.sendPolicy).toBe("deny");

    fake.injectMessage({ channelId: fake.ids.general, author: fake.ids.bob, content: `<@${fake.ids.bot}> hello?` });
    await vi.waitFor(async () => {
      const entry = harness!.app.sessions.require(key);
      const said = await harness!.app.transcripts.readMessages(harness!.app.sessions.transcriptPath(entry));
      expect(said.some((m) => m.role === "user" && m.content.includes("hello?"))).toBe(true);
    });
    await harness.app.router.idle();
    expect(fake.sent(fake.ids.general)).toEqual([]);
  });
  it("the Discord adapter's log lines carry channel and accountId once each (operators grep JSON lines for them)", async () => {
    fake = await new FakeDiscord().start();
    const lines: string[] = [];
    harness = await startHarness({
      config: { channels: { discord: { enabled: true, token: fake.token, apiBase: fake.apiBase } } },
      log: pino({ level: "info" }, { write: (line: string) => void lines.push(line) }),
    });
    await vi.waitFor(() => expect(lines.find((l) => l.includes("discord: connected"))).toBeDefined(), { timeout: 5000 });
    const connected = lines.find((l) => l.includes("discord: connected")) ?? "";
    expect(connected.match(/"channel":/g)).toHaveLength(1);
    expect(connected.match(/"accountId":/g)).toHaveLength(1);
    expect(JSON.parse(connected)).toMatchObject({ channel: "discord", accountId: "default" });
  });
});

describe("Discord guild channels and the send policy", () => {
  let fake: FakeDiscord | undefined;
  let harness: Awaited<ReturnType<typeof startHarness>> | undefined;
  afterEach(async () => {
    await harness?.stop();
    await fake?.stop();
  });

  it("R27 R30 the spec's example rule { channel: discord, chatType: group } deny silences Discord guild channels (group chats, R2) but not DMs", async () => {
    fake = await new FakeDiscord().start();
    harness = await startHarness({
      config: {
        session: { sendPolicy: { rules: [{ match: { channel: "discord", chatType: "group" }, action: "deny" }], default: "allow" } },
        channels: { discord: { enabled: true, token: fake.token, apiBase: fake.apiBase } },
      },
    });
    const key = `agent:main:discord:channel:${fake.ids.general}`;
    fake.injectMessage({ channelId: fake.ids.general, author: fake.ids.bob, content: `<@${fake.ids.bot}> hello?` });
    await vi.waitFor(async () => {
      const entry = harness!.app.sessions.require(key);
      const said = await harness!.app.transcripts.readMessages(harness!.app.sessions.transcriptPath(entry));
      expect(said.some((m) => m.role === "user" && m.content.includes("hello?"))).toBe(true);
    }, { timeout: 5000 });
    await harness.app.router.idle();
    expect(fake.sent(fake.ids.general)).toEqual([]);
    expect(harness.model.requests).toHaveLength(0);

    fake.injectDM({ author: fake.ids.bob, content: "and here?" });
    await vi.waitFor(() => expect(fake!.sent(fake!.dmChannelId(fake!.ids.bob)).map((m) => m.content)).toEqual(["echo: and here?"]), { timeout: 5000 });
  });
});

describe("Discord and a store that cannot write", () => {
  let fake: FakeDiscord | undefined;
  let harness: Awaited<ReturnType<typeof startHarness>> | undefined;
  afterEach(async () => {
    await harness?.stop();
    await fake?.stop();
  });

  it("a message arriving while the store refuses writes (a full disk) is answered once the store writes again: Discord does not deliver it twice", async () => {
    fake = await new FakeDiscord().start();
    harness = await startHarness({ config: { channels: { discord: { enabled: true, token: fake.token, apiBase: fake.apiBase } } } });
    const db = await openStoreDb(harness.stateDir);
    try {
      await db.exec("CREATE TRIGGER test_disk_full BEFORE INSERT ON keyv WHEN NEW.key LIKE 'inbound:%' BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END");
      fake.injectDM({ author: fake.ids.bob, content: "while the disk is full" });
      fake.injectDM({ author: fake.ids.bob, content: "and another" });
      const discord = () => [...harness!.app.adapters.values()].find((a) => a.channel === "discord")!;
      // The operator sees why in `status`.
      await vi.waitFor(() => expect(discord().health().lastError).toMatch(/database or disk is full/), { timeout: 5000 });
      expect(harness.model.requests).toHaveLength(0);
      await db.exec("DROP TRIGGER test_disk_full");
    } finally {
      await db.close();
    }
    const dm = fake.dmChannelId(fake.ids.bob);
    await vi.waitFor(() => expect(fake!.sent(dm).map((m) => m.content)).toEqual(["echo: while the disk is full", "echo: and another"]), { timeout: 10_000, interval: 20 });
    expect(harness.model.requests).toHaveLength(2);
  });
});
