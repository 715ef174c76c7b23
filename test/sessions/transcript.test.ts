import { appendFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import pino from "pino";
import { afterEach, describe, expect, it } from "vitest";
import { TranscriptStore } from "../../src/sessions/transcript.js";

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

  it("a torn line does not count toward a read's limit: the last N messages are N whole ones, before and after the next append, from a fresh store too", async () => {
    const t = store();
    const r = ref();
    for (let i = 0; i < 10; i++) await t.appendMessage(r, { role: "user", content: `m${i}`, timestamp: i });
    appendFileSync(r.path, '{"type":"message","id":"torn","mess');
    const texts = (messages: Awaited<ReturnType<TranscriptStore["readMessages"]>>) => messages.map((m) => m.role === "user" && m.content);
    expect(texts(await store().readMessages(r.path, 5))).toEqual(["m5", "m6", "m7", "m8", "m9"]);
    await store().appendMessage(r, { role: "user", content: "m10", timestamp: 10 });
    // The torn line now sits mid-file, among the lines a read of the last five passes over.
    expect(texts(await store().readMessages(r.path, 5))).toEqual(["m6", "m7", "m8", "m9", "m10"]);
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
  });

  it("a missing transcript reads as empty", async () => {
    const t = store();
    expect(await t.readMessages("/nonexistent/x.jsonl", 10)).toEqual([]);
  });
});
