/**
 * Bursts against the platforms' published send limits, driven end to end — inbound through the
 * real telegraf and discord.js adapters, a model run per message, replies through the outbox —
 * against fakes that answer 429 the moment a limit is exceeded: 500 replies to one Telegram group
 * (20 messages/minute per group), 500 to one Discord channel (5 per 5 s per channel), 50 to one
 * Telegram private chat (1 per second) and 400 spread over 40 private chats (30 per second
 * overall). No 429 may come back, every reply must arrive, in order, and the sends must be paced
 * at the limit under test, close to the minimum span it allows: a limit that does not bind is one
 * a looser (or missing) limiter would pass as well. The 40 chats must get the global limit in
 * turn, none falling behind the others.
 *
 * Time: the outbox and the fakes run on an accelerated clock (a Telegram group's 500 replies take
 * 25 minutes of real time). Speeding the clock up changes the ratio the limiter is tested at: in
 * real time a daemon answering ~100–250 messages a second outruns every one of these limits, but
 * on a clock 1000× faster the limits outrun the daemon and never bind (a mutation audit found the
 * Discord limits could be removed with the test still passing). So each burst gets its own daemon
 * and speed, and the outbox's clock is held while the burst is answered: the first window's worth
 * of replies goes out, the rest pile up behind it as they would in real time, and once all are
 * queued the clock runs and the limiter alone paces them. The fakes' clock is never held — the
 * outbox, seeing the held stretch as no time at all, can only over-estimate how full a platform
 * window is, never under-estimate it. A limiter that lets too much through in the first window
 * collects its 429 before the clock even runs.
 *
 * Spans are measured on the fakes' (accelerated) clock, from the first send after the held window
 * to the last, against the minimum the published limit allows for them: at most PACE_SLACK times
 * that, or the daemon's own speed, not the limit, set the pace. Each speed leaves the outbox
 * several times the real time per send it needs.
 *
 * Discord: the fake counts in wall-clock time — @discordjs/rest waits out its 429s with real
 * timers, so `retry-after` has to be real seconds — so its rules are the published ones scaled by
 * the clock's speed, read from the clock's source (wallNow). @discordjs/rest also allows itself
 * only 50 requests per real second, which above ~45× would be what paced a 5-per-5-s channel; the
 * Discord burst runs at 40×, which makes it the slowest of the four (~12 s). Discord's own global
 * limit (50/s) is not tested: above 1× that client cap is always the tighter one.
 *
 * Discord's bucket headers are off: the Discord fake leaves `x-ratelimit-*` off successful sends
 * (bucketHeadersOnSuccess: false). With them, @discordjs/rest sees the channel bucket run dry and
 * paces that route itself, so an outbox with a wrong Discord limit (or none) would still collect
 * no 429 and the test would not be testing our limiter. Without them the outbox's own Discord
 * limit is the only thing between the burst and the fake's 429s, as its Telegram limits are for
 * Telegram, which sends no such headers.
 */
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import pino from "pino";
import { afterEach, describe, expect, it } from "vitest";
import { parseConfig } from "../../src/config/load.js";
import { createFullDaemon, type FullDaemon } from "../../src/full-daemon.js";
import { FakeDiscord, PUBLISHED_RATE_LIMITS } from "../fakes/discord-api.js";
import { FakeModelServer } from "../fakes/model-server.js";
import { FakeTelegramBotApi, type FakeChat, fakeUser, groupChat, privateChat, waitFor } from "../fakes/telegram-bot-api.js";
import { acceleratedClock, type AcceleratedClock } from "../helpers/accelerated-clock.js";

const BURST = 500;
/** Telegram's published limits (core.telegram.org/bots/faq), which the Telegram fake enforces. */
const TELEGRAM = { group: { count: 20, intervalMs: 60_000 }, privateChat: { count: 1, intervalMs: 1000 }, global: { count: 30, intervalMs: 1000 } };
/** How far above the limit's minimum a span may run: timer and round-trip lag per paced send. */
const PACE_SLACK = 1.3;
/**
 * How many replies one of the 40 chats may have sent beyond another still waiting: taking turns
 * puts them 1 apart; 2 leaves room for round trips that reorder two chats ready at one instant.
 */
