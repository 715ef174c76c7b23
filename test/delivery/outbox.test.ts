import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import pino from "pino";
import { afterEach, describe, expect, it, vi } from "vitest";
import { PlatformError, type OutboundTarget, type SendOptions } from "../../src/channels/types.js";
import { IDEMPOTENCY_WINDOW_MS, MAX_INTERRUPTED_STARTS, Outbox, type OutboxRecord } from "../../src/delivery/outbox.js";
import { openSendJournal, parseJournal, type SendJournal } from "../../src/delivery/send-journal.js";
import type { SendPolicyConfig } from "../../src/policy/send-policy.js";
import type { SessionEntry } from "../../src/sessions/entry.js";
import { SessionStore } from "../../src/sessions/session-store.js";
import { TranscriptStore } from "../../src/sessions/transcript.js";
import { openKvStore, type KvSpace, type KvStore } from "../../src/store/kv.js";
import { RecordingAdapter } from "../helpers/recording-adapter.js";
import { openStoreDb, type StoreDb } from "../helpers/store-db.js";

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

const target: OutboundTarget = { channel: "telegram", accountId: "default", to: "-100" };
const KEY = "agent:main:telegram:group:-100";

/** A state directory removed after the test. */
function freshStateDir(): string {
  const stateDir = mkdtempSync(path.join(os.tmpdir(), "sb-outbox-"));
  cleanups.push(() => rmSync(stateDir, { recursive: true, force: true }));
  return stateDir;
}

async function setup(opts: { policy?: SendPolicyConfig; stateDir?: string; adapter?: RecordingAdapter; watchJournal?: (j: SendJournal) => SendJournal; clock?: { now?(): number; sleep(ms: number): Promise<void> }; watchSpace?: (s: KvSpace<OutboxRecord>) => KvSpace<OutboxRecord>; maxAttempts?: number } = {}) {
  const stateDir = opts.stateDir ?? freshStateDir();
  const kv: KvStore = await openKvStore(`sqlite://${path.join(stateDir, "s.sqlite")}`, stateDir);
  cleanups.push(() => kv.close());
  const sessions = new SessionStore(kv.space<SessionEntry>("sessions"), stateDir);
  await sessions.load();
  const transcripts = new TranscriptStore();
  cleanups.push(() => transcripts.close());
  const adapter = opts.adapter ?? new RecordingAdapter("telegram", "default", 50);
  // As the daemon has it beside a SQLite store.
  const file = openSendJournal(journalFile(stateDir));
  cleanups.push(() => file.close());
  const journal = opts.watchJournal ? opts.watchJournal(file) : file;
  const space = kv.space<OutboxRecord>("outbox");
  const outbox = new Outbox({
    space: opts.watchSpace ? opts.watchSpace(space) : space,
    sessions,
    transcripts,
    policy: () => opts.policy ?? { rules: [], default: "allow" },
    adapter: (channel) => (channel === adapter.channel ? adapter : undefined),
    log: pino({ level: "silent" }),
    sleep: async () => {},
    ...opts.clock,
    ...(opts.maxAttempts ? { maxAttempts: opts.maxAttempts } : {}),
    journal,
  });
  await outbox.start();
  cleanups.push(() => outbox.stop());
  return { outbox, adapter, sessions, transcripts, kv, stateDir };
}

const journalFile = (stateDir: string) => path.join(stateDir, "outbox-journal.jsonl");

/**
 * A record left in the store by a previous process, then a fresh outbox that resumes it. An
 * interrupted record's chunk got as far as the journal line (its platform call may have started)
 * unless `journaled` is false. `prepare` sets up more of the previous process's state first
 * (a session for the record's transcript).
 */
async function resumeAfterRestart(record: OutboxRecord, adapter = new RecordingAdapter("telegram", "default", 50), journaled = true, prepare?: (first: Awaited<ReturnType<typeof setup>>) => Promise<unknown>) {
  const first = await setup();
  await prepare?.(first);
  await first.kv.space<OutboxRecord>("outbox").set(record.id, record);
  if (journaled && record.attempted !== undefined) writeFileSync(journalFile(first.stateDir), `${JSON.stringify([record.id, record.attempted])}\n`);
  const second = await setup({ stateDir: first.stateDir, adapter });
  await vi.waitFor(() => expect(second.outbox.get(record.id)?.state).toBe("sent"));
  return { adapter, outbox: second.outbox, sessions: second.sessions, transcripts: second.transcripts };
}

const interrupted = (id: string, chunks: string[], attempted: number): OutboxRecord => ({
  id, target, kind: "reply", text: chunks.join("\n"), chunks, state: "sending", next: attempted, attempted, messageIds: ["1"], attempts: 2, createdAt: Date.now(), updatedAt: Date.now(),
});

