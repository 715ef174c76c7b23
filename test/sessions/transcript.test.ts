import { execFileSync } from "node:child_process";
import { appendFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import pino from "pino";
import { afterEach, describe, expect, it } from "vitest";
import { MAX_KNOWN_FILES, TranscriptStore, type TranscriptMessage } from "../../src/sessions/transcript.js";

const dirs: string[] = [];
const stores: TranscriptStore[] = [];
afterEach(async () => {
  // Closed explicitly: Node warns about (and will refuse) file handles closed by the collector.
  for (const t of stores.splice(0)) await t.close();
  dirs.splice(0).forEach((d) => rmSync(d, { recursive: true, force: true }));
});

function store(opts?: ConstructorParameters<typeof TranscriptStore>[0]): TranscriptStore {
  const t = new TranscriptStore(opts);
  stores.push(t);
  return t;
}

const user = (content: string, timestamp = 1): TranscriptMessage => ({ role: "user", content, timestamp });
const texts = (messages: TranscriptMessage[]) => messages.map((m) => m.role === "user" && m.content);

/**
 * This test process's file size limit (RLIMIT_FSIZE; Node ignores SIGXFSZ): a write past it is cut
 * short, and the next fails with EFBIG — what a disk that fills up mid-write does (then ENOSPC).
 */
function limitFileSize(bytes: number | "unlimited"): void {
  execFileSync("prlimit", ["--pid", String(process.pid), `--fsize=${bytes}:`]);
}

function ref() {
  const dir = mkdtempSync(path.join(os.tmpdir(), "sb-tr-"));
  dirs.push(dir);
  return { path: path.join(dir, "agents", "main", "sessions", "s1.jsonl"), sessionId: "s1", key: "agent:main:main" };
}

describe("transcripts (append-only JSONL)", () => {
  it("R11 writes a session header then raw message lines, read back in order", async () => {
    const t = store();
    const r = ref();
    await t.appendMessage(r, { role: "user", content: "hi", timestamp: 1 });
    await t.appendMessage(r, { role: "assistant", content: [{ type: "text", text: "hello" }], timestamp: 2 });
    const lines = readFileSync(r.path, "utf8").trim().split("\n").map((l) => JSON.parse(l));
    expect(lines[0]).toMatchObject({ type: "session", id: "s1", key: "agent:main:main" });
    expect(lines[2].parentId).toBe(lines[1].id);
    expect((await t.readMessages(r.path)).map((m) => m.role)).toEqual(["user", "assistant"]);
  });

  it("reads the last N messages of a long transcript from the end", async () => {
    const t = store();
    const r = ref();
    for (let i = 0; i < 3000; i++) await t.appendMessage(r, { role: "user", content: `m${i} ${"x".repeat(50)}`, timestamp: i });
    await t.appendDelivery(r, { status: "suppressed", outboxId: "o", channel: "telegram", to: "1" });
    const last = await t.readMessages(r.path, 200);
    expect(last).toHaveLength(200);
    expect(last[0].content).toMatch(/^m2800 /);
    expect(last[199].content).toMatch(/^m2999 /);
    // Far more than one 64 KiB block back: the lines cut by block boundaries come back whole too.
    const most = await t.readMessages(r.path, 2500);
    expect(most.map((m) => (m.content as string).split(" ")[0])).toEqual(Array.from({ length: 2500 }, (_, i) => `m${i + 500}`));
  });

  it("R11 a message's parent is the message before it, not a delivery record between them, in this store and in a fresh one alike", async () => {
    const t = store();
    const r = ref();
    const first = await t.appendMessage(r, user("question", 1));
    await t.appendDelivery(r, { status: "sent", outboxId: "o1", channel: "telegram", to: "1" });
    const second = await t.appendMessage(r, user("answer", 2));
    await t.appendDelivery(r, { status: "sent", outboxId: "o2", channel: "telegram", to: "1" });
    await store().appendMessage(r, user("later", 3));
    const lines = (await store().readLines(r.path)).filter((l) => l.type === "message");
    expect(lines.map((l) => l.type === "message" && l.parentId)).toEqual([null, first, second]);
  });

  it("a torn last line (killed mid-write) is skipped and fenced off before the next append", async () => {
    const t = store();
    const r = ref();
    await t.appendMessage(r, { role: "user", content: "one", timestamp: 1 });
    appendFileSync(r.path, '{"type":"message","id":"torn","mess');
    const fresh = store();
    await fresh.appendMessage(r, { role: "user", content: "two", timestamp: 2 });
    expect((await fresh.readMessages(r.path)).map((m) => m.role === "user" && m.content)).toEqual(["one", "two"]);
    expect((await fresh.readMessages(r.path, 5)).length).toBe(2);
  });

  it.each([
    ["synchronous", true],
    ["asynchronous", false],
  ])("a line cut short by a full disk (a short write, then the error) is fenced off by the same store (%s writes): the next line, once there is room, reads back whole and follows the last whole one", async (_mode, syncWrites) => {
    const t = store();
    t.syncWrites = syncWrites;
    const r = ref();
    const before = await t.appendMessage(r, user("before", 1));
    // The file may grow by 20 bytes more: the next line is cut there, as on a disk that fills mid-write.
    limitFileSize(statSync(r.path).size + 20);
    try {
      await expect(t.appendMessage(r, user("x".repeat(200), 2))).rejects.toMatchObject({ code: "EFBIG" });
    } finally {
      limitFileSize("unlimited");
    }
    await t.appendMessage(r, user("after", 3));
    expect(texts(await store().readMessages(r.path))).toEqual(["before", "after"]);
    const lines = (await store().readLines(r.path)).filter((l) => l.type === "message");
    expect(lines.map((l) => l.type === "message" && l.parentId)).toEqual([null, before]);
  });

  it("a torn line does not count toward a read's limit: the last N messages are N whole ones, before and after the next append, from a fresh store too", async () => {
    const t = store();
    const r = ref();
    for (let i = 0; i < 10; i++) await t.appendMessage(r, { role: "user", content: `m${i}`, timestamp: i });
    appendFileSync(r.path, '{"type":"message","id":"torn","mess');
    expect(texts(await store().readMessages(r.path, 5))).toEqual(["m5", "m6", "m7", "m8", "m9"]);
    await store().appendMessage(r, { role: "user", content: "m10", timestamp: 10 });
    // The torn line now sits mid-file, among the lines a read of the last five passes over.
    expect(texts(await store().readMessages(r.path, 5))).toEqual(["m6", "m7", "m8", "m9", "m10"]);
  });

  it("a fresh store appending to a transcript that ended cleanly adds no blank line; a torn tail of one byte is fenced off too", async () => {
    const r = ref();
    await store().appendMessage(r, user("one"));
    await store().appendMessage(r, user("two"));
    expect(readFileSync(r.path, "utf8").trimEnd().split("\n").map((l) => JSON.parse(l).type)).toEqual(["session", "message", "message"]);
    appendFileSync(r.path, "{");
    await store().appendMessage(r, user("three"));
    expect(texts(await store().readMessages(r.path))).toEqual(["one", "two", "three"]);
  });

  it("R11 a transcript file left empty (created, then killed before its first write) gets its session header before the first line", async () => {
    const r = ref();
    mkdirSync(path.dirname(r.path), { recursive: true });
    writeFileSync(r.path, "");
    const t = store();
    await t.appendMessage(r, { role: "user", content: "first", timestamp: 1 });
    const lines = readFileSync(r.path, "utf8").trim().split("\n").map((l) => JSON.parse(l));
    expect(lines.map((l) => l.type)).toEqual(["session", "message"]);
    expect(lines[0]).toMatchObject({ id: "s1", key: "agent:main:main" });
    expect((await t.readMessages(r.path)).map((m) => m.role === "user" && m.content)).toEqual(["first"]);
  });

  it("appends to more transcripts than open handles are kept (1,024): every line lands once, in order, and reads back", async () => {
    const t = store();
    const base = ref();
    const refs = Array.from({ length: 1100 }, (_, i) => ({ ...base, path: base.path.replace("s1.jsonl", `s${i}.jsonl`), sessionId: `s${i}` }));
    // Interleaved, unawaited: the first append of a file opens it, later ones take the synchronous path.
    const writes = refs.flatMap((r, i) => [t.appendMessage(r, { role: "user", content: `a${i}`, timestamp: 1 }), t.appendMessage(r, { role: "user", content: `b${i}`, timestamp: 2 })]);
    await Promise.all(writes);
    for (const [i, r] of refs.entries()) await t.appendMessage(r, { role: "user", content: `c${i}`, timestamp: 3 });
    await t.close();
    for (const [i, r] of refs.entries()) {
      const lines = readFileSync(r.path, "utf8").trim().split("\n").map((l) => JSON.parse(l));
      expect(lines.map((l) => l.message?.content ?? l.type)).toEqual(["session", `a${i}`, `b${i}`, `c${i}`]);
    }
    expect((await store().readMessages(refs[5].path)).map((m) => m.role === "user" && m.content)).toEqual(["a5", "b5", "c5"]);
  });

  it("appends stay synchronous through a few slow writes (a busy host) and turn asynchronous, with a warning, once 4 of the last 16 were slow (a slow disk)", async () => {
    // Each append reads the clock before and after its write: `step` is how long a write takes.
    let clock = 0;
    let step = 0.1;
    const warnings: Array<{ msg: string }> = [];
    const t = store({ now: () => (clock += step), log: pino({ level: "warn" }, { write: (line: string) => void warnings.push(JSON.parse(line)) }) });
    const r = ref();
    let n = 0;
    const append = async (ms: number, count: number) => {
      step = ms;
      for (let i = 0; i < count; i++) await t.appendMessage(r, { role: "user", content: `m${n++}`, timestamp: n });
    };
    await append(0.1, 2);
    await append(25, 3);
    await append(0.1, 13);
    // The first three slow ones are 16 writes back now: three more are still not four in sixteen.
    await append(25, 3);
    expect(t.syncWrites).toBe(true);
    expect(warnings).toEqual([]);
    await append(0.1, 5);
    await append(25, 1);
    expect(t.syncWrites).toBe(false);
    expect(warnings.map((w) => w.msg)).toEqual([expect.stringMatching(/^transcript appends are slow \(over 20 ms\)/)]);
    await append(0.1, 3);
    const contents = (await store().readMessages(r.path)).map((m) => m.role === "user" && m.content);
    expect(contents).toEqual(Array.from({ length: n }, (_, i) => `m${i}`));
    // The appending store answers from its cached tail, which the asynchronous appends must extend too.
    expect(texts(await t.readMessages(r.path))).toEqual(contents);
  });

  it("a read of the last N that finds exactly N is not taken for the whole transcript: a later full read returns every message", async () => {
    const t = store();
    const r = ref();
    for (let i = 0; i < 10; i++) await t.appendMessage(r, user(`m${i}`, i));
    // A store that did not write the file knows nothing of its length (as after a restart).
    const fresh = store();
    expect(texts(await fresh.readMessages(r.path, 5))).toEqual(["m5", "m6", "m7", "m8", "m9"]);
    expect(texts(await fresh.readMessages(r.path))).toHaveLength(10);
    expect(texts(await fresh.readMessages(r.path, 8))).toEqual(["m2", "m3", "m4", "m5", "m6", "m7", "m8", "m9"]);
  });

  it("a read that races appends to the same file leaves no stale tail behind: the next read of the same store has every appended message", async () => {
    const r = ref();
    const first = store();
    for (let i = 0; i < 10; i++) await first.appendMessage(r, user(`m${i}`, i));
    let n = 10;
    for (let round = 0; round < 10; round++) {
      // A store whose only append opened the file: nothing cached, so the read goes to the file
      // while the appends below take the synchronous path, one per event-loop turn.
      const t = store();
      await t.appendMessage(r, user(`m${n++}`));
      let reading = true;
      const read = t.readMessages(r.path, 5).finally(() => (reading = false));
      while (reading) {
        await t.appendMessage(r, user(`m${n++}`));
        await new Promise((resolve) => setImmediate(resolve));
      }
      await read;
      const last = Array.from({ length: 5 }, (_, i) => `m${n - 5 + i}`);
      expect(texts(await t.readMessages(r.path, 5)), `round ${round}`).toEqual(last);
    }
  });

  it("an append made while earlier appends of the same file are still queued lands after them", async () => {
    const t = store();
    const r = ref();
    // The first append of a file goes through the queue (it opens the file), and so do those issued with it.
    const queued = ["a", "b", "c"].map((text) => t.appendMessage(r, user(text)));
    await queued[0];
    await t.appendMessage(r, user("d"));
    await Promise.all(queued);
    expect(texts(await store().readMessages(r.path))).toEqual(["a", "b", "c", "d"]);
    // Each line names the one written before it as its parent, appends issued together included.
    const lines = readFileSync(r.path, "utf8").trim().split("\n").map((l) => JSON.parse(l)).slice(1);
    expect(lines.map((l) => l.parentId)).toEqual([null, ...lines.slice(0, -1).map((l) => l.id)]);
  });

  it("R11 a first append that fails is refused alone: the file still gets its session header, and the append queued behind it lands", async () => {
    const t = store();
    const r = ref();
    // Tool-call arguments are arbitrary values; one JSON cannot hold stands for any failed write.
    const bad = t.appendMessage(r, { role: "assistant", content: [{ type: "toolCall", id: "c1", name: "x", arguments: { n: 1n } }], timestamp: 1 });
    const good = t.appendMessage(r, user("after"));
    await expect(bad).rejects.toThrow(/BigInt/);
    await good;
    await t.flush();
    const lines = readFileSync(r.path, "utf8").trim().split("\n").map((l) => JSON.parse(l));
    expect(lines.map((l) => l.type)).toEqual(["session", "message"]);
    expect(texts(await store().readMessages(r.path))).toEqual(["after"]);
  });

  it("a message line that failed to be written is no one's parent: the next line links to the last line in the file", async () => {
    const t = store();
    const r = ref();
    const first = await t.appendMessage(r, user("first"));
    await expect(t.appendMessage(r, { role: "assistant", content: [{ type: "toolCall", id: "c1", name: "x", arguments: { n: 1n } }], timestamp: 2 })).rejects.toThrow(/BigInt/);
    await t.appendMessage(r, user("third"));
    const messages = readFileSync(r.path, "utf8").trim().split("\n").map((l) => JSON.parse(l)).filter((l) => l.type === "message");
    expect(messages.map((l) => [l.message.content, l.parentId])).toEqual([["first", null], ["third", first]]);
  });

  it("close() leaves the store usable: an append after it reopens the file and lands after the earlier lines", async () => {
    const t = store();
    const r = ref();
    await t.appendMessage(r, user("before"));
    await t.close();
    await t.appendMessage(r, user("after"));
    expect(texts(await t.readMessages(r.path))).toEqual(["before", "after"]);
    expect(texts(await store().readMessages(r.path))).toEqual(["before", "after"]);
  });

  it("the cached tail holds what was written, not the caller's object: changing it after the append changes no read", async () => {
    const t = store();
    const r = ref();
    const message = { role: "user" as const, content: "as sent", timestamp: 1 };
    await t.appendMessage(r, message);
    message.content = "changed later";
    expect(texts(await t.readMessages(r.path))).toEqual(["as sent"]);
  });

  it("a missing transcript reads as empty", async () => {
    const t = store();
    expect(await t.readMessages("/nonexistent/x.jsonl", 10)).toEqual([]);
  });
});

describe("transcripts in a daemon that runs for months", () => {
  it("what the store keeps per file stays bounded over 5,000 sessions, and a file written again after it was forgotten continues its parent chain", async () => {
    const t = store();
    const dir = mkdtempSync(path.join(os.tmpdir(), "sb-tr-"));
    dirs.push(dir);
    const refs = Array.from({ length: 5000 }, (_, i) => ({ path: path.join(dir, `s${i}.jsonl`), sessionId: `s${i}`, key: `agent:main:s${i}` }));
    const firstIds: string[] = [];
    for (let i = 0; i < refs.length; i += 100) firstIds.push(...(await Promise.all(refs.slice(i, i + 100).map((r) => t.appendMessage(r, user("hi"))))));
    // More files than the store keeps: the first ones were forgotten, or this would test nothing.
    expect(MAX_KNOWN_FILES).toBeLessThan(refs.length);
    expect(t.knownFiles).toBeLessThanOrEqual(MAX_KNOWN_FILES);

    // The first session speaks again, long after the store forgot it.
    await t.appendMessage(refs[0], user("again"));
    const lines = readFileSync(refs[0].path, "utf8").trim().split("\n").map((l) => JSON.parse(l));
    expect(lines.map((l) => l.type)).toEqual(["session", "message", "message"]);
    expect(lines[2].parentId).toBe(firstIds[0]);
    expect(texts(await t.readMessages(refs[0].path))).toEqual(["hi", "again"]);
  });
});
