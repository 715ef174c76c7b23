import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { openSendJournal, parseJournal, type SendJournal } from "../../src/delivery/send-journal.js";

const opened: SendJournal[] = [];
const dirs: string[] = [];
afterEach(() => {
  for (const j of opened.splice(0)) j.close();
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

function journalFile(): string {
  const dir = mkdtempSync(path.join(os.tmpdir(), "sb-journal-"));
  dirs.push(dir);
  return path.join(dir, "state", "outbox-journal.jsonl");
}

function open(file: string): SendJournal {
  const j = openSendJournal(file);
  opened.push(j);
  return j;
}

const onDisk = (file: string) => parseJournal(readFileSync(file, "utf8"));

describe("send journal — which interrupted sends may have reached the platform", () => {
  it("a line is on disk as soon as starting() returns, without close (a process kill loses nothing written)", () => {
    const file = journalFile();
    const j = open(file);
    j.starting("reply:1", 0);
    expect(onDisk(file).get("reply:1")).toEqual(new Set([0]));
    const next = open(file);
    expect(next.mayHaveStarted("reply:1", 0)).toBe(true);
    expect(next.mayHaveStarted("reply:1", 1)).toBe(false);
    expect(next.mayHaveStarted("reply:2", 0)).toBe(false);
  });

  it.each([
    ["a newline", "send:a\nb"],
    ["a tab and quotes", 'send:"x"\t\\y'],
    ["a lone surrogate", "send:\uD800"],
    ["emoji", "send:🦀"],
  ])("ids with %s round-trip as one line", (_label, id) => {
    const file = journalFile();
    open(file).starting(id, 3);
    expect(readFileSync(file, "utf8").split("\n").filter(Boolean)).toHaveLength(1);
    expect(open(file).mayHaveStarted(id, 3)).toBe(true);
  });

  it.each([
    ["a line torn by a kill mid-write", '["reply:ok",0]\n["reply:to'],
    ["garbage", '["reply:ok",0]\nnot json\n{"a":1}\n["x"]\n["y","0"]\n[1,2]\n'],
  ])("skips %s and keeps the whole lines", (_label, text) => {
    const parsed = parseJournal(text);
    expect([...parsed.keys()]).toEqual(["reply:ok"]);
  });

  it("retain() keeps only the earlier lines still needed, in the file too", () => {
    const file = journalFile();
    const first = open(file);
    first.starting("a", 0);
    first.starting("b", 2);
    first.starting("c", 1);
    const second = open(file);
    second.retain((id, chunk) => id === "b" && chunk === 2);
    expect(second.mayHaveStarted("a", 0)).toBe(false);
    expect(second.mayHaveStarted("b", 2)).toBe(true);
    expect([...onDisk(file).keys()]).toEqual(["b"]);
  });

  it("settled() lines leave the file at the next rewrite; open ones stay, whoever wrote them", () => {
    const file = journalFile();
    const first = open(file);
    first.starting("earlier-open", 0);
    first.starting("earlier-settled", 0);
    const j = open(file);
    j.retain(() => true);
    j.settled("earlier-settled");
    j.starting("mine-open", 0);
    j.starting("mine-settled", 0);
    j.settled("mine-settled");
    // Enough appends to pass the rewrite threshold (1 MiB), each settled at once.
    const pad = "x".repeat(1000);
    for (let i = 0; i < 1100; i++) {
      j.starting(`${pad}${i}`, 0);
      j.settled(`${pad}${i}`);
    }
    const left = onDisk(file);
    expect(left.has("earlier-open")).toBe(true);
    expect(left.has("mine-open")).toBe(true);
    expect(left.has("earlier-settled")).toBe(false);
    expect(left.has("mine-settled")).toBe(false);
    expect(readFileSync(file, "utf8").length).toBeLessThan(1 << 20);
    expect(existsSync(`${file}.tmp`)).toBe(false);
  });

  it("no file at all (a state directory from before the journal, or restored without it): every interrupted send may have started", () => {
    const j = open(journalFile());
    expect(j.mayHaveStarted("anything", 0)).toBe(true);
  });

  it("a file with no line for a chunk: that chunk never started", () => {
    const file = journalFile();
    open(file).starting("other", 0);
    expect(open(file).mayHaveStarted("anything", 0)).toBe(false);
  });

  it("a leftover temp file from a kill mid-rewrite does not matter: the journal is the renamed file", () => {
    const file = journalFile();
    open(file).starting("kept", 0);
    writeFileSync(`${file}.tmp`, '["half-written",0]\n');
    const j = open(file);
    expect(j.mayHaveStarted("kept", 0)).toBe(true);
    expect(j.mayHaveStarted("half-written", 0)).toBe(false);
  });
});