const FAIR_LEAD = 2;

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const fn of cleanups.splice(0).reverse()) await fn();
});

/**
 * The outbox's clock: `base` minus the time it was held. Held from the start, so that the first
 * window's worth of replies goes out at one instant and the rest of the burst queues behind it.
 */
function heldClock(base: AcceleratedClock) {
  let heldAt: number | undefined = base.now();
  let offset = 0;
  let resume!: () => void;
  const resumed = new Promise<void>((r) => (resume = r));
  return {
    now: () => heldAt ?? base.now() - offset,
    async sleep(ms: number) {
      // A wait decided while held starts counting at the release, when the clock moves again.
      if (heldAt !== undefined) await resumed;
      await base.sleep(ms);
    },
    release() {
      if (heldAt === undefined) return;
      offset = base.now() - heldAt;
      heldAt = undefined;
      resume();
    },
  };
}

async function startRig(opts: { speed: number; telegram: boolean; discord: boolean }) {
  const clock = acceleratedClock(opts.speed);
  const outboxClock = heldClock(clock);
  const dir = mkdtempSync(path.join(os.tmpdir(), "sb-ratelimit-"));
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
  const model = new FakeModelServer();
  const baseUrl = await model.start();
  cleanups.push(() => model.stop());
  const telegram = new FakeTelegramBotApi({ enforceRateLimits: true, now: clock.now });
  const apiRoot = await telegram.start();
  cleanups.push(() => telegram.stop());
  const { perChannel, global } = PUBLISHED_RATE_LIMITS;
  const discord = await new FakeDiscord({
    enforceRateLimits: {
      perChannel: { count: perChannel.count, intervalMs: perChannel.intervalMs / opts.speed },
      global: { count: global.count, intervalMs: global.intervalMs / opts.speed },
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
        telegram: { enabled: opts.telegram, botToken: telegram.token, apiRoot, requireMention: false },
        discord: { enabled: opts.discord, token: discord.token, apiBase: discord.apiBase, requireMention: false },
      },
    },
    "<rate-limit test>",
    {},
  );
  const daemon: FullDaemon = createFullDaemon({ config, log: pino({ level: "silent" }), env: {}, outboxClock });
  // After the daemon has stopped: a test that failed while the clock was held leaves no lane waiting.
  cleanups.push(() => outboxClock.release());
  await daemon.start();
  cleanups.push(() => daemon.stop());
  const hits = () => telegram.rateLimitHits + discord.rateLimitHits;

  return {
    telegram,
    discord,
    /**
     * Holds the outbox's clock until every one of `total` replies is queued (or sent, `delivered`
     * counting those: the first window's), then lets it run until all are delivered. Stops at the
     * first 429 too: one is already a failure, and the retries would only add time.
     */
    async deliver(total: number, delivered: () => number) {
      await waitFor(() => (model.requests.length >= total && daemon.app.outbox.pending + delivered() === total) || hits() > 0, 60_000, "every reply queued (or a 429)");
      outboxClock.release();
      await waitFor(() => delivered() >= total || hits() > 0, 60_000, "all replies (or a 429)");
    },
  };
}

/**
 * `times` (sorted, on `msPerMs`× the fake's clock) are sends under "at most `count` per
 * `intervalMs`"; the first `count` went out while the outbox's clock was held. The rest may not
 * take much longer than the rule's minimum for them: the limit, not the daemon, set their pace.
 * (That they took at least the minimum is the rule itself, which the fakes' 429s already check.)
 */
