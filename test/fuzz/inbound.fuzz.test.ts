/**
 * Hostile inbound messages at the router's trust boundary (`router.accept`, what every adapter
 * calls): thousands of generated InboundMessage-like values — mostly plausible with hostile
 * fields, sometimes anything at all — from owners and strangers, with repeats. Each call resolves
 * accepted / duplicate / rejected-with-a-reason within a bound; a blank id is always rejected
 * (a rule stated here, not taken from the router's schema); everything accepted is processed to
 * the end; every record written to the inbound space (seen in the SQLite file itself, through
 * triggers) holds the parsed message — strictly the schema's fields, unknown ones dropped —
 * afterwards the store holds only well-formed session entries and inbound records, and every
 * transcript line parses.
 */
import path from "node:path";
import fc from "fast-check";
import sqlite3 from "sqlite3";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import { InboundMessageSchema, type AcceptOutcome } from "../../src/inbound/router.js";
import { deserializeKeyv } from "../../src/store/kv.js";
import { startHarness, type Harness } from "../helpers/harness.js";
import { FUZZ_SEED, hostileString, hostileValue, mostly } from "../helpers/hostile.js";
import { RecordingAdapter } from "../helpers/recording-adapter.js";
import { checkState } from "../helpers/state-check.js";

const CASES = 3000;
const CASE_BOUND_MS = 5000;
const OWNER = "1001";

/**
 * Every write to the inbound space as it reached the store: SQLite triggers on the store's table
 * copy each inserted or updated `inbound:` row to a table of the test's own. Nothing of the
 * daemon is replaced or wrapped.
 */
async function auditInboundWrites(file: string) {
  const db = await new Promise<sqlite3.Database>((resolve, reject) => {
    const d = new sqlite3.Database(file, (err) => (err ? reject(err) : resolve(d)));
  });
  db.configure("busyTimeout", 10_000);
  const copy = "WHEN substr(NEW.key, 1, 8) = 'inbound:' BEGIN INSERT INTO test_inbound_writes (key, value) VALUES (NEW.key, NEW.value); END";
  await new Promise<void>((resolve, reject) =>
    db.exec(
      `CREATE TABLE test_inbound_writes (seq INTEGER PRIMARY KEY, key TEXT NOT NULL, value TEXT NOT NULL);
       CREATE TRIGGER test_inbound_insert AFTER INSERT ON keyv ${copy};
       CREATE TRIGGER test_inbound_update AFTER UPDATE ON keyv ${copy};`,
      (err) => (err ? reject(err) : resolve()),
    ),
  );
  return {
    /** [inbound id, stored value] per write, in commit order. */
    writes: () =>
      new Promise<Array<[string, unknown]>>((resolve, reject) =>
        db.all<{ key: string; value: string }>("SELECT key, value FROM test_inbound_writes ORDER BY seq", (err, rows) =>
          err ? reject(err) : resolve(rows.map((r) => [r.key.slice("inbound:".length), deserializeKeyv(r.value).value])),
        ),
      ),
    close: () => new Promise<void>((resolve) => db.close(() => resolve())),
  };
}

let h: Harness;
let audit: Awaited<ReturnType<typeof auditInboundWrites>>;
beforeAll(async () => {
  h = await startHarness({
    config: { commands: { owners: [`telegram:${OWNER}`, `discord:${OWNER}`] }, session: { dmScope: "per-channel-peer" }, agents: { defaults: { maxConcurrent: 8, runTimeoutSeconds: 5 } } },
    adapters: [new RecordingAdapter("telegram"), new RecordingAdapter("discord"), new RecordingAdapter("whatsapp")],
  });
  audit = await auditInboundWrites(path.join(h.stateDir, "switchboard.sqlite"));
});
afterAll(async () => {
  await audit?.close();
  await h?.stop();
});

/** Ids end up in store and session keys: each of these, when present, must not be blank. */
const ID_FIELDS = ["accountId", "peerId", "messageId", "to", "threadId", "parentPeerId"] as const;
/** Blank: empty or whitespace only (JavaScript's \s, the set String#trim removes). */
const isBlank = (v: unknown) => typeof v === "string" && /^\s*$/u.test(v);
const blanks = fc.constantFrom("", " ", "   ", "\t", "\n", "\r\n", "\u00a0", "\u2003", "\u3000", "\ufeff", " \u2028 ");

const ids = fc.oneof({ weight: 4, arbitrary: fc.constantFrom("1001", "2002", "-100200", "-100300", "a@b", "120363@g.us", "42") }, { weight: 1, arbitrary: hostileString });
const texts = fc.oneof(
  { weight: 3, arbitrary: fc.string({ maxLength: 80 }) },
  { weight: 2, arbitrary: fc.constantFrom("/send off", "/send on", "/send inherit", "/status", "/sid", "/new hello", "/reset", "/stop", "/help", "/send@SwitchboardTestBot off", "hi @SwitchboardTestBot") },
  { weight: 1, arbitrary: hostileString },
);

