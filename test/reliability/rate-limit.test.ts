/**
 * Bursts against the platforms' published send limits: 500 replies to one Telegram group
 * (20 messages/minute per group, 30/s overall) and to one Discord channel (5 per 5 s per channel,
 * 50/s per bot), driven end to end — inbound through the real telegraf and discord.js adapters,
 * a model run per message, replies through the outbox — against fakes that answer 429 the moment
 * a limit is exceeded. No 429 may come back, and every reply must arrive, in order.
 *
 * Time: 500 replies to a Telegram group take 25 minutes of real time, so the outbox and the
 * Telegram fake share a clock running 1000× faster (their windows are the real ones, measured in
 * that clock). The Discord fake counts in wall-clock time — @discordjs/rest waits out its 429s with
 * real timers, so `retry-after` has to be real seconds — so its rules are the published ones scaled
 * by the same factor (5 per 5 ms, 50 per 1 ms), read from the shared clock's source (wallNow): the
 * same limits, over the same intervals the outbox paces with.
 *
 * Discord's bucket headers are off: the Discord fake leaves `x-ratelimit-*` off successful sends
 * (bucketHeadersOnSuccess: false). With them, @discordjs/rest sees the channel bucket run dry and
 * paces that route itself, so an outbox with a wrong Discord limit (or none) would still collect
 * no 429 and the test would not be testing our limiter. Without them the outbox's own Discord
 * limit (5 per 5 s per channel) is the only thing between the burst and the fake's 429s, just as
 * its Telegram limit is for Telegram, which sends no such headers. The fake still answers 429 past
 * the limit, and the arrival times of the Discord sends are checked against the rule as well.
 */
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import pino from "pino";
import { afterAll, describe, expect, it } from "vitest";
import { parseConfig } from "../../src/config/load.js";
import { createFullDaemon, type FullDaemon } from "../../src/full-daemon.js";
import { FakeDiscord, PUBLISHED_RATE_LIMITS } from "../fakes/discord-api.js";
import { FakeModelServer } from "../fakes/model-server.js";
import { FakeTelegramBotApi, fakeUser, groupChat, waitFor } from "../fakes/telegram-bot-api.js";
import { acceleratedClock } from "../helpers/accelerated-clock.js";

const BURST = 500;
const SPEED = 1000;

const cleanups: Array<() => Promise<void> | void> = [];
afterAll(async () => {
  for (const fn of cleanups.splice(0).reverse()) await fn();
});

describe("rate limits (accelerated clock shared by the outbox and the platform fakes)", () => {
  it(`rate-limit: a burst of ${BURST} replies to one Telegram group and one Discord channel gets zero 429s from the outbox's own pacing (Discord bucket headers off) and arrives complete and in order`, async () => {
    const clock = acceleratedClock(SPEED);
    const dir = mkdtempSync(path.join(os.tmpdir(), "sb-ratelimit-"));
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    const model = new FakeModelServer();
    const baseUrl = await model.start();
    cleanups.push(() => model.stop());
    const telegram = new FakeTelegramBotApi({ enforceRateLimits: true, now: clock.now });
    const apiRoot = await telegram.start();
    cleanups.push(() => telegram.stop());
    const discord = await new FakeDiscord({
      enforceRateLimits: {
        perChannel: { count: PUBLISHED_RATE_LIMITS.perChannel.count, intervalMs: PUBLISHED_RATE_LIMITS.perChannel.intervalMs / SPEED },
        global: { count: PUBLISHED_RATE_LIMITS.global.count, intervalMs: PUBLISHED_RATE_LIMITS.global.intervalMs / SPEED },
      },
      // Off so that @discordjs/rest cannot pace the channel itself (see the doc comment above).
      bucketHeadersOnSuccess: false,
      now: clock.wallNow,
    }).start();
    cleanups.push(() => discord.stop());

    const config = parseConfig(
      {
        stateDir: path.join(dir, "data"),
        log: { level: "silent" },
        gateway: { port: 0 },
        models: { providers: { fake: { baseUrl, models: [{ id: "m" }] } } },
        agents: { defaults: { model: "fake/m", maxConcurrent: 8 } },
        channels: {
          webchat: { enabled: false },
          telegram: { enabled: true, botToken: telegram.token, apiRoot, requireMention: false },
          discord: { enabled: true, token: discord.token, apiBase: discord.apiBase, requireMention: false },
        },
      },
      "<rate-limit test>",
      {},
    );
    const daemon: FullDaemon = createFullDaemon({ config, log: pino({ level: "silent" }), env: {}, outboxClock: clock });
    await daemon.start();
    cleanups.push(() => daemon.stop());

    const group = groupChat(-100_555_0001, "Burst group");
    const people = [fakeUser("Ann"), fakeUser("Ben"), fakeUser("Cy")];
    for (let i = 0; i < BURST; i++) {
      telegram.injectText({ chat: group, from: people[i % people.length], text: `tg ${i}` });
      discord.injectMessage({ channelId: discord.ids.general, author: i % 2 ? discord.ids.alice : discord.ids.bob, content: `dc ${i}` });
    }

    const tgReplies = () => telegram.sent.filter((m) => m.chat.id === group.id).map((m) => m.text ?? "");
    const dcReplies = () => discord.sent(discord.ids.general).map((m) => m.content);
    // Stops at the first 429 too: one is already a failure, and the retries would only add time.
    await waitFor(
      () => (tgReplies().length >= BURST && dcReplies().length >= BURST) || telegram.rateLimitHits > 0 || discord.rateLimitHits > 0,
      60_000,
      "all replies (or a 429)",
    );

    expect(telegram.rateLimitHits, "Telegram 429s").toBe(0);
    expect(discord.rateLimitHits, "Discord 429s").toBe(0);
    // The per-channel rule itself, on the outbox's (accelerated) clock: no 5,000 ms holds more
    // than 5 of the Discord channel's sends.
    const dcTimes = discord.callsTo("POST /channels/:id/messages").filter((c) => c.params.id === discord.ids.general).map((c) => c.at);
    const { count, intervalMs } = PUBLISHED_RATE_LIMITS.perChannel;
    const crowded = dcTimes.flatMap((at, i) => (i >= count && (at - dcTimes[i - count]!) * SPEED < intervalMs ? [i] : []));
    expect(crowded, `Discord sends preceded by ${count} others within ${intervalMs} ms`).toEqual([]);
    expect(tgReplies()).toEqual(Array.from({ length: BURST }, (_, i) => `echo: tg ${i}`));
    expect(dcReplies()).toEqual(Array.from({ length: BURST }, (_, i) => `echo: dc ${i}`));
    // The limits were really in play: at 20/min, 500 group messages need ≥ 24 minutes of (accelerated) time.
    const tgTimes = telegram.callsTo("sendMessage").filter((c) => Number(c.body.chat_id) === group.id).map((c) => c.at);
    expect(tgTimes[tgTimes.length - 1] - tgTimes[0]).toBeGreaterThanOrEqual(((BURST - 20) / 20) * 60_000);
  }, 90_000);
});