function expectPacedAt(times: number[], rule: { count: number; intervalMs: number }, msPerMs: number, what: string) {
  const paced = times.slice(rule.count);
  const span = (paced[paced.length - 1]! - paced[0]!) * msPerMs;
  const minimum = Math.floor((paced.length - 1) / rule.count) * rule.intervalMs;
  expect(span, `${what}: span (ms) of the ${paced.length} sends after the first window, vs ${PACE_SLACK} × the rule's minimum of ${minimum} ms`).toBeLessThanOrEqual(minimum * PACE_SLACK);
}

/**
 * One Telegram chat's burst of `texts` (already injected) answered through the rig: zero 429s,
 * every reply in order, the sends paced at `rule`.
 */
async function expectTelegramChatBurst(rig: Awaited<ReturnType<typeof startRig>>, chat: FakeChat, texts: string[], rule: { count: number; intervalMs: number }, what: string) {
  const { telegram, deliver } = rig;
  const replies = () => telegram.sent.filter((m) => m.chat.id === chat.id).map((m) => m.text ?? "");
  await deliver(texts.length, () => replies().length);

  expect(telegram.rateLimitHits, "Telegram 429s").toBe(0);
  expect(replies()).toEqual(texts.map((t) => `echo: ${t}`));
  const times = telegram.callsTo("sendMessage").filter((c) => Number(c.body.chat_id) === chat.id).map((c) => c.at);
  expectPacedAt(times, rule, 1, what);
}