const plausibleMessage = fc.record(
  {
    channel: mostly(fc.constantFrom("telegram", "discord", "whatsapp", "webchat")),
    accountId: mostly(fc.constantFrom("default", "second")),
    chatType: mostly(fc.constantFrom("direct", "group", "channel")),
    peerId: mostly(ids),
    threadId: mostly(fc.constantFrom("1", "7", "topic")),
    parentPeerId: mostly(ids),
    senderId: mostly(fc.constantFrom(OWNER, "2002", "3003", "")),
    senderName: mostly(fc.constantFrom("Owner", "Mallory", "1001", "Owner (admin)")),
    groupName: mostly(fc.string({ maxLength: 20 })),
    text: mostly(texts),
    messageId: mostly(fc.oneof(fc.integer({ min: 1, max: 400 }).map(String), hostileString)),
    wasMentioned: mostly(fc.boolean()),
    to: mostly(ids),
    timestamp: mostly(fc.integer({ min: 0, max: 2 ** 42 })),
    forwarded: mostly(fc.boolean()),
    edited: mostly(fc.boolean()),
  },
  { requiredKeys: ["channel", "accountId", "chatType", "peerId", "senderId", "text", "messageId", "wasMentioned", "to", "timestamp"] },
);

/** Well-formed messages (hostile only in content): these reach keys, entries, runs and replies. */
const validMessage = fc.record(
  {
    channel: fc.constantFrom("telegram", "discord", "whatsapp", "webchat"),
    accountId: fc.constantFrom("default", "second"),
    chatType: fc.constantFrom("direct", "group", "channel"),
    peerId: fc.oneof(ids.filter((s) => s.trim().length > 0 && !/\p{Cs}/u.test(s) && s.length <= 512)),
    threadId: fc.constantFrom("1", "7", "topic"),
    senderId: fc.constantFrom(OWNER, "2002", "3003"),
    senderName: fc.constantFrom("Owner", "Mallory", "1001"),
    text: texts,
    messageId: fc.integer({ min: 1, max: 600 }).map(String),
    wasMentioned: fc.boolean(),
    to: fc.constantFrom("1001", "-100200", "42"),
    timestamp: fc.integer({ min: 0, max: 2 ** 42 }),
    forwarded: fc.boolean(),
    edited: fc.boolean(),
  },
  { requiredKeys: ["channel", "accountId", "chatType", "peerId", "senderId", "text", "messageId", "wasMentioned", "to", "timestamp"] },
);

/** A message that would be valid but for one blank id. */
const blankIdMessage = fc.tuple(validMessage, fc.constantFrom(...ID_FIELDS), blanks).map(([m, field, blank]) => ({ ...m, [field]: blank }));

/** A valid message carrying fields the schema does not know (an adapter passing platform extras, or worse). */
const extraFieldsMessage = fc
  .tuple(validMessage, fc.record({ isOwner: fc.constant(true), sessionKey: fc.constant("agent:main:main"), raw: hostileValue, update_id: fc.nat() }, { requiredKeys: [] }), fc.dictionary(hostileString, hostileValue, { maxKeys: 2 }))
  .map(([m, known, extra]) => ({ ...extra, ...known, ...m }));

const inboundCase: fc.Arbitrary<unknown> = fc.oneof(
  { weight: 6, arbitrary: validMessage },
  { weight: 4, arbitrary: plausibleMessage },
  { weight: 1, arbitrary: blankIdMessage },
  { weight: 1, arbitrary: extraFieldsMessage },
  { weight: 1, arbitrary: hostileValue },
  { weight: 1, arbitrary: fc.anything() },
  // Prototype games: own "__proto__"/"constructor" keys as JSON.parse creates them.
  { weight: 1, arbitrary: validMessage.map((m) => JSON.parse(`{"__proto__":{"senderId":"${OWNER}","isOwner":true},${JSON.stringify(m).slice(1)}`) as unknown) },
);

function bounded<T>(p: Promise<T>, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([p, new Promise<T>((_, reject) => (timer = setTimeout(() => reject(new Error(`${what}: no answer within ${CASE_BOUND_MS} ms`)), CASE_BOUND_MS)))]).finally(() => clearTimeout(timer));
}

