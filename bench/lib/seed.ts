/**
 * Seeds a state directory the way a long-running daemon would have left it: session entries in
 * the SQLite store (written through the daemon's own store code, so the format is the real one)
 * and a long JSONL transcript, before the daemon under test starts.
 */
import { randomUUID } from "node:crypto";
import { mkdirSync, writeFileSync } from "node:fs";
import path from "node:path";
import type { SessionEntry } from "../../src/sessions/entry.js";
import type { TranscriptLine } from "../../src/sessions/transcript.js";
import { openKvStore } from "../../src/store/kv.js";

/** A realistic entry: a Telegram group or direct chat that ran a few turns. */
export function seedEntry(i: number, now: number): SessionEntry {
  const group = i % 3 === 0;
  const id = group ? `-100${1_000_000 + i}` : String(5_000_000 + i);
  const key = group ? `agent:main:telegram:group:${id}` : `agent:main:telegram:direct:${id}`;
  return {
    key,
    sessionId: randomUUID(),
    agentId: "main",
    createdAt: now - 3_600_000 - i,
    updatedAt: now - 1_000_000 + i,
    chatType: group ? "group" : "direct",
    ...(group ? { channel: "telegram" as const, displayName: `Group ${i}` } : { displayName: `User ${i}` }),
    lastModel: "fake/m",
    inputTokens: 1200 + (i % 500),
    outputTokens: 300 + (i % 200),
    totalTokens: 1500 + (i % 700),
    contextTokens: 900,
    systemSent: true,
    abortedLastRun: false,
    lastChannel: "telegram",
    lastTo: id,
    lastAccountId: "default",
    deliveryContext: { channel: "telegram", to: id, accountId: "default" },
  };
}

/** Writes `count` session entries into `<stateDir>/switchboard.sqlite`; returns their keys. */
export async function seedSessions(stateDir: string, count: number): Promise<SessionEntry[]> {
  mkdirSync(stateDir, { recursive: true });
  const kv = await openKvStore(`sqlite://${path.join(stateDir, "switchboard.sqlite")}`, stateDir);
  const space = kv.space<SessionEntry>("sessions");
  const now = Date.now();
  const entries: SessionEntry[] = [];
  const CHUNK = 4000;
  for (let start = 0; start < count; start += CHUNK) {
    const batch = Array.from({ length: Math.min(CHUNK, count - start) }, (_, j) => seedEntry(start + j, now));
    entries.push(...batch);
    // Concurrent writes are group-committed by the store (hundreds of rows per statement).
    await Promise.all(batch.map((e) => space.set(e.key, e)));
  }
  await kv.close();
  return entries;
}

/** Writes a transcript of `messages` alternating user/assistant lines for `entry`. */
export function seedTranscript(stateDir: string, entry: SessionEntry, messages: number): string {
  const file = path.join(stateDir, "agents", entry.agentId, "sessions", `${entry.sessionId}.jsonl`);
  mkdirSync(path.dirname(file), { recursive: true });
  const t0 = Date.now() - messages * 1000;
  const lines: string[] = [];
  const header: TranscriptLine = { type: "session", version: 1, id: entry.sessionId, key: entry.key, timestamp: new Date(t0).toISOString() };
  lines.push(JSON.stringify(header));
  let parent: string | null = null;
  for (let i = 0; i < messages; i++) {
    const id = randomUUID().slice(0, 8);
    const ts = t0 + i * 1000;
    const message =
      i % 2 === 0
        ? { role: "user" as const, content: `question ${i}: ${"lorem ipsum dolor sit amet ".repeat(4)}`, timestamp: ts, provenance: { kind: "external_user" as const }, sender: { id: "5000001", name: "Ada", channel: "telegram" } }
        : {
            role: "assistant" as const,
            content: [{ type: "text" as const, text: `answer ${i}: ${"consectetur adipiscing elit ".repeat(6)}` }],
            timestamp: ts,
            model: "m",
            provider: "fake",
            usage: { input: 900, output: 60, totalTokens: 960 },
            stopReason: "stop" as const,
          };
    const line: TranscriptLine = { type: "message", id, parentId: parent, timestamp: new Date(ts).toISOString(), message };
    parent = id;
    lines.push(JSON.stringify(line));
    if (i % 2 === 1) lines.push(JSON.stringify({ type: "delivery", id: randomUUID().slice(0, 8), timestamp: new Date(ts).toISOString(), status: "sent", outboxId: `reply:x${i}`, channel: "telegram", to: "5000001" }));
  }
  writeFileSync(file, `${lines.join("\n")}\n`);
  return file;
}
