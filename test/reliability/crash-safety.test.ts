/**
 * Crash safety, end to end: the daemon runs as a child process (`node src/bin.js start`, SQLite
 * state directory) with the real telegraf adapter polling the Telegram Bot API fake, and the fake
 * model server answering `echo: <text>` — both in this process, so they outlive every crash. A
 * steady stream of messages keeps arriving while the daemon is killed with SIGKILL at seeded
 * random points and restarted; afterwards every message must have been answered exactly once.
 *
 * The kills must find work in flight, or the recovery paths go untested (a fake answering
 * instantly left the daemon idle at nearly every kill): the model answers after 0–100 ms and
 * sendMessage after 50–250 ms, so a kill catches inbound messages mid-run and replies queued or
 * mid-send. The test reads the state directory after every kill and fails if too few kills left
 * such work behind. Telegram redelivery is exercised on purpose too: the Telegram offset commits
 * with the inbound records, so a kill alone almost never makes Telegram send an update again;
 * after each start the test re-sends one message already answered (same message_id, new
 * update_id), which the daemon's dedupe must ignore — no second reply, no second transcript line.
 *
 * The one window the design cannot close on Telegram (no idempotency key on sendMessage) is a
 * kill between the send's journal line and its request reaching the kernel — tens of µs, since the
 * line is written on the tick queue just ahead of the request's flush (send-journal.ts,
 * adapters/telegram/index.ts): the outbox then records `unknown_after_send` and does not send again
 * (a duplicate is the worse failure). A kill after the store's `attempted` mark but before the
 * journal line is not that window: the chunk is sent after the restart, and must be answered. The
 * test tells the window apart exactly — the kill left the send started with its journal line
 * written, and the fake never received the request — and counts it separately and prints it,
 * instead of letting it pass as "answered" or fail as a lost message. Transcripts must hold each
 * message and its answer once: a message resumed after its run had answered is not run again.
 * (A kill while the fake holds a received send is not that window: like Telegram, the fake
 * delivers what it received, and the restarted daemon must not send it again.)
 */
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { MAX_INTERRUPTED_STARTS } from "../../src/delivery/outbox.js";
import { parseJournal } from "../../src/delivery/send-journal.js";
import { MAX_RESUMES } from "../../src/inbound/router.js";
import { echoLastUser, FakeModelServer } from "../fakes/model-server.js";
import { FakeTelegramBotApi, fakeUser, groupChat, privateChat, type FakeChat, type FakeMessage, type FakeUser } from "../fakes/telegram-bot-api.js";
import { spawnDaemon, writeConfig, type DaemonProcess } from "../helpers/daemon-process.js";
import { seedFrom, seededRandom } from "../helpers/seeded-random.js";
import { checkState } from "../helpers/state-check.js";

/** `SB_CRASH_SEED=<integer>` kills at other points, with other traffic. */
const SEED = seedFrom("SB_CRASH_SEED", 0x5eed_2026);
const CYCLES = 12;
const MESSAGES_PER_SECOND = 60;
/** How long the fake model takes per reply, and the fake Telegram per sendMessage (ms, seeded). */
const MODEL_DELAY_MS: [number, number] = [0, 100];
const SEND_DELAY_MS: [number, number] = [50, 250];
/** Kills that must leave each kind of unfinished work behind, or the run proved nothing. */
const MIN_KILLS_WITH_WORK = 3;

interface Sent {
  text: string;
  inboundId: string;
  chatId: number;
  /** The message as the fake delivered it, to deliver it again. */
  message: FakeMessage;
  redelivered?: boolean;
}

interface OutboxRow {
  id: string;
  target: { to: string; threadId?: string };
  state: string;
  attempted?: number;
  unknownChunks?: number[];
  interruptions?: number;
}

/** What one kill left in the state directory. */
interface AfterKill {
  /** ms after spawn, and whether the daemon had logged "listening" by then. */
  at: number;
  listening: boolean;
  outboxQueued: number;
  outboxSending: number;
  /** Ids of outbox records whose send had started (`attempted`) and was not acknowledged. */
  midSend: string[];
  /** Those of them whose chunk has its send-journal line: the platform call may have begun. */
  journaled: string[];
  inboundUnfinished: number;
  /** The highest resume count of an inbound record (attempts begun again at a start; above MAX_RESUMES it is given up). */
  maxResumes: number;
  /** The highest count of starts that found an outbox record's send interrupted (at MAX_INTERRUPTED_STARTS it is failed). */
  maxInterruptions: number;
  /** Whether the unfinished work differs from what the previous kill left (else it proves nothing new). */
  changed: boolean;
}