describe("outbox — the one outbound gate", () => {
  it("R30 D2 a session override deny suppresses delivery and records it in the transcript", async () => {
    const { outbox, adapter, sessions, transcripts } = await setup();
    const entry = await sessions.upsert(KEY, "main", { chatType: "group", channel: "telegram", sendPolicy: "deny" });
    const { done } = await outbox.enqueue({ id: "r1", sessionKey: KEY, target, text: "secret", kind: "reply" });
    expect(await done).toMatchObject({ status: "suppressed", reason: "session override" });
    expect(adapter.sent).toEqual([]);
    await transcripts.flush();
    const lines = await transcripts.readLines(sessions.transcriptPath(entry));
    expect(lines.find((l) => l.type === "delivery")).toMatchObject({ status: "suppressed", outboxId: "r1", text: "secret" });
  });

  it("R30 a config rule denies by channel and chat type; announces are gated too", async () => {
    const { outbox, adapter, sessions } = await setup({ policy: { rules: [{ action: "deny", match: { channel: "telegram", chatType: "group" } }], default: "allow" } });
    await sessions.upsert(KEY, "main", { chatType: "group", channel: "telegram" });
    const { done } = await outbox.enqueue({ id: "a1", sessionKey: KEY, target, text: "announce", kind: "announce" });
    expect((await done).status).toBe("suppressed");
    expect(adapter.sent).toEqual([]);
  });

  it("R30 a chatType rule applies to a direct session too: the chat type comes from the session entry, as a direct key carries none", async () => {
    const { outbox, adapter, sessions } = await setup({ policy: { rules: [{ action: "deny", match: { channel: "telegram", chatType: "direct" } }], default: "allow" } });
    await sessions.upsert("agent:main:main", "main", { chatType: "direct", lastChannel: "telegram" });
    const dm: OutboundTarget = { channel: "telegram", accountId: "default", to: "1001" };
    const { done } = await outbox.enqueue({ id: "dm1", sessionKey: "agent:main:main", target: dm, text: "private", kind: "reply" });
    expect(await done).toMatchObject({ status: "suppressed", reason: "rule #1" });
    expect(adapter.sent).toEqual([]);
  });

  it("the owner's own command answer is the single exception to deny", async () => {
    const { outbox, adapter, sessions } = await setup();
    await sessions.upsert(KEY, "main", { sendPolicy: "deny" });
    const { done } = await outbox.enqueue({ id: "c1", sessionKey: KEY, target, text: "⚙️ Send policy set to off.", kind: "command", ownerCommandAnswer: true });
    expect((await done).status).toBe("sent");
    expect(adapter.textsTo("-100")).toEqual(["⚙️ Send policy set to off."]);
  });

  it("R30 D2 R28 an owner's /send off while a long reply is going out stops the rest of it (the chunk on the wire excepted)", async () => {
    const { outbox, adapter, sessions, transcripts } = await setup();
    const entry = await sessions.upsert(KEY, "main", { chatType: "group", channel: "telegram", deliveryContext: { channel: "telegram", to: "-100", accountId: "default" } });
    // The owner's /send off lands while the first chunk is with the platform.
    adapter.beforeResolve = async () => {
      if (adapter.sent.length === 0) await sessions.upsert(KEY, "main", { sendPolicy: "deny" });
    };
    const text = Array.from({ length: 6 }, (_, i) => `line ${i} ${"w".repeat(30)}`).join("\n");
    const { done } = await outbox.enqueue({ id: "flood", sessionKey: KEY, target, text, kind: "reply" });
    expect(await done).toMatchObject({ status: "suppressed", reason: "session override" });
    expect(adapter.sent).toHaveLength(1);
    await transcripts.flush();
    const lines = await transcripts.readLines(sessions.transcriptPath(entry));
    expect(lines.find((l) => l.type === "delivery")).toMatchObject({ status: "suppressed", outboxId: "flood", reason: expect.stringMatching(/^send policy deny \(session override\) after 1 of [3-6] chunks$/) });
    // The owner's own answer still goes, right behind the one chunk.
    const answer = await outbox.enqueue({ id: "c-flood", sessionKey: KEY, target, text: "⚙️ Send policy set to off.", kind: "command", ownerCommandAnswer: true });
    expect((await answer.done).status).toBe("sent");
    expect(adapter.textsTo("-100")).toEqual([adapter.sent[0].text, "⚙️ Send policy set to off."]);
  });

  it("chunks to the channel limit and delivers the chunks in order", async () => {
    const { outbox, adapter } = await setup();
    const text = Array.from({ length: 12 }, (_, i) => `line ${i} ${"w".repeat(10)}`).join("\n");
    const { done } = await outbox.enqueue({ id: "long", target, text, kind: "reply" });
    const result = await done;
    expect(result.status).toBe("sent");
    expect(adapter.sent.length).toBeGreaterThan(1);
    expect(adapter.sent.every((m) => m.text.length <= 50)).toBe(true);
    expect(adapter.sent.map((m) => m.text).join("\n")).toBe(text);
    // The platform's id of every chunk, in order: what `send` answers and a reply would edit.
    expect(result).toMatchObject({ messageIds: adapter.sent.map((_, i) => String(i + 1)) });
    expect(outbox.pending).toBe(0);
  });

  it("Discord replies are cut at 17 lines a message even well under its character limit (openclaw-behaviour §8: maxLinesPerMessage)", async () => {
    const { outbox, adapter } = await setup({ adapter: new RecordingAdapter("discord", "default", 2000) });
    const lines = Array.from({ length: 20 }, (_, i) => `line ${i}`);
    const { done } = await outbox.enqueue({ id: "tall", target: { channel: "discord", accountId: "default", to: "c1" }, text: lines.join("\n"), kind: "reply" });
    expect((await done).status).toBe("sent");
    expect(adapter.textsTo("c1").map((t) => t.split("\n"))).toEqual([lines.slice(0, 17), lines.slice(17)]);
  });

  it("a repeated idempotency id delivers once", async () => {
    const { outbox, adapter } = await setup();
    const a = await outbox.enqueue({ id: "same", target, text: "hi", kind: "send" });
    const b = await outbox.enqueue({ id: "same", target, text: "hi", kind: "send" });
    await a.done;
    await b.done;
    expect(adapter.sent).toHaveLength(1);
  });

  it("memory stays bounded: old finished records leave get() but their id still delivers once, with the first outcome", async () => {
    const { outbox, adapter } = await setup();
    const first = await outbox.enqueue({ id: "old", target, text: "first", kind: "send" });
    const outcome = await first.done;
    for (let i = 0; i < 1000; i++) await (await outbox.enqueue({ id: `m${i}`, target, text: `n${i}`, kind: "send" })).done;
    expect(outbox.get("old")).toBeUndefined();
    expect(outbox.get("m999")).toMatchObject({ state: "sent", text: "n999" });
    expect(outbox.has("old")).toBe(true);
    const again = await outbox.enqueue({ id: "old", target, text: "first", kind: "send" });
    expect(await again.done).toEqual(outcome);
    expect(adapter.sent.filter((m) => m.text === "first")).toHaveLength(1);
  });

  it("retries a rate-limited send (honouring retry_after) and delivers exactly once", async () => {
    const waits: number[] = [];
    const { outbox, adapter } = await setup({ clock: { now: Date.now, sleep: async (ms) => void waits.push(ms) } });
    adapter.failures.push(new PlatformError("telegram", "rate_limited", "429 Too Many Requests", { retryAfterMs: 7000 }), new PlatformError("telegram", "transport", "ECONNRESET"));
    const { done } = await outbox.enqueue({ id: "retry", target, text: "hi", kind: "reply" });
    expect((await done).status).toBe("sent");
    expect(adapter.sent).toHaveLength(1);
    // retry_after as the platform said, then the second attempt's own backoff.
    expect(waits).toEqual([7000, 1000]);
    // Sent in the end: the failures before are no longer its error.
    expect(outbox.get("retry")?.error).toBeUndefined();
  });

  it("transport failures back off exponentially from 500 ms, capped at 30 s", async () => {
    const waits: number[] = [];
    const adapter = new RecordingAdapter("telegram", "default", 50);
    adapter.failures.push(...Array.from({ length: 8 }, () => new PlatformError("telegram", "transport", "ECONNRESET")));
    const { outbox } = await setup({ adapter, clock: { now: Date.now, sleep: async (ms) => void waits.push(ms) } });
    expect((await (await outbox.enqueue({ id: "flaky", target, text: "hi", kind: "reply" })).done).status).toBe("sent");
    expect(waits).toEqual([500, 1000, 2000, 4000, 8000, 16_000, 30_000, 30_000]);
  });

  it("a retryable failure is retried until the message is six hours old (maxAgeMs), then failed", async () => {
    let now = Date.now();
    const adapter = new RecordingAdapter("telegram", "default", 50);
    const hours = (n: number) => n * 3600_000;
    adapter.failures.push(...Array.from({ length: 3 }, () => new PlatformError("telegram", "rate_limited", "429 Too Many Requests", { retryAfterMs: hours(4) })));
    const { outbox } = await setup({ adapter, clock: { now: () => now, sleep: async (ms) => void (now += ms) } });
    const { done } = await outbox.enqueue({ id: "stale", target, text: "hi", kind: "reply" });
    // Tried at 0 h, 4 h and 8 h: the third failure finds it past six hours old.
    expect(await done).toMatchObject({ status: "failed", error: expect.stringContaining("429") });
    expect(adapter.idempotencyKeys).toEqual(["stale#0", "stale#0", "stale#0"]);
  });

  it("a 429 holds back the account's other chats too, until its retry_after has passed", async () => {
    let now = Date.now();
    const timers: Array<() => void> = [];
    const adapter = new RecordingAdapter("telegram", "default", 50);
    adapter.limits = [{ key: "global", count: 30, intervalMs: 1000 }];
    adapter.failures.push(new PlatformError("telegram", "rate_limited", "429 Too Many Requests", { retryAfterMs: 5000 }));
    const { outbox } = await setup({ adapter, clock: { now: () => now, sleep: () => new Promise<void>((wake) => timers.push(wake)) } });
    const first = await outbox.enqueue({ id: "a", target, text: "a", kind: "reply" });
    // Its retry's wait is armed once the 429 is recorded.
    await vi.waitFor(() => expect(timers).toHaveLength(1));
    const other = await outbox.enqueue({ id: "b", target: { ...target, to: "-200" }, text: "b", kind: "reply" });
    // b waits for the account's bucket (a timer of its own) instead of going out.
    await vi.waitFor(() => expect(timers).toHaveLength(2));
    expect(adapter.sent).toEqual([]);
    now += 5000;
    for (const wake of timers.splice(0)) wake();
    expect((await first.done).status).toBe("sent");
    expect((await other.done).status).toBe("sent");
    expect(adapter.sent.map((m) => m.text).sort()).toEqual(["a", "b"]);
  });

  it("a send the platform refused, its retry waiting when the process dies, is sent after the restart — not skipped as unknown_after_send", async () => {
    const stateDir = freshStateDir();
    const adapter = new RecordingAdapter("telegram", "default", 50);
    adapter.failures.push(new PlatformError("telegram", "transport", "ECONNRESET"));
    const timers: Array<() => void> = [];
    const first = await setup({ adapter, stateDir, clock: { now: Date.now, sleep: () => new Promise<void>((wake) => timers.push(wake)) } });
    await first.outbox.enqueue({ id: "refused", target, text: "hello", kind: "reply" });
    // Waiting out its backoff: the process dies here.
    await vi.waitFor(() => expect(timers).toHaveLength(1));

    const second = await setup({ stateDir });
    await vi.waitFor(() => expect(second.outbox.get("refused")?.state).toBe("sent"));
    expect(second.adapter.textsTo("-100")).toEqual(["hello"]);
    expect(second.outbox.get("refused")?.unknownChunks).toBeUndefined();
  });

  it("stop() ends a message waiting for its rate limit there: once the wait would have passed, it is neither sent nor marked attempted", async () => {
    let now = Date.now();
    const timers: Array<() => void> = [];
    const adapter = new RecordingAdapter("telegram", "default", 50);
    adapter.limits = [{ key: "chat:-100", count: 1, intervalMs: 60_000 }];
    const { outbox } = await setup({ adapter, clock: { now: () => now, sleep: () => new Promise<void>((wake) => timers.push(wake)) } });
    expect((await (await outbox.enqueue({ id: "first", target, text: "one", kind: "reply" })).done).status).toBe("sent");
    await outbox.enqueue({ id: "second", target, text: "two", kind: "reply" });
    await vi.waitFor(() => expect(timers.length).toBeGreaterThan(0));

    await outbox.stop();
    now += 60_000;
    for (const wake of timers.splice(0)) wake();
    // Whatever the wake sets off runs in promise callbacks, all done before this.
    await new Promise((resolve) => setImmediate(resolve));
    expect(adapter.sent.map((m) => m.text)).toEqual(["one"]);
    expect(outbox.get("second")?.attempts).toBe(0);
  });

  it("a send whose attempted mark could not be written gives its rate-limit place back: the chat's next message goes once the window has passed", async () => {
    let now = Date.now();
    const timers: Array<() => void> = [];
    const adapter = new RecordingAdapter("telegram", "default", 50);
    adapter.limits = [{ key: "chat:-100", count: 1, intervalMs: 60_000 }];
    const { outbox } = await setup({
      adapter,
      clock: { now: () => now, sleep: () => new Promise<void>((wake) => timers.push(wake)) },
      watchSpace: (space) => ({
        ...space,
        set: (id, record) => (id === "lost" && record.attempted !== undefined ? Promise.reject(new Error("disk full")) : space.set(id, record)),
      }),
    });
    await outbox.enqueue({ id: "lost", target, text: "never sent", kind: "reply" });
    const next = await outbox.enqueue({ id: "next", target, text: "two", kind: "reply" });
    // Still counted in flight, the lost send would leave the chat full with no time to wake at.
    await vi.waitFor(() => expect(timers.length).toBeGreaterThan(0));
    now += 60_000;
    for (const wake of timers.splice(0)) wake();
    expect((await next.done).status).toBe("sent");
    expect(adapter.sent.map((m) => m.text)).toEqual(["two"]);
  });

  it("a reply whose attempted mark the store refuses (the disk filled while it waited for its turn) is sent once the store writes again — not left until a restart, nor overtaken by the chat's next reply", async () => {
    let now = Date.now();
    const timers: Array<() => void> = [];
    const adapter = new RecordingAdapter("telegram", "default", 50);
    adapter.limits = [{ key: "chat:-100", count: 1, intervalMs: 1000 }];
    const { outbox, stateDir } = await setup({ adapter, clock: { now: () => now, sleep: () => new Promise<void>((wake) => timers.push(wake)) } });
    const wakeAll = () => {
      for (const wake of timers.splice(0)) wake();
    };
    const db = await openStoreDb(path.join(stateDir, "s.sqlite"));
    cleanups.push(() => db.close());
    expect((await (await outbox.enqueue({ id: "one", target, text: "one", kind: "reply" })).done).status).toBe("sent");
    const two = await outbox.enqueue({ id: "two", target, text: "two", kind: "reply" });
    const three = await outbox.enqueue({ id: "three", target, text: "three", kind: "reply" });
    await vi.waitFor(() => expect(timers.length).toBeGreaterThan(0));
    await db.exec("CREATE TRIGGER test_disk_full BEFORE UPDATE ON keyv WHEN NEW.key LIKE 'outbox:%' BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END");
    // Its turn comes, and its mark is refused: nothing goes out, and the chat's next reply waits behind it.
    now += 1000;
    wakeAll();
    await vi.waitFor(() => expect(timers.length).toBeGreaterThan(0));
    expect(adapter.sent.map((m) => m.text)).toEqual(["one"]);
    await db.exec("DROP TRIGGER test_disk_full");
    for (let i = 0; i < 10 && adapter.sent.length < 3; i++) {
      now += 1000;
      wakeAll();
      await new Promise((r) => setTimeout(r, 20));
    }
    expect(adapter.sent.map((m) => m.text)).toEqual(["one", "two", "three"]);
    expect((await two.done).status).toBe("sent");
    expect((await three.done).status).toBe("sent");
  });

  it("an enqueue whose write failed is not accepted — nor is a second enqueue of its id meanwhile — and is forgotten: the caller's retry of the id is sent, once", async () => {
    let full = true;
    const { outbox, adapter } = await setup({
      watchSpace: (space) => ({
        ...space,
        set: (id, record) => (full && id === "r" ? Promise.reject(Object.assign(new Error("SQLITE_FULL: database or disk is full"), { code: "SQLITE_FULL" })) : space.set(id, record)),
      }),
    });
    const first = outbox.enqueue({ id: "r", target, text: "hello", kind: "reply" });
    const same = outbox.enqueue({ id: "r", target, text: "hello", kind: "reply" });
    await expect(first).rejects.toThrow(/SQLITE_FULL/);
    await expect(same).rejects.toThrow(/SQLITE_FULL/);
    expect(outbox.has("r")).toBe(false);
    full = false;
    const retried = await outbox.enqueue({ id: "r", target, text: "hello", kind: "reply" });
    expect(await retried.done).toMatchObject({ status: "sent" });
    expect(adapter.sent.map((m) => m.text)).toEqual(["hello"]);
  });

  it("an enqueue write that fails after the first chunk's attempted mark committed on its own leaves no row: a restart sends nothing the caller was told was not accepted", async () => {
    const full = Object.assign(new Error("SQLITE_FULL: database or disk is full"), { code: "SQLITE_FULL" });
    let markCommitted!: () => void;
    const afterMark = new Promise<void>((resolve) => (markCommitted = resolve));
    const first = await setup({
      watchSpace: (space) => ({
        ...space,
        // The accepting write (no mark yet) fails only once the mark, issued after it, is stored.
        set: (id, record) => (id !== "r" ? space.set(id, record) : record.attempted === undefined ? afterMark.then(() => Promise.reject(full)) : space.set(id, record).then(markCommitted)),
      }),
    });
    await expect(first.outbox.enqueue({ id: "r", target, text: "not accepted", kind: "reply" })).rejects.toThrow(/SQLITE_FULL/);
    await vi.waitFor(async () => expect(await first.kv.space<OutboxRecord>("outbox").get("r")).toBeUndefined());
    expect(first.adapter.sent).toEqual([]);

    const adapter = new RecordingAdapter("telegram", "default", 50);
    const second = await setup({ stateDir: first.stateDir, adapter });
    const { done } = await second.outbox.enqueue({ id: "after", target, text: "after the restart", kind: "reply" });
    expect((await done).status).toBe("sent");
    expect(adapter.sent.map((m) => m.text)).toEqual(["after the restart"]);
  });

  it("a message waiting for its rate limit whose enqueue write then fails is not sent when its turn comes; the caller's retry is sent, once", async () => {
    let now = Date.now();
    const timers: Array<() => void> = [];
    const adapter = new RecordingAdapter("telegram", "default", 50);
    adapter.limits = [{ key: "chat:-100", count: 1, intervalMs: 60_000 }];
    let failWrite!: () => void;
    const writeFails = new Promise<void>((resolve) => (failWrite = resolve));
    let fail = true;
    const { outbox } = await setup({
      adapter,
      clock: { now: () => now, sleep: () => new Promise<void>((wake) => timers.push(wake)) },
      watchSpace: (space) => ({
        ...space,
        set: (id, record) => (fail && id === "r" && record.attempted === undefined ? writeFails.then(() => Promise.reject(new Error("EIO: i/o error, write"))) : space.set(id, record)),
      }),
    });
    expect((await (await outbox.enqueue({ id: "first", target, text: "one", kind: "reply" })).done).status).toBe("sent");
    const rejected = outbox.enqueue({ id: "r", target, text: "two", kind: "reply" });
    await vi.waitFor(() => expect(timers.length).toBeGreaterThan(0));
    failWrite();
    await expect(rejected).rejects.toThrow(/EIO/);
    now += 60_000;
    for (const wake of timers.splice(0)) wake();
    fail = false;
    const retried = await outbox.enqueue({ id: "r", target, text: "two", kind: "reply" });
    await vi.waitFor(() => expect(timers.length).toBeGreaterThan(0));
    now += 60_000;
    for (const wake of timers.splice(0)) wake();
    expect((await retried.done).status).toBe("sent");
    expect(adapter.sent.map((m) => m.text)).toEqual(["one", "two"]);
  });

  it("R30 no outcome is recorded for a message whose enqueue write failed: a denied one leaves no suppressed line in the transcript", async () => {
    let failWrite!: () => void;
    const writeFails = new Promise<void>((resolve) => (failWrite = resolve));
    const { outbox, sessions, transcripts } = await setup({
      watchSpace: (space) => ({
        ...space,
        set: (id, record) => (id === "r" && record.state === "queued" ? writeFails.then(() => Promise.reject(new Error("EIO: i/o error, write"))) : space.set(id, record)),
      }),
    });
    const entry = await sessions.upsert(KEY, "main", { chatType: "group", channel: "telegram", sendPolicy: "deny" });
    const rejected = outbox.enqueue({ id: "r", sessionKey: KEY, target, text: "secret", kind: "reply" });
    // Its processing has begun (the policy is decided before the write settles).
    await new Promise((resolve) => setImmediate(resolve));
    failWrite();
    await expect(rejected).rejects.toThrow(/EIO/);
    const after = await outbox.enqueue({ id: "s", sessionKey: KEY, target, text: "later", kind: "reply" });
    expect((await after.done).status).toBe("suppressed");
    await transcripts.flush();
    const lines = await transcripts.readLines(sessions.transcriptPath(entry));
    expect(lines.filter((l) => l.type === "delivery").map((l) => (l as { outboxId: string }).outboxId)).toEqual(["s"]);
  });

  it("a long reply's later chunk gets its own tries and backoff: failing once after three chunks went, it is retried after the first backoff, not failed by the attempts the chunks before it used", async () => {
    const waits: number[] = [];
    const adapter = new RecordingAdapter("telegram", "default", 50);
    const { outbox } = await setup({ adapter, maxAttempts: 3, clock: { now: Date.now, sleep: async (ms) => void waits.push(ms) } });
    let failed = false;
    adapter.beforeResolve = () => {
      if (adapter.sent.length === 3 && !failed) {
        failed = true;
        throw new PlatformError("telegram", "transport", "ECONNRESET");
      }
    };
    const chunks = ["one", "two", "three", "four", "five"].map((w) => `${w} ${"x".repeat(40)}`);
    const { done } = await outbox.enqueue({ id: "long", target, text: chunks.join("\n"), kind: "reply" });
    expect((await done).status).toBe("sent");
    expect(adapter.sent.map((m) => m.text)).toEqual(chunks);
    expect(waits).toEqual([500]);
  });

  it("a send failing for good while the platform takes the account's other sends is tried maxAttempts times in all, then failed", async () => {
    const adapter = new RecordingAdapter("telegram", "default", 50);
    adapter.beforeResolve = (to) => {
      if (to.to === "-100") throw new PlatformError("telegram", "transport", "ECONNRESET");
    };
    let others = 0;
    let box: Outbox | undefined;
    // Another chat of the same bot is answered while this one waits to retry: the platform is up.
    const sleep = async () => void (await (await box!.enqueue({ id: `other-${others++}`, target: { ...target, to: "-200" }, text: "fine", kind: "reply" })).done);
    const { outbox } = await setup({ adapter, maxAttempts: 3, clock: { now: Date.now, sleep } });
    box = outbox;
    const { done } = await outbox.enqueue({ id: "down", target, text: "hi", kind: "reply" });
    expect(await done).toMatchObject({ status: "failed", error: expect.stringContaining("ECONNRESET") });
    expect(adapter.idempotencyKeys.filter((k) => k.startsWith("down"))).toEqual(["down#0", "down#0", "down#0"]);
  });

  it("an outage (no send of the account getting through) is retried until the reply is maxAgeMs old, not given up after maxAttempts (~20 minutes of 30 s retries): the reply arrives once the platform is back", async () => {
    let now = Date.now();
    const adapter = new RecordingAdapter("telegram", "default", 50);
    adapter.failures.push(...Array.from({ length: 80 }, () => new PlatformError("telegram", "transport", "connect ECONNREFUSED")));
    const { outbox } = await setup({ adapter, clock: { now: () => now, sleep: async (ms) => void (now += ms) } });
    const started = now;
    const { done } = await outbox.enqueue({ id: "outage", target, text: "late but here", kind: "reply" });
    expect(await done).toMatchObject({ status: "sent" });
    expect(adapter.idempotencyKeys).toHaveLength(81);
    expect(adapter.sent.map((m) => m.text)).toEqual(["late but here"]);
    expect(now - started).toBeGreaterThan(35 * 60_000);
  });

  it("a chat waiting for its rate limit holds back no other chat's message: each destination has its own lane", async () => {
    const adapter = Object.assign(new RecordingAdapter("telegram", "default", 50), {
      rateLimitsFor: (t: OutboundTarget) => [{ key: `chat:${t.to}`, count: 1, intervalMs: 60_000 }],
    });
    // Timers never fire: a message that waits for its chat's limit waits for the whole test.
    const { outbox } = await setup({ adapter, clock: { now: Date.now, sleep: () => new Promise<void>(() => {}) } });
    expect((await (await outbox.enqueue({ id: "a1", target, text: "a1", kind: "reply" })).done).status).toBe("sent");
    await outbox.enqueue({ id: "a2", target, text: "a2", kind: "reply" });
    await outbox.enqueue({ id: "b1", target: { ...target, to: "-200" }, text: "b1", kind: "reply" });
    await vi.waitFor(() => expect(adapter.sent.map((m) => m.text)).toEqual(["a1", "b1"]));
  });

  it("a wall clock set back by hours (an NTP correction, a VM resumed) does not hold a chat's next message for those hours: its rate limit counts elapsed time", async () => {
    // The daemon's own clock (none injected) and timers, faked: setSystemTime moves the wall clock alone.
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout", "Date", "performance"] });
    try {
      const adapter = new RecordingAdapter("telegram", "default", 50);
      adapter.limits = [{ key: "chat:-100", count: 1, intervalMs: 1000 }];
      const { outbox } = await setup({ adapter, clock: { sleep: (ms) => new Promise<void>((wake) => setTimeout(wake, ms)) } });
      expect((await (await outbox.enqueue({ id: "one", target, text: "one", kind: "reply" })).done).status).toBe("sent");
      const second = await outbox.enqueue({ id: "two", target, text: "two", kind: "reply" });
      vi.setSystemTime(Date.now() - 3 * 3600_000);
      await vi.advanceTimersByTimeAsync(1000);
      await vi.waitFor(() => expect(adapter.sent.map((m) => m.text)).toEqual(["one", "two"]));
      expect((await second.done).status).toBe("sent");
    } finally {
      vi.useRealTimers();
    }
  });

  it("rate limits are per bot account: the same chat on a second account does not wait for the first account's limit", async () => {
    const adapter = new RecordingAdapter("telegram", "default", 50);
    adapter.limits = [{ key: "global", count: 1, intervalMs: 60_000 }];
    const { outbox } = await setup({ adapter, clock: { now: Date.now, sleep: () => new Promise<void>(() => {}) } });
    expect((await (await outbox.enqueue({ id: "one", target, text: "one", kind: "reply" })).done).status).toBe("sent");
    await outbox.enqueue({ id: "two", target: { ...target, accountId: "second" }, text: "two", kind: "reply" });
    await vi.waitFor(() => expect(adapter.sent.map((m) => m.text)).toEqual(["one", "two"]));
  });

  it("a permanent platform error fails without retrying and is recorded", async () => {
    const { outbox, adapter } = await setup();
    adapter.failures.push(new PlatformError("telegram", "forbidden", "403 bot was blocked by the user"));
    const { done } = await outbox.enqueue({ id: "blocked", target, text: "hi", kind: "reply" });
    expect(await done).toMatchObject({ status: "failed", error: expect.stringContaining("blocked") });
    expect(adapter.sent).toHaveLength(0);
    expect(outbox.failed).toBe(1);
  });

  it("a send that failed after its request reached the platform (outcome unknown) is not repeated where the platform does not dedupe: that chunk is unknown_after_send, the rest go", async () => {
    const waits: number[] = [];
    const { outbox, adapter, sessions, transcripts } = await setup({ clock: { now: Date.now, sleep: async (ms) => void waits.push(ms) } });
    await sessions.upsert(KEY, "main", { chatType: "group", channel: "telegram" });
    adapter.failures.push(new PlatformError("telegram", "transport", "socket hang up", { outcomeUnknown: true }));
    const { done } = await outbox.enqueue({ id: "doubt", sessionKey: KEY, target, text: `${"a".repeat(40)} ${"b".repeat(40)} ${"c".repeat(40)}`, kind: "reply" });
    expect(await done).toMatchObject({ status: "sent", unknownChunks: [0] });
    expect([outbox.unknown, outbox.failed]).toEqual([1, 0]);
    expect(adapter.idempotencyKeys).toEqual(["doubt#0", "doubt#1", "doubt#2"]);
    expect(adapter.sent.map((m) => m.text)).toEqual(["b".repeat(40), "c".repeat(40)]);
    expect(waits).toEqual([]);
    await transcripts.flush();
    const lines = await transcripts.readLines(sessions.transcriptPath(sessions.get(KEY)!));
    expect(lines.filter((l) => l.type === "delivery")).toMatchObject([{ status: "unknown_after_send", outboxId: "doubt" }]);
  });

  it("where the platform dedupes by idempotency key, a send whose outcome is unknown is repeated under the same key", async () => {
    const adapter = Object.assign(new RecordingAdapter("telegram", "default", 50), { idempotentSends: true });
    const { outbox } = await setup({ adapter });
    adapter.failures.push(new PlatformError("telegram", "transport", "socket hang up", { outcomeUnknown: true }));
    expect(await (await outbox.enqueue({ id: "safe", target, text: "hi", kind: "reply" })).done).toEqual({ status: "sent", id: "safe", messageIds: ["1"] });
    expect(adapter.idempotencyKeys).toEqual(["safe#0", "safe#0"]);
  });

  it("after a crash mid-send the attempted chunk is reconciled, not re-sent, and the rest continue", async () => {
    const { adapter, outbox, sessions, transcripts } = await resumeAfterRestart(
      { ...interrupted("crashy", ["part one", "part two", "part three"], 1), sessionKey: KEY },
      undefined,
      true,
      (first) => first.sessions.upsert(KEY, "main", { chatType: "group", channel: "telegram" }),
    );
    expect(adapter.sent.map((m) => m.text)).toEqual(["part three"]);
    expect(outbox.get("crashy")?.unknownChunks).toEqual([1]);
    expect(outbox.unknown).toBe(1);
    // The id's outcome (a repeated gateway `send`) and the transcript both say which chunk is in doubt.
    expect(await (await outbox.enqueue({ id: "crashy", target, text: "", kind: "reply" })).done).toMatchObject({ status: "sent", unknownChunks: [1] });
    await transcripts.flush();
    const lines = await transcripts.readLines(sessions.transcriptPath(sessions.get(KEY)!));
    expect(lines.filter((l) => l.type === "delivery")).toMatchObject([{ status: "unknown_after_send", outboxId: "crashy" }]);
  });

  it("a chunk marked attempted whose journal line was never written never reached the platform: it is sent after the restart", async () => {
    const { adapter, outbox } = await resumeAfterRestart(interrupted("early", ["part one", "part two"], 1), undefined, false);
    expect(adapter.sent.map((m) => m.text)).toEqual(["part two"]);
    expect(outbox.get("early")?.unknownChunks).toBeUndefined();
  });

  it("the journal line of a chunk is on disk before its platform call starts; a restart drops it once the outcome is stored", async () => {
    const stateDir = freshStateDir();
    const adapter = new RecordingAdapter("telegram", "default", 50);
    const seen: Array<Map<string, Set<number>>> = [];
    adapter.beforeResolve = () => void seen.push(parseJournal(readFileSync(journalFile(stateDir), "utf8")));
    const { outbox } = await setup({ adapter, stateDir });
    const { done } = await outbox.enqueue({ id: "j1", target, text: "hello", kind: "reply" });
    expect((await done).status).toBe("sent");
    expect(seen).toHaveLength(1);
    expect([...(seen[0].get("j1") ?? [])]).toEqual([0]);
    // A restart keeps no line for a chunk whose outcome the store holds.
    const again = await setup({ stateDir });
    expect(again.adapter.sent).toHaveLength(0);
    expect(parseJournal(readFileSync(journalFile(stateDir), "utf8")).size).toBe(0);
  });

  it("every chunk journaled as started is settled once its outcome is stored — sent, retried or failed — so the journal's rewrites stay small", async () => {
    const open = new Set<string>();
    const adapter = new RecordingAdapter("telegram", "default", 50);
    adapter.failures.push(new PlatformError("telegram", "transport", "connection reset"));
    const { outbox } = await setup({
      adapter,
      watchJournal: (j) => ({
        ...j,
        starting: (id, chunk) => (open.add(`${id}#${chunk}`), j.starting(id, chunk)),
        settled: (id) => {
          for (const k of [...open]) if (k.startsWith(`${id}#`)) open.delete(k);
          j.settled(id);
        },
      }),
    });
    // "retried": a transport failure, then the same message sent; "blocked": a permanent failure.
    const retried = await outbox.enqueue({ id: "retried", target, text: "x", kind: "reply" });
    expect((await retried.done).status).toBe("sent");
    adapter.failures.push(new PlatformError("telegram", "forbidden", "403 blocked"));
    const blocked = await outbox.enqueue({ id: "blocked", target: { ...target, to: "-200" }, text: "y", kind: "reply" });
    expect((await blocked.done).status).toBe("failed");
    const long = await outbox.enqueue({ id: "long", target, text: "a".repeat(120), kind: "reply" });
    expect((await long.done).status).toBe("sent");
    expect(open).toEqual(new Set());
  });

  it("the adapter is made ready (prepareSend) before the journal line: the line is written only once the send can go out at once", async () => {
    const stateDir = freshStateDir();
    const adapter = new RecordingAdapter("telegram", "default", 50);
    const order: string[] = [];
    const lineWritten = () => parseJournal(readFileSync(journalFile(stateDir), "utf8")).has("p1");
    Object.assign(adapter, {
      prepareSend: async () => {
        order.push(`prepare (line written: ${lineWritten()})`);
        await new Promise((r) => setTimeout(r, 20));
      },
    });
    adapter.beforeResolve = () => void order.push(`send (line written: ${lineWritten()})`);
    const { outbox } = await setup({ adapter, stateDir });
    expect((await (await outbox.enqueue({ id: "p1", target, text: "hi", kind: "reply" })).done).status).toBe("sent");
    expect(order).toEqual(["prepare (line written: false)", "send (line written: true)"]);
  });

  it("an adapter that reports the wire itself (reportsWire) gets the journal line written when it says, not before send()", async () => {
    const stateDir = freshStateDir();
    const lineWritten = () => parseJournal(readFileSync(journalFile(stateDir), "utf8")).has("w1");
    const adapter = new RecordingAdapter("telegram", "default", 50);
    const order: string[] = [];
    const send = adapter.send.bind(adapter);
    Object.assign(adapter, {
      reportsWire: true,
      send: async (t: OutboundTarget, text: string, opts?: SendOptions) => {
        order.push(`send entered (line written: ${lineWritten()})`);
        opts?.onWire?.();
        order.push(`on the wire (line written: ${lineWritten()})`);
        return send(t, text, opts);
      },
    });
    const { outbox } = await setup({ adapter, stateDir });
    expect((await (await outbox.enqueue({ id: "w1", target, text: "hi", kind: "reply" })).done).status).toBe("sent");
    expect(order).toEqual(["send entered (line written: false)", "on the wire (line written: true)"]);
  });

  it("a send killed before its request left (reportsWire, onWire not yet called) is sent after the restart — not unknown_after_send", async () => {
    const stateDir = freshStateDir();
    const adapter = Object.assign(new RecordingAdapter("telegram", "default", 50), { reportsWire: true });
    // The first process dies inside send(), before its request reached the wire.
    let die!: () => void;
    const died = new Promise<void>((r) => (die = r));
    let release!: () => void;
    adapter.beforeResolve = () => {
      die();
      return new Promise<void>((r) => (release = r));
    };
    const first = await setup({ adapter, stateDir });
    // Runs before the first outbox's stop(), which would wait for the hung send.
    cleanups.push(() => release());
    void first.outbox.enqueue({ id: "never-left", target, text: "hello", kind: "reply" });
    await died;
    expect(parseJournal(readFileSync(journalFile(stateDir), "utf8")).has("never-left")).toBe(false);
    const second = await setup({ stateDir });
    await vi.waitFor(() => expect(second.outbox.get("never-left")?.state).toBe("sent"));
    expect(second.adapter.textsTo("-100")).toEqual(["hello"]);
    expect(second.outbox.get("never-left")?.unknownChunks).toBeUndefined();
  });

  it("a send whose adapter was still getting ready (prepareSend) when stop() came is not sent by this process; the next start sends it, once", async () => {
    const stateDir = freshStateDir();
    const adapter = new RecordingAdapter("telegram", "default", 50);
    let ready: (() => void) | undefined;
    Object.assign(adapter, { prepareSend: () => new Promise<void>((resolve) => (ready = resolve)) });
    const first = await setup({ adapter, stateDir });
    await first.outbox.enqueue({ id: "late", target, text: "hello", kind: "reply" });
    await vi.waitFor(() => expect(ready).toBeDefined());
    const stopped = first.outbox.stop();
    ready?.();
    await stopped;
    expect(adapter.sent).toEqual([]);

    const second = await setup({ stateDir });
    await vi.waitFor(() => expect(second.outbox.get("late")?.state).toBe("sent"));
    expect(second.adapter.textsTo("-100")).toEqual(["hello"]);
  });

  it("on a platform that dedupes by idempotency key (Discord nonces) the interrupted chunk is repeated under the same key", async () => {
    const adapter = Object.assign(new RecordingAdapter("telegram", "default", 50), { idempotentSends: true });
    const { outbox } = await resumeAfterRestart(interrupted("nonce", ["one", "two"], 1), adapter);
    expect(adapter.sent.map((m) => m.text)).toEqual(["two"]);
    expect(adapter.idempotencyKeys).toEqual(["nonce#1"]);
    expect(outbox.get("nonce")?.unknownChunks).toBeUndefined();
  });

  describe("Discord dedupes a nonce for a few minutes only (Create Message enforce_nonce): a chunk that may have reached it is repeated within IDEMPOTENCY_WINDOW_MS, never later", () => {
    /** A first process whose send hangs on a deduping platform (it dies there), then a restart `afterMs` later. */
    const restartAfter = async (afterMs: number) => {
      const stateDir = freshStateDir();
      const hung: Array<() => void> = [];
      const dying = Object.assign(new RecordingAdapter("telegram", "default", 50), { idempotentSends: true, beforeResolve: () => new Promise<void>((resolve) => hung.push(resolve)) });
      const first = await setup({ stateDir, adapter: dying });
      cleanups.push(() => hung.forEach((resolve) => resolve()));
      await first.outbox.enqueue({ id: "cut", target, text: `${"a".repeat(40)} ${"b".repeat(40)}`, kind: "reply" });
      await vi.waitFor(() => expect(hung).toHaveLength(1));
      const later = Date.now() + afterMs;
      const adapter = Object.assign(new RecordingAdapter("telegram", "default", 50), { idempotentSends: true });
      const second = await setup({ stateDir, adapter, clock: { now: () => later, sleep: async () => {} } });
      await vi.waitFor(() => expect(second.outbox.get("cut")?.state).toBe("sent"));
      return { adapter, outbox: second.outbox };
    };

    it("a restart longer after the interrupted send than the window does not repeat it (Discord would post it twice): unknown_after_send, and the rest goes", async () => {
      const { adapter, outbox } = await restartAfter(IDEMPOTENCY_WINDOW_MS + 60_000);
      expect(adapter.sent.map((m) => m.text)).toEqual(["b".repeat(40)]);
      expect(adapter.idempotencyKeys).toEqual(["cut#1"]);
      expect(outbox.get("cut")?.unknownChunks).toEqual([0]);
      expect(outbox.unknown).toBe(1);
    });

    it("a restart within the window repeats the interrupted send under the same key", async () => {
      const { adapter, outbox } = await restartAfter(30_000);
      expect(adapter.idempotencyKeys).toEqual(["cut#0", "cut#1"]);
      expect(outbox.get("cut")?.unknownChunks).toBeUndefined();
    });

    it("a chunk marked attempted whose send never started is sent however late the restart", async () => {
      const long = Date.now() - 24 * 3600_000;
      const adapter = Object.assign(new RecordingAdapter("telegram", "default", 50), { idempotentSends: true });
      const { outbox } = await resumeAfterRestart({ ...interrupted("slow", ["one", "two"], 1), createdAt: long, updatedAt: long }, adapter, false);
      expect(adapter.sent.map((m) => m.text)).toEqual(["two"]);
      expect(outbox.get("slow")?.unknownChunks).toBeUndefined();
    });

    it("retries through an outage: a send with no answer is repeated under its key while the window lasts, then unknown_after_send instead of a late repeat", async () => {
      let now = Date.now();
      const adapter = Object.assign(new RecordingAdapter("telegram", "default", 50), { idempotentSends: true });
      adapter.failures.push(
        new PlatformError("telegram", "transport", "request timed out (outcome unknown)", { outcomeUnknown: true }),
        ...Array.from({ length: 8 }, () => new PlatformError("telegram", "transport", "connect ECONNREFUSED")),
      );
      const { outbox } = await setup({ adapter, clock: { now: () => now, sleep: async (ms) => void (now += ms) } });
      const { done } = await outbox.enqueue({ id: "outage", target, text: `${"a".repeat(40)} ${"b".repeat(40)}`, kind: "reply" });
      expect(await done).toMatchObject({ status: "sent", unknownChunks: [0] });
      // Tried at 0, 0.5, 1.5, 3.5, 7.5, 15.5, 31.5, 61.5 and 91.5 s; at 121.5 s the first try is past the window.
      expect(adapter.idempotencyKeys).toEqual([...Array.from({ length: 9 }, () => "outage#0"), "outage#1"]);
      expect(adapter.sent.map((m) => m.text)).toEqual(["b".repeat(40)]);
    });

    it("an outage in which no send reached the platform still delivers, however long past the window", async () => {
      let now = Date.now();
      const adapter = Object.assign(new RecordingAdapter("telegram", "default", 50), { idempotentSends: true });
      adapter.failures.push(...Array.from({ length: 12 }, () => new PlatformError("telegram", "transport", "connect ECONNREFUSED")));
      const { outbox } = await setup({ adapter, clock: { now: () => now, sleep: async (ms) => void (now += ms) } });
      expect(await (await outbox.enqueue({ id: "down", target, text: "hi", kind: "reply" })).done).toMatchObject({ status: "sent", messageIds: ["1"] });
      expect(adapter.sent.map((m) => m.text)).toEqual(["hi"]);
    });
  });

  describe("a send that kills the process at every start is failed at the MAX_INTERRUPTED_STARTS-th start, not tried for ever (the daemon would crash at every start)", () => {
    // Each start's send never returns: the process died in it. Only where an interrupted chunk is
    // tried again can this loop — before the journal line, or on a platform that dedupes.
    const dying = async (where: "prepareSend" | "send") => {
      const stateDir = freshStateDir();
      const adapter = new RecordingAdapter("telegram", "default", 50);
      const hung: Array<() => void> = [];
      const hang = () => new Promise<void>((resolve) => hung.push(resolve));
      if (where === "prepareSend") Object.assign(adapter, { prepareSend: hang });
      else Object.assign(adapter, { idempotentSends: true, beforeResolve: hang });
      // Each start's calls are released before its stop() (cleanups run newest first), which
      // would otherwise wait for them.
      const start = async () => {
        const started = await setup({ stateDir, adapter });
        cleanups.push(() => hung.forEach((resolve) => resolve()));
        return started;
      };
      return { adapter, start, calls: () => hung.length };
    };
    it.each(["prepareSend", "send"] as const)("dying in %s", async (where) => {
      const { adapter, start, calls } = await dying(where);
      const first = await start();
      await first.outbox.enqueue({ id: "poison", sessionKey: KEY, target, text: "boom", kind: "reply" });
      for (let n = 1; n < MAX_INTERRUPTED_STARTS; n++) {
        await vi.waitFor(() => expect(calls()).toBe(n));
        await start();
      }
      await vi.waitFor(() => expect(calls()).toBe(MAX_INTERRUPTED_STARTS));
      const last = await start();
      await vi.waitFor(() => expect(last.outbox.get("poison")?.state).toBe("failed"));
      expect(calls()).toBe(MAX_INTERRUPTED_STARTS);
      expect(last.outbox.get("poison")?.error).toBe(`send of chunk 0 interrupted by a restart at ${MAX_INTERRUPTED_STARTS} starts in a row: given up (a send that kills the process would crash the daemon at every start)`);
      expect(adapter.sent).toEqual([]);
    });

    it("a chunk reconciled as unknown_after_send ends its count: the next chunk, interrupted once before its request left, is sent", async () => {
      const first = await setup();
      const record = { ...interrupted("counted", ["one", "two", "three"], 1), interruptions: MAX_INTERRUPTED_STARTS - 1 };
      await first.kv.space<OutboxRecord>("outbox").set(record.id, record);
      writeFileSync(journalFile(first.stateDir), `${JSON.stringify([record.id, 1])}\n`);
      // The second start dies getting the adapter ready for chunk 2, before its journal line.
      const hung: Array<() => void> = [];
      const adapter = Object.assign(new RecordingAdapter("telegram", "default", 50), { prepareSend: () => new Promise<void>((resolve) => hung.push(resolve)) });
      await setup({ stateDir: first.stateDir, adapter });
      cleanups.push(() => hung.forEach((resolve) => resolve()));
      await vi.waitFor(() => expect(hung).toHaveLength(1));
      const third = await setup({ stateDir: first.stateDir });
      await vi.waitFor(() => expect(third.outbox.get("counted")?.state).toBe("sent"));
      expect(third.adapter.textsTo("-100")).toEqual(["three"]);
      expect(third.outbox.get("counted")?.unknownChunks).toEqual([1]);
    });

    it("a chunk interrupted at fewer starts is sent, and the count starts again at the next chunk", async () => {
      const record = { ...interrupted("unlucky", ["one", "two", "three"], 1), interruptions: MAX_INTERRUPTED_STARTS - 2 };
      const { adapter, outbox } = await resumeAfterRestart(record, undefined, false);
      expect(adapter.sent.map((m) => m.text)).toEqual(["two", "three"]);
      expect(outbox.get("unlucky")?.interruptions).toBeUndefined();
    });
  });

  it("at start, finished records older than the retention (a day) are pruned — all of them — and newer ones still dedupe", async () => {
    const first = await setup();
    const space = first.kv.space<OutboxRecord>("outbox");
    const day = 24 * 3600_000;
    const finished = (id: string, age: number): OutboxRecord => ({ id, target, kind: "reply", text: id, state: "sent", next: 1, messageIds: ["9"], attempts: 1, createdAt: Date.now() - age, updatedAt: Date.now() - age });
    await Promise.all(Array.from({ length: 1500 }, (_, i) => space.set(`old${i}`, finished(`old${i}`, day + 60_000))));
    await space.set("recent", finished("recent", day - 60_000));
    // Retried for hours before it finished: its retention runs from its end, not its start.
    await space.set("slow", { ...finished("slow", day + 60_000), updatedAt: Date.now() - 60_000 });
    const second = await setup({ stateDir: first.stateDir });
    const left = (await second.kv.space<OutboxRecord>("outbox").entries()).map(([k]) => k);
    expect(left).toEqual(["recent", "slow"]);
    const again = await second.outbox.enqueue({ id: "recent", target, text: "recent", kind: "reply" });
    expect(await again.done).toMatchObject({ status: "sent", messageIds: ["9"] });
    expect(second.adapter.sent).toHaveLength(0);
  });

  it("queued messages resume after a restart in the order they were enqueued, even within one millisecond and whatever order their ids sort in", async () => {
    const stateDir = freshStateDir();
    const adapter = new RecordingAdapter("telegram", "default", 50);
    adapter.limits = [{ key: "chat:-100", count: 1, intervalMs: 60_000 }];
    const t = Date.now();
    // The clock stands still and timers never fire: both later messages stay queued in the store.
    const first = await setup({ adapter, stateDir, clock: { now: () => t, sleep: () => new Promise<void>(() => {}) } });
    expect((await (await first.outbox.enqueue({ id: "m", target, text: "first", kind: "reply" })).done).status).toBe("sent");
    await first.outbox.enqueue({ id: "zz", target, text: "second", kind: "reply" });
    await first.outbox.enqueue({ id: "aa", target, text: "third", kind: "reply" });

    const second = await setup({ stateDir });
    await vi.waitFor(() => expect(second.outbox.pending).toBe(0));
    expect(second.adapter.textsTo("-100")).toEqual(["second", "third"]);
  });

  it("a chunk acknowledged before a restart is stored as sent: the restart sends the rest, none of it unknown_after_send", async () => {
    const stateDir = freshStateDir();
    const adapter = new RecordingAdapter("telegram", "default", 50);
    adapter.limits = [{ key: "chat:-100", count: 1, intervalMs: 60_000 }];
    // The second chunk waits for the chat's limit for good: the process dies there.
    const first = await setup({ adapter, stateDir, clock: { now: Date.now, sleep: () => new Promise<void>(() => {}) } });
    const chunks = [`one ${"x".repeat(40)}`, `two ${"y".repeat(40)}`];
    await first.outbox.enqueue({ id: "two-part", target, text: chunks.join("\n"), kind: "reply" });
    await vi.waitFor(() => expect(adapter.sent).toHaveLength(1));

    const second = await setup({ stateDir });
    await vi.waitFor(() => expect(second.outbox.get("two-part")?.state).toBe("sent"));
    expect(second.adapter.textsTo("-100")).toEqual([chunks[1]]);
    expect(second.outbox.get("two-part")?.messageIds).toEqual(["1", "1"]);
    expect(second.outbox.get("two-part")?.unknownChunks).toBeUndefined();
  });

  it("a queued message survives a restart and is delivered after it", async () => {
    const queued: OutboxRecord = { id: "q", target, kind: "reply", text: "still here", state: "queued", next: 0, messageIds: [], attempts: 0, createdAt: Date.now(), updatedAt: Date.now() };
    const { adapter } = await resumeAfterRestart(queued);
    expect(adapter.textsTo("-100")).toEqual(["still here"]);
  });
});