describe("rate limits (a burst queued behind the outbox's own pacing, against fakes that answer 429 past the published limits)", () => {
  it(`rate limits: ${BURST} replies to one Telegram group — zero 429s, in order, paced at the group limit (20/min)`, async () => {
    // 200×: 20 per simulated minute is 67 sends a real second, and each send of a window of 20
    // has 15 ms of real time to go out in before the next window opens.
    const rig = await startRig({ speed: 200, telegram: true, discord: false });
    const group = groupChat(-100_555_0001, "Burst group");
    const people = [fakeUser("Ann"), fakeUser("Ben"), fakeUser("Cy")];
    const texts = Array.from({ length: BURST }, (_, i) => `tg ${i}`);
    texts.forEach((text, i) => rig.telegram.injectText({ chat: group, from: people[i % people.length]!, text }));
    await expectTelegramChatBurst(rig, group, texts, TELEGRAM.group, "Telegram group");
  }, 90_000);

  it(`rate limits: ${BURST} replies to one Discord channel — zero 429s, in order, paced at the channel limit (5 per 5 s) by the outbox itself (bucket headers off)`, async () => {
    // 40×: 5 per 5 simulated seconds is at most 40 sends in any real second, under the 50 that
    // @discordjs/rest allows itself, so that cap never does the pacing for us.
    const speed = 40;
    const { discord, deliver } = await startRig({ speed, telegram: false, discord: true });
    for (let i = 0; i < BURST; i++) discord.injectMessage({ channelId: discord.ids.general, author: i % 2 ? discord.ids.alice : discord.ids.bob, content: `dc ${i}` });

    const replies = () => discord.sent(discord.ids.general).map((m) => m.content);
    await deliver(BURST, () => replies().length);

    expect(discord.rateLimitHits, "Discord 429s").toBe(0);
    expect(replies()).toEqual(Array.from({ length: BURST }, (_, i) => `echo: dc ${i}`));
    const times = discord.callsTo("POST /channels/:id/messages").filter((c) => c.params.id === discord.ids.general).map((c) => c.at);
    // The fake counts in fixed windows (as Discord does): the rule must hold for every window.
    const { count, intervalMs } = PUBLISHED_RATE_LIMITS.perChannel;
    const crowded = times.flatMap((at, i) => (i >= count && (at - times[i - count]!) * speed < intervalMs ? [i] : []));
    expect(crowded, `Discord sends preceded by ${count} others within ${intervalMs} ms`).toEqual([]);
    expectPacedAt(times, PUBLISHED_RATE_LIMITS.perChannel, speed, "Discord channel");
  }, 90_000);

  it("rate limits: 50 replies to one Telegram private chat — zero 429s, in order, paced at the private-chat limit (1/s)", async () => {
    // 10×: every send waits for the one before, so each adds its round trip to the span; at 10×
    // that is a few percent of a simulated second.
    const rig = await startRig({ speed: 10, telegram: true, discord: false });
    const dee = fakeUser("Dee");
    const chat = privateChat(dee);
    const texts = Array.from({ length: 50 }, (_, i) => `pm ${i}`);
    for (const text of texts) rig.telegram.injectText({ chat, from: dee, text });
    await expectTelegramChatBurst(rig, chat, texts, TELEGRAM.privateChat, "Telegram private chat");
  }, 90_000);

  it("rate limits: 400 replies across 40 Telegram private chats — zero 429s, each chat in order, the global limit (30/s) shared out in turn, paced at it", async () => {
    // 40 chats at 1/s each could take 40 a second: only the global 30/s holds them back. 2×: a
    // send keeps its place in the global bucket from its grant until a second after its answer,
    // so round trips lengthen every place; at 2× one of a few real milliseconds adds under 1%.
    const chats = 40;
    const perChat = 10;
    const total = chats * perChat;
    const { telegram, deliver } = await startRig({ speed: 2, telegram: true, discord: false });
    const people = Array.from({ length: chats }, (_, c) => fakeUser(`P${c}`));
    const privates: FakeChat[] = people.map((p) => privateChat(p));
    for (let i = 0; i < perChat; i++) for (let c = 0; c < chats; c++) telegram.injectText({ chat: privates[c]!, from: people[c]!, text: `p${c} ${i}` });

    await deliver(total, () => telegram.sent.length);

    expect(telegram.rateLimitHits, "Telegram 429s").toBe(0);
    const byChat = privates.map((chat) => telegram.sent.filter((m) => m.chat.id === chat.id).map((m) => m.text ?? ""));
    expect(byChat).toEqual(privates.map((_, c) => Array.from({ length: perChat }, (_, i) => `echo: p${c} ${i}`)));
    const calls = telegram.callsTo("sendMessage");
    // The chats take the global limit in turn, each as soon as its own second allows: at no point
    // has one sent more than FAIR_LEAD replies more than another that still has some queued.
    // Polling lanes took it in whatever order their timers fired, and some chats fell 5 to 7
    // replies behind others and finished seconds after them.
    const sentBy = new Map(privates.map((chat) => [chat.id, 0]));
    let widestLead = 0;
    for (const call of calls) {
      const id = Number(call.body.chat_id);
      sentBy.set(id, sentBy.get(id)! + 1);
      const counts = [...sentBy.values()];
      const waiting = counts.filter((n) => n < perChat);
      if (waiting.length > 0) widestLead = Math.max(widestLead, Math.max(...counts) - Math.min(...waiting));
    }
    expect(widestLead, "most replies one chat had sent beyond another chat with replies still queued").toBeLessThanOrEqual(FAIR_LEAD);
    // While 31 chats or more still have replies queued, no more than 30 of them can have sent in
    // the last second, so at least one chat's own limit lets it send: only the global limit can
    // hold the burst back. Once 30 or fewer are left (with the limit shared in turn, only in the
    // last round), the chats' limits take over and the pace says nothing about the global limit.
    const left = new Map(privates.map((chat) => [chat.id, perChat]));
    let saturated = 0;
    while (saturated < calls.length && [...left.values()].filter((n) => n > 0).length > TELEGRAM.global.count) {
      const id = Number(calls[saturated]!.body.chat_id);
      left.set(id, left.get(id)! - 1);
      saturated++;
    }
    expectPacedAt(calls.slice(0, saturated).map((c) => c.at), TELEGRAM.global, 1, "Telegram, all chats, while more than 30 had replies queued");
  }, 90_000);
});