describe("router.accept under hostile inbound messages", () => {
  it(`fuzz: ${CASES} generated inbound messages are each accepted, deduplicated or rejected with a reason — never a throw or a hang; a blank id is always rejected`, async () => {
    const outcomes = new Map<string, number>();
    let blankIdCases = 0;
    await fc.assert(
      fc.asyncProperty(inboundCase, async (input) => {
        const out: AcceptOutcome = await bounded(h.app.router.accept(input as never), `accept(${JSON.stringify(input)?.slice(0, 200)})`);
        outcomes.set(out.status, (outcomes.get(out.status) ?? 0) + 1);
        if (!["accepted", "duplicate", "rejected"].includes(out.status)) throw new Error(`unexpected outcome ${JSON.stringify(out)}`);
        const valid = InboundMessageSchema.safeParse(input).success;
        // The router's own schema decides `valid`; this rule does not lean on it.
        const blankIds = input !== null && typeof input === "object" ? ID_FIELDS.filter((f) => Object.hasOwn(input, f) && isBlank((input as Record<string, unknown>)[f])) : [];
        if (blankIds.length) {
          blankIdCases++;
          if (out.status !== "rejected") throw new Error(`a message with a blank ${blankIds.join(", ")} was ${out.status}: ${JSON.stringify(input)?.slice(0, 300)}`);
          const unnamed = blankIds.filter((f) => !out.error.includes(f));
          if (unnamed.length) throw new Error(`the rejection does not name the blank ${unnamed.join(", ")}: ${out.error}`);
        }
        if (out.status === "rejected") {
          if (valid) throw new Error(`a valid message was rejected: ${out.error}`);
          if (!/^invalid inbound message: .+/.test(out.error)) throw new Error(`unclear rejection: ${out.error}`);
        } else if (!valid) throw new Error(`an invalid message was ${out.status}: ${JSON.stringify(input)?.slice(0, 200)}`);
      }),
      { numRuns: CASES, seed: FUZZ_SEED + 2, endOnFailure: true },
    );
    console.info(`inbound fuzz: ${CASES} messages → ${[...outcomes].map(([k, v]) => `${v} ${k}`).join(", ")}; ${blankIdCases} with a blank id`);
    expect(outcomes.get("accepted") ?? 0).toBeGreaterThan(CASES / 4);
    expect(blankIdCases).toBeGreaterThan(CASES / 20);
    expect(outcomes.get("rejected") ?? 0).toBeGreaterThan(CASES / 20);
    // Everything accepted runs to the end (bounded), and the daemon still answers.
    await bounded(h.app.router.idle(), "router.idle()");
    expect(h.model.requests.length).toBeGreaterThan(100);
    const client = await h.client();
    expect((await client.request("health", {})).ok).toBe(true);
  }, 120_000);

  it("fuzz: every record written to the inbound space holds the parsed message: strictly the schema's fields (unknown ones dropped), under its own id", async () => {
    await h.app.router.idle();
    const StoredRecord = z.union([
      z.strictObject({ id: z.string(), msg: InboundMessageSchema.strict(), state: z.enum(["pending", "recorded"]), receivedAt: z.number() }),
      z.strictObject({ id: z.string(), state: z.literal("done"), receivedAt: z.number() }),
    ]);
    const writes = await audit.writes();
    const problems: string[] = [];
    for (const [key, rec] of writes) {
      const parsed = StoredRecord.safeParse(rec);
      if (!parsed.success) problems.push(`${key}: ${parsed.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`).join("; ")} in ${JSON.stringify(rec)?.slice(0, 300)}`);
      else if (parsed.data.id !== key) problems.push(`${key}: holds the id ${parsed.data.id}`);
      else if ("msg" in parsed.data && key !== `${parsed.data.msg.channel}:${parsed.data.msg.accountId}:${parsed.data.msg.messageId}`) problems.push(`${key}: holds a message of another id`);
      else if ("msg" in parsed.data && ID_FIELDS.some((f) => isBlank((parsed.data as { msg: Record<string, unknown> }).msg[f]))) problems.push(`${key}: a blank id was stored`);
    }
    console.info(`inbound fuzz: ${writes.length} writes to the inbound space checked`);
    if (problems.length) throw new Error(`${problems.length} of ${writes.length} inbound writes do not hold the parsed message, e.g.:\n${problems.slice(0, 5).join("\n")}`);
    // Each accepted message was written at least twice (pending, then done).
    expect(writes.filter(([, r]) => (r as { state?: string }).state === "pending").length).toBeGreaterThan(CASES / 4);
    expect(writes.filter(([, r]) => (r as { state?: string }).state === "done").length).toBeGreaterThan(CASES / 4);
  });

  it("fuzz: afterwards no inbound message is left unfinished and every stored record is well-formed", async () => {
    await h.app.router.idle();
    await h.app.sessions.flush();
    await h.app.transcripts.flush();
    const { problems, spaces, entries } = await checkState(h.stateDir, { spaces: ["inbound"] });
    expect(problems).toEqual([]);
    expect(entries.length).toBeGreaterThan(10);
    const inbound = spaces.get("inbound") ?? [];
    const bad = inbound.filter(([, r]) => {
      const rec = r as { id?: unknown; state?: unknown; receivedAt?: unknown; msg?: unknown };
      if (typeof rec.id !== "string" || typeof rec.receivedAt !== "number") return true;
      if (rec.state === "done") return false;
      return !InboundMessageSchema.safeParse(rec.msg).success;
    });
    expect(bad).toEqual([]);
    expect(inbound.filter(([, r]) => (r as { state: string }).state !== "done").map(([k]) => k)).toEqual([]);
  });
});