/**
 * The store refusing every write of message `id` from the write `from` picks on (a full disk: a
 * trigger on the store's own file, armed just before that write), until `writable()`. The
 * outbox's waits are held until the test wakes them.
 */
function diskFillsAt(id: string, from: (record: OutboxRecord) => boolean) {
  const waits: Array<() => void> = [];
  let db: StoreDb | undefined;
  let armed = false;
  return {
    waits,
    clock: { sleep: () => new Promise<void>((wake) => waits.push(wake)) },
    watchSpace: (space: KvSpace<OutboxRecord>): KvSpace<OutboxRecord> => ({
      ...space,
      set: async (key, record) => {
        if (!armed && key === id && from(record)) {
          armed = true;
          await db!.exec(`CREATE TRIGGER test_disk_full BEFORE UPDATE ON keyv WHEN NEW.key = 'outbox:${id}' BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END`);
        }
        return space.set(key, record);
      },
    }),
    async open(stateDir: string) {
      db = await openStoreDb(path.join(stateDir, "s.sqlite"));
      cleanups.push(() => db!.close());
    },
    writable: () => db!.exec("DROP TRIGGER test_disk_full"),
    wakeAll() {
      for (const wake of waits.splice(0)) wake();
    },
  };
}

describe("outbox: a store that stops writing mid-delivery (a full disk): the message waits for it, and its chat's next message waits behind it", () => {
  const long = `${"a".repeat(40)} ${"b".repeat(40)} ${"c".repeat(40)}`;

  async function faulted(id: string, from: (record: OutboxRecord) => boolean, adapter = new RecordingAdapter("telegram", "default", 50)) {
    const stateDir = freshStateDir();
    const fault = diskFillsAt(id, from);
    const { outbox } = await setup({ stateDir, adapter, clock: fault.clock, watchSpace: fault.watchSpace });
    await fault.open(stateDir);
    return { outbox, adapter, fault };
  }

  /** Nothing after `sentSoFar` goes out while the store refuses; once it writes again, everything does, in order. */
  async function waitsThenResumes(h: Awaited<ReturnType<typeof faulted>>, sentSoFar: string[], all: string[], dones: Array<Promise<{ status: string }>>) {
    await vi.waitFor(() => expect(h.fault.waits.length).toBeGreaterThan(0));
    expect(h.adapter.sent.map((m) => m.text)).toEqual(sentSoFar);
    await h.fault.writable();
    await vi.waitFor(() => {
      h.fault.wakeAll();
      expect(h.adapter.sent.map((m) => m.text)).toEqual(all);
    });
    for (const done of dones) expect((await done).status).toBe("sent");
  }

  it("a long reply whose progress after its first chunk is refused sends the rest once the store writes again: not left half-sent until a restart", async () => {
    const h = await faulted("long", (r) => r.next === 1);
    const first = await h.outbox.enqueue({ id: "long", target, text: long, kind: "reply" });
    const next = await h.outbox.enqueue({ id: "next", target, text: "next", kind: "reply" });
    await waitsThenResumes(h, ["a".repeat(40)], ["a".repeat(40), "b".repeat(40), "c".repeat(40), "next"], [first.done, next.done]);
  });

  it("a reply whose final 'sent' is refused is reported sent once the store writes again, not left unanswered", async () => {
    const h = await faulted("r", (r) => r.state === "sent");
    const first = await h.outbox.enqueue({ id: "r", target, text: "reply", kind: "reply" });
    const next = await h.outbox.enqueue({ id: "next", target, text: "next", kind: "reply" });
    await waitsThenResumes(h, ["reply"], ["reply", "next"], [first.done, next.done]);
  });

  it("a send to be retried after a platform failure, whose retry state is refused, is retried once the store writes again", async () => {
    const h = await faulted("r", (r) => r.failingSince !== undefined);
    h.adapter.failures.push(new PlatformError("telegram", "transport", "ECONNRESET"));
    const first = await h.outbox.enqueue({ id: "r", target, text: "reply", kind: "reply" });
    const next = await h.outbox.enqueue({ id: "next", target, text: "next", kind: "reply" });
    await waitsThenResumes(h, [], ["reply", "next"], [first.done, next.done]);
  });

  it("a chunk in doubt (the send failed after it may have arrived), whose skip is refused, is followed by the rest once the store writes again", async () => {
    const h = await faulted("long", (r) => !!r.unknownChunks?.length);
    h.adapter.failures.push(new PlatformError("telegram", "transport", "socket hang up", { outcomeUnknown: true }));
    const first = await h.outbox.enqueue({ id: "long", target, text: long, kind: "reply" });
    const next = await h.outbox.enqueue({ id: "next", target, text: "next", kind: "reply" });
    await vi.waitFor(() => expect(h.fault.waits.length).toBeGreaterThan(0));
    expect(h.adapter.sent.map((m) => m.text)).toEqual([]);
    await h.fault.writable();
    await vi.waitFor(() => {
      h.fault.wakeAll();
      expect(h.adapter.sent.map((m) => m.text)).toEqual(["b".repeat(40), "c".repeat(40), "next"]);
    });
    expect(await first.done).toMatchObject({ status: "sent", unknownChunks: [0] });
    expect((await next.done).status).toBe("sent");
  });

  it("a send interrupted by a restart, whose resumed state is refused at the next start, is sent once the store writes again", async () => {
    const earlier = await setup();
    const record: OutboxRecord = { id: "r", target, kind: "reply", text: "reply", state: "sending", chunks: ["reply"], next: 0, attempted: 0, messageIds: [], attempts: 0, createdAt: Date.now(), updatedAt: Date.now() };
    // Never reached the journal: the send had not started, so it is sent at the next start.
    await earlier.kv.space<OutboxRecord>("outbox").set("r", record);
    const fault = diskFillsAt("r", () => true);
    await fault.open(earlier.stateDir);
    const adapter = new RecordingAdapter("telegram", "default", 50);
    const { outbox } = await setup({ stateDir: earlier.stateDir, adapter, clock: fault.clock, watchSpace: fault.watchSpace });
    await vi.waitFor(() => expect(fault.waits.length).toBeGreaterThan(0));
    expect(adapter.sent).toEqual([]);
    await fault.writable();
    await vi.waitFor(() => {
      fault.wakeAll();
      expect(outbox.get("r")?.state).toBe("sent");
    });
    expect(adapter.sent.map((m) => m.text)).toEqual(["reply"]);
  });
});