const TERMINAL = new Set(["sent", "suppressed", "failed"]);
/** Inbound records of a state read not yet done, as "key: state". */
const unfinishedInbound = (rows: Array<[string, unknown]> = []) =>
  rows.filter(([, v]) => (v as { state: string }).state !== "done").map(([k, v]) => `${k}: ${(v as { state: string }).state}`);
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

const cleanups: Array<() => Promise<void> | void> = [];
afterAll(async () => {
  for (const fn of cleanups.splice(0).reverse()) await fn();
});

describe("crash safety (daemon child process, SIGKILL, restart)", () => {
  it(`crash-safety: every inbound answered exactly once across ${CYCLES} SIGKILL restarts with work in flight, redeliveries ignored; entries and transcripts intact`, async () => {
    // One generator per concern. The kill schedule is drawn up front from its own, so it replays
    // exactly; the others are consumed at timer- and network-driven moments that differ per run.
    const killRand = seededRandom(SEED);
    const schedule = Array.from({ length: CYCLES }, () => {
      // About one kill in four counts from the spawn and mostly lands during start-up (loading,
      // resuming); the rest count from the moment Telegram is connected (the outbox opens then)
      // and land while the daemon works: reconciling, running, sending.
      const duringStart = killRand.next() < 0.25;
      return { duringStart, ms: duringStart ? killRand.int(100, 700) : killRand.int(0, 1200), pauseMs: killRand.int(0, 120) };
    });
    const speakerRand = seededRandom(SEED + 1);
    const modelRand = seededRandom(SEED + 2);
    const sendRand = seededRandom(SEED + 3);

    const dir = mkdtempSync(path.join(os.tmpdir(), "sb-crash-"));
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    const model = new FakeModelServer(async (req, index) => ({ ...(await echoLastUser(req, index)), delayMs: modelRand.int(...MODEL_DELAY_MS) }));
    const baseUrl = await model.start();
    cleanups.push(() => model.stop());
    const api = new FakeTelegramBotApi();
    // Received at once (recorded in `calls`), answered and delivered later — also when the daemon
    // died meanwhile, as Telegram does with a request it received.
    api.override("sendMessage", async () => {
      await sleep(sendRand.int(...SEND_DELAY_MS));
      return undefined;
    });
    const apiRoot = await api.start();
    cleanups.push(() => api.stop());
    const stateDir = path.join(dir, "data");
    const config = writeConfig(dir, {
      stateDir,
      log: { level: "info" },
      gateway: { port: 0 },
      models: { providers: { fake: { baseUrl, models: [{ id: "m" }] } } },
      // A run for every chat at once: with the model taking its time, the default pool (4) would
      // fall behind the stream and the backlog, not the kills, would set the pace.
      agents: { defaults: { model: "fake/m", maxConcurrent: 16 } },
      session: { dmScope: "per-channel-peer" },
      channels: {
        webchat: { enabled: false },
        // The fake does not enforce limits here; the outbox paces to these (rate-limit.test.ts covers pacing).
        telegram: { enabled: true, botToken: api.token, apiRoot, requireMention: false, rateLimit: { perChatPerSecond: 50, perChatPerMinute: 3000, globalPerSecond: 1000 } },
      },
    });

    const users: FakeUser[] = Array.from({ length: 12 }, (_, i) => fakeUser(`User${i}`));
    const chats: Array<{ chat: FakeChat; from: () => FakeUser }> = [
      ...users.map((u) => ({ chat: privateChat(u), from: () => u })),
      { chat: groupChat(-4_200_001, "Crash Group"), from: () => speakerRand.pick(users) },
    ];
    const sent: Sent[] = [];
    let n = 0;
    const inject = () => {
      const { chat, from } = chats[n % chats.length];
      const text = `m${n++}`;
      const update = api.injectText({ chat, from: from(), text });
      const message = update.message as FakeMessage;
      sent.push({ text, chatId: message.chat.id, inboundId: `telegram:default:${message.chat.id}:${message.message_id}`, message });
    };
    const stream = setInterval(inject, 1000 / MESSAGES_PER_SECOND);
    cleanups.push(() => clearInterval(stream));

    const replies = () => {
      const counts = new Map<string, number>();
      for (const m of api.sent) if (m.text?.startsWith("echo: ")) counts.set(m.text.slice(6), (counts.get(m.text.slice(6)) ?? 0) + 1);
      return counts;
    };
    // Telegram delivering a message again (same message_id, new update_id): the oldest answered
    // one not yet re-sent, so its inbound record is long done and only the dedupe can stop it.
    let lastRedeliveryUpdateId = 0;
    const redeliverAnswered = () => {
      const answered = replies();
      const again = sent.find((s) => !s.redelivered && answered.has(s.text));
      if (!again) return;
      again.redelivered = true;
      lastRedeliveryUpdateId = api.pushUpdate({ message: again.message }).update_id;
    };

    let daemon: DaemonProcess | undefined;
    cleanups.push(() => daemon?.kill("SIGKILL"));
    const afterKills: AfterKill[] = [];
    let previousLeft = "";
    for (const [cycle, kill] of schedule.entries()) {
      daemon = spawnDaemon(config);
      redeliverAnswered();
      // Kill anywhere: while starting, while resuming, while busy; never waiting for a "safe" moment.
      let listenedAt: number | undefined;
      void daemon.listening.then(
        ({ ms }) => (listenedAt = ms),
        () => undefined,
      );
      const spawnedAt = performance.now();
      const due = kill.duringStart ? sleep(kill.ms) : daemon.logged("telegram connected").then(() => sleep(kill.ms));
      await Promise.race([due, daemon.exited]);
      expect(daemon.child.exitCode, `daemon died on its own in cycle ${cycle}:\n${daemon.output().slice(-2000)}`).toBeNull();
      daemon.kill("SIGKILL");
      const at = Math.round(performance.now() - spawnedAt);
      const { signal } = await daemon.exited;
      expect(signal).toBe("SIGKILL");

      // What the kill left behind: it must be intact, and (over the run) it must include work.
      const after: AfterKill = { at, listening: listenedAt !== undefined, outboxQueued: 0, outboxSending: 0, midSend: [], journaled: [], inboundUnfinished: 0, maxResumes: 0, maxInterruptions: 0, changed: false };
      if (existsSync(path.join(stateDir, "switchboard.sqlite"))) {
        const st = await checkState(stateDir, { spaces: ["outbox", "inbound"], killed: true });
        expect(st.problems, `state directory after SIGKILL ${cycle}`).toEqual([]);
        const outboxRows = (st.spaces.get("outbox") ?? []).map(([, v]) => v as OutboxRow);
        after.outboxQueued = outboxRows.filter((r) => r.state === "queued").length;
        after.outboxSending = outboxRows.filter((r) => r.state === "sending").length;
        const midSend = outboxRows.filter((r) => r.state === "sending" && r.attempted !== undefined);
        after.midSend = midSend.map((r) => r.id);
        const journalFile = path.join(stateDir, "outbox-journal.jsonl");
        const journal = parseJournal(existsSync(journalFile) ? readFileSync(journalFile, "utf8") : "");
        after.journaled = midSend.filter((r) => journal.get(r.id)?.has(r.attempted as number)).map((r) => r.id);
        // One lane per destination sends one chunk at a time, so a kill interrupts at most one send
        // to each; a second means an earlier interrupted send was never picked up again.
        const byDestination = new Map<string, string[]>();
        for (const r of midSend) {
          const to = `${r.target.to}|${r.target.threadId ?? ""}`;
          byDestination.set(to, [...(byDestination.get(to) ?? []), r.id]);
        }
        const doubled = [...byDestination].filter(([, ids]) => ids.length > 1).map(([to, ids]) => `${to}: ${ids.join(", ")}`);
        expect(doubled, `destinations with more than one send mid-flight after SIGKILL ${cycle}`).toEqual([]);
        const inboundLeft = unfinishedInbound(st.spaces.get("inbound"));
        after.inboundUnfinished = inboundLeft.length;
        after.maxResumes = Math.max(0, ...(st.spaces.get("inbound") ?? []).map(([, v]) => (v as { resumes?: number }).resumes ?? 0));
        after.maxInterruptions = Math.max(0, ...outboxRows.map((r) => r.interruptions ?? 0));
        const left = JSON.stringify([outboxRows.filter((r) => !TERMINAL.has(r.state)), inboundLeft]);
        after.changed = left !== previousLeft;
        previousLeft = left;
      }
      afterKills.push(after);
      await sleep(kill.pauseMs);
    }
    clearInterval(stream);

    // The last start runs until every message has its answer — except a reply a kill caught
    // mid-send, after its journal line, that never reached the fake (never re-sent: checked
    // against the store below) — or nothing moves for 15 s.
    daemon = spawnDaemon(config);
    redeliverAnswered();
    await daemon.listening;
    const interrupted = new Set(afterKills.flatMap((k) => k.journaled));
    const received = () => new Set(api.callsTo("sendMessage").map((c) => c.body.text));
    const settled = () => {
      const answered = replies();
      const got = received();
      return sent.filter((s) => answered.has(s.text) || (interrupted.has(`reply:${s.inboundId}`) && !got.has(`echo: ${s.text}`))).length;
    };
    let last = -1;
    let still = Date.now();
    for (;;) {
      const done = settled();
      if (done !== last) {
        last = done;
        still = Date.now();
      }
      if (done === sent.length || Date.now() - still > 15_000) break;
      await sleep(50);
    }
    daemon.kill("SIGTERM");
    const stopped = await daemon.exited;
    expect(stopped.code, daemon.output().slice(-2000)).toBe(0);

    // ---- every message answered exactly once
    const counts = replies();
    const duplicated = sent.filter((s) => (counts.get(s.text) ?? 0) > 1).map((s) => `${s.text}×${counts.get(s.text)}`);
    const unanswered = sent.filter((s) => !counts.has(s.text));
    const state = await checkState(stateDir, { spaces: ["outbox", "inbound"] });
    const outbox = new Map(state.spaces.get("outbox")?.map(([k, v]) => [k, v as OutboxRow]));
    // Unanswered because the kill hit between the journal line and the platform receiving the
    // send: the daemon recorded that it cannot know (unknown_after_send), the fake never got it,
    // and the state the kill left shows the send started with its journal line written. Any other
    // unknown_after_send is a lost reply (a send the journal shows never started must be made).
    const got = received();
    const inFlightAtKill = unanswered.filter((s) => {
      const rec = outbox.get(`reply:${s.inboundId}`);
      return rec?.state === "sent" && rec.unknownChunks?.includes(0) && !got.has(`echo: ${s.text}`) && interrupted.has(`reply:${s.inboundId}`);
    });
    const lost = unanswered.filter((s) => !inFlightAtKill.includes(s)).map((s) => `${s.text} (${s.inboundId}, outbox ${JSON.stringify(outbox.get(`reply:${s.inboundId}`) ?? null)})`);
    const redelivered = sent.filter((s) => s.redelivered);
    const kills = afterKills.map((k) => `${k.at}${k.listening ? "" : "*"}`).join("/");
    const leftOver = afterKills.map((k) => `${k.outboxQueued}q+${k.outboxSending}s/${k.inboundUnfinished}i${k.changed ? "" : "(same)"}`).join(" ");
    console.info(
      `crash-safety: ${sent.length} messages, ${CYCLES} SIGKILLs at ${kills} ms after spawn (* before listening); ` +
        `left unfinished per kill (outbox queued+sending/inbound): ${leftOver}; ` +
        `${redelivered.length} answered messages redelivered; most resumes of a message left unfinished: ${Math.max(...afterKills.map((k) => k.maxResumes))}, most interrupted starts of a send: ${Math.max(...afterKills.map((k) => k.maxInterruptions))}; ` +
        `${counts.size} answered once, ${duplicated.length} duplicated, ${lost.length} lost, ` +
        `${inFlightAtKill.length} unknown_after_send (killed between the journal line and the platform receiving it: ${inFlightAtKill.map((s) => s.text).join(", ") || "none"})`,
    );
    expect(sent.length).toBeGreaterThan(400);
    expect(duplicated).toEqual([]);
    expect(lost).toEqual([]);
    // Kills that merely land while a message is in flight must not make it look like a poison one.
    expect(afterKills.map((k) => k.maxResumes).filter((r) => r >= MAX_RESUMES), "messages resumed unfinished as often as a poison message").toEqual([]);
    expect(afterKills.map((k) => k.maxInterruptions).filter((r) => r >= MAX_INTERRUPTED_STARTS - 1), "sends interrupted nearly as often as a poison send").toEqual([]);
    // That window is tens of µs wide: more than one such reply per kill means it grew.
    expect(inFlightAtKill.length, "replies lost in the window between the journal line and the platform").toBeLessThanOrEqual(CYCLES);

    // ---- the kills found work in flight (else the recovery paths above went untested); a kill
    // that left exactly what the previous one left (killed again before it resumed anything) does
    // not count
    const fresh = afterKills.filter((k) => k.changed);
    const withOutbox = fresh.filter((k) => k.outboxQueued + k.outboxSending > 0).length;
    const withSending = fresh.filter((k) => k.outboxSending > 0).length;
    const withInbound = fresh.filter((k) => k.inboundUnfinished > 0).length;
    expect(withOutbox, `kills that left outbox records queued or sending (${leftOver}): the outbox resume path went untested`).toBeGreaterThanOrEqual(MIN_KILLS_WITH_WORK);
    expect(withSending, `kills that left an outbox record mid-send (${leftOver}): reconciling interrupted sends went untested`).toBeGreaterThanOrEqual(MIN_KILLS_WITH_WORK);
    expect(withInbound, `kills that left inbound records unfinished (${leftOver}): the inbound resume path went untested`).toBeGreaterThanOrEqual(MIN_KILLS_WITH_WORK);

    // ---- redelivered messages were ignored: one reply, one transcript line (checked below)
    expect(redelivered.length, "answered messages redelivered (one per start after the first answer)").toBeGreaterThanOrEqual(CYCLES / 2);
    expect(api.confirmedOffset, "the daemon acknowledged every redelivery").toBeGreaterThan(lastRedeliveryUpdateId);
    expect(redelivered.filter((s) => counts.get(s.text) !== 1).map((s) => `${s.text}×${counts.get(s.text) ?? 0}`), "replies to redelivered messages").toEqual([]);

    // ---- nothing was left behind: every delivery finished, every inbound message done
    const unfinishedOutbox = [...outbox].filter(([, r]) => !TERMINAL.has(r.state)).map(([k, r]) => `${k}: ${r.state}`);
    expect(unfinishedOutbox, "outbox records never finished").toEqual([]);
    expect(unfinishedInbound(state.spaces.get("inbound")), "inbound records never finished").toEqual([]);

    // ---- replies came in each chat's order
    for (const { chat } of chats) {
      const order = api.sent.filter((m) => m.chat.id === chat.id && m.text?.startsWith("echo: ")).map((m) => Number(m.text?.slice(7)));
      expect(order, `replies in chat ${chat.id}`).toEqual([...order].sort((a, b) => a - b));
    }

    // ---- the state directory is intact, and each message is in its transcript exactly once, in order
    expect(state.problems).toEqual([]);
    expect(state.entries.length).toBe(chats.length);
    const said = new Map<string, string[]>();
    for (const [file, lines] of state.transcripts) {
      for (const l of lines) if (l.type === "message" && l.message.role === "user") said.set(file, [...(said.get(file) ?? []), l.message.content]);
    }
    const allSaid = [...said.values()].flat();
    const seen = new Map<string, number>();
    for (const t of allSaid) seen.set(t, (seen.get(t) ?? 0) + 1);
    expect(sent.filter((s) => seen.get(s.text) !== 1).map((s) => `${s.text}×${seen.get(s.text) ?? 0}${s.redelivered ? " (redelivered)" : ""}`), "messages not in their transcript exactly once").toEqual([]);
    for (const [file, texts] of said) {
      const numbers = texts.map((t) => Number(t.slice(1)));
      expect(numbers, `user messages in ${file}`).toEqual([...numbers].sort((a, b) => a - b));
    }
    // ---- …and answered there exactly once: a message resumed after its run had answered is not
    // run again (a second model call, a second answer in the transcript)
    const answers = new Map<string, number>();
    for (const [, lines] of state.transcripts) {
      for (const l of lines) {
        if (l.type !== "message" || l.message.role !== "assistant") continue;
        for (const b of l.message.content) if (b.type === "text" && b.text.startsWith("echo: ")) answers.set(b.text.slice(6), (answers.get(b.text.slice(6)) ?? 0) + 1);
      }
    }
    expect(sent.filter((s) => answers.get(s.text) !== 1).map((s) => `${s.text}×${answers.get(s.text) ?? 0}`), "messages not answered exactly once in their transcript").toEqual([]);
    // A kill cuts short at most one run per chat (one lane per session), which runs again.
    expect(model.requests.length, "model calls (one per message, plus at most one per chat and kill)").toBeLessThanOrEqual(sent.length + CYCLES * chats.length);
  }, 120_000);
});
