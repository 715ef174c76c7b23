/**
 * Hostile inbound messages at the router's trust boundary (`router.accept`, what every adapter
 * calls): thousands of generated InboundMessage-like values — mostly plausible with hostile
 * fields, sometimes anything at all — from owners and strangers, with repeats. Each call resolves
 * accepted / duplicate / rejected-with-a-reason within a bound; a blank id, or an id with a lone
 * UTF-16 surrogate, is always rejected naming the field (rules stated here, not taken from the
 * router's schema); everything accepted is processed to the end; every record written to the
 * inbound space (seen in the SQLite file itself, through triggers) is under an id the test
 * computes from an accepted message and holds that message — strictly the schema's fields,
 * unknown ones dropped — afterwards the store holds only well-formed session entries and inbound
 * records, and every transcript line parses.
 */
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import { InboundMessageSchema, type AcceptOutcome } from "../../src/inbound/router.js";
import { safeParse } from "../../src/util/safe-parse.js";
import { deserializeKeyv } from "../../src/store/keyv-codec.js";
import { startHarness, type Harness } from "../helpers/harness.js";
import { FUZZ_SEED, hostileString, hostileValue, mostly } from "../helpers/hostile.js";
import { RecordingAdapter } from "../helpers/recording-adapter.js";
import { openStoreDb } from "../helpers/store-db.js";
import { checkState } from "../helpers/state-check.js";

const CASES = 3000;
const CASE_BOUND_MS = 5000;
const OWNER = "1001";

/**
 * Every write to the inbound space as it reached the store: SQLite triggers on the store's table
 * copy each inserted or updated `inbound:` row to a table of the test's own. Nothing of the
 * daemon is replaced or wrapped.
 */
async function auditInboundWrites(stateDir: string) {
  const db = await openStoreDb(stateDir);
  const copy = "WHEN substr(NEW.key, 1, 8) = 'inbound:' BEGIN INSERT INTO test_inbound_writes (key, value) VALUES (NEW.key, NEW.value); END";
  await db.exec(
    `CREATE TABLE test_inbound_writes (seq INTEGER PRIMARY KEY, key TEXT NOT NULL, value TEXT NOT NULL);
     CREATE TRIGGER test_inbound_insert AFTER INSERT ON keyv ${copy};
     CREATE TRIGGER test_inbound_update AFTER UPDATE ON keyv ${copy};`,
  );
  return {
    /** [inbound id, stored value] per write, in commit order. */
    writes: async (): Promise<Array<[string, unknown]>> =>
      (await db.all<{ key: string; value: string }>("SELECT key, value FROM test_inbound_writes ORDER BY seq")).map((r) => [r.key.slice("inbound:".length), deserializeKeyv(r.value).value]),
    close: () => db.close(),
  };
}

let h: Harness;
let audit: Awaited<ReturnType<typeof auditInboundWrites>>;
beforeAll(async () => {
  h = await startHarness({
    config: { commands: { owners: [`telegram:${OWNER}`, `discord:${OWNER}`] }, session: { dmScope: "per-channel-peer" }, agents: { defaults: { maxConcurrent: 8, runTimeoutSeconds: 5 } } },
    adapters: [new RecordingAdapter("telegram"), new RecordingAdapter("discord"), new RecordingAdapter("whatsapp")],
  });
  audit = await auditInboundWrites(h.stateDir);
});
afterAll(async () => {
  await audit?.close();
  await h?.stop();
});

/** Ids end up in store and session keys: each of these, when present, must not be blank. */
const ID_FIELDS = ["accountId", "peerId", "messageId", "to", "threadId", "parentPeerId"] as const;
/** Ids the router must keep well-formed Unicode: the id fields, and senderId (it is part of owner checks and transcripts). */
const SURROGATE_FIELDS = [...ID_FIELDS, "senderId"] as const;
/** Blank: empty or whitespace only (JavaScript's \s, the set String#trim removes). */
const isBlank = (v: unknown) => typeof v === "string" && /^\s*$/u.test(v);
/**
 * A UTF-16 surrogate without its pair, found code unit by code unit rather than with the router's
 * /\p{Cs}/u: SQLite stores text as UTF-8, where such a unit becomes U+FFFD.
 */
function hasLoneSurrogate(s: string): boolean {
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c >= 0xdc00 && c <= 0xdfff) return true;
    if (c >= 0xd800 && c <= 0xdbff) {
      const next = s.charCodeAt(i + 1);
      if (!(next >= 0xdc00 && next <= 0xdfff)) return true;
      i++;
    }
  }
  return false;
}
/** `field: ` as the rejection lists it (a bare substring test would find "to" in any message). */
const names = (error: string, field: string) => new RegExp(`(?:^|[:;] )${field}: `).test(error);

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

/** Text with one surrogate whose pair is missing: high or low, alone, reversed, or half an emoji, anywhere. */
const loneSurrogates = fc
  .oneof(
    fc.constantFrom("\ud800", "\udbff", "\udc00", "\udfff", "\udc00\ud800", "1001\ud83d", "\ude00-100200", "🦄\ud83e"),
    fc.tuple(fc.string({ unit: "binary", maxLength: 8 }), fc.integer({ min: 0xd800, max: 0xdfff }), fc.string({ unit: "binary", maxLength: 8 })).map(([a, c, b]) => a + String.fromCharCode(c) + b),
  )
  .filter(hasLoneSurrogate);

/** A message that would be valid but for a lone surrogate in one id. */
const loneSurrogateIdMessage = fc.tuple(validMessage, fc.constantFrom(...SURROGATE_FIELDS), loneSurrogates).map(([m, field, id]) => ({ ...m, [field]: id }));

/** A valid message carrying fields the schema does not know (an adapter passing platform extras, or worse). */
const extraFieldsMessage = fc
  .tuple(validMessage, fc.record({ isOwner: fc.constant(true), sessionKey: fc.constant("agent:main:main"), raw: hostileValue, update_id: fc.nat() }, { requiredKeys: [] }), fc.dictionary(hostileString, hostileValue, { maxKeys: 2 }))
  .map(([m, known, extra]) => ({ ...extra, ...known, ...m }));

const inboundCase: fc.Arbitrary<unknown> = fc.oneof(
  { weight: 6, arbitrary: validMessage },
  { weight: 4, arbitrary: plausibleMessage },
  { weight: 1, arbitrary: blankIdMessage },
  { weight: 1, arbitrary: loneSurrogateIdMessage },
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

/**
 * Each accepted message under the id the test computes from it (router.ts accept():
 * channel:accountId:messageId), to compare with what reached the store.
 */
const accepted = new Map<string, Record<string, unknown>>();
const inboundId = (m: Record<string, unknown>) => `${String(m.channel)}:${String(m.accountId)}:${String(m.messageId)}`;

describe("router.accept under hostile inbound messages", () => {
  it(`fuzz: ${CASES} generated inbound messages are each accepted, deduplicated or rejected with a reason — never a throw or a hang; a blank id or one with a lone surrogate is always rejected, naming it`, async () => {
    const outcomes = new Map<string, number>();
    let blankIdCases = 0;
    let loneSurrogateCases = 0;
    await fc.assert(
      fc.asyncProperty(inboundCase, async (input) => {
        const out: AcceptOutcome = await bounded(h.app.router.accept(input as never), `accept(${JSON.stringify(input)?.slice(0, 200)})`);
        outcomes.set(out.status, (outcomes.get(out.status) ?? 0) + 1);
        if (!["accepted", "duplicate", "rejected"].includes(out.status)) throw new Error(`unexpected outcome ${JSON.stringify(out)}`);
        const valid = safeParse(InboundMessageSchema, input).success;
        // The router's own schema decides `valid`; this rule does not lean on it.
        const fields = input !== null && typeof input === "object" ? (input as Record<string, unknown>) : undefined;
        if (out.status === "accepted" && fields) accepted.set(inboundId(fields), fields);
        const blankIds = fields ? ID_FIELDS.filter((f) => Object.hasOwn(fields, f) && isBlank(fields[f])) : [];
        if (blankIds.length) {
          blankIdCases++;
          if (out.status !== "rejected") throw new Error(`a message with a blank ${blankIds.join(", ")} was ${out.status}: ${JSON.stringify(input)?.slice(0, 300)}`);
          const unnamed = blankIds.filter((f) => !names(out.error, f));
          if (unnamed.length) throw new Error(`the rejection does not name the blank ${unnamed.join(", ")}: ${out.error}`);
        }
        const loneIds = fields ? SURROGATE_FIELDS.filter((f) => Object.hasOwn(fields, f) && typeof fields[f] === "string" && hasLoneSurrogate(fields[f])) : [];
        if (loneIds.length) {
          loneSurrogateCases++;
          if (out.status !== "rejected") throw new Error(`a message with a lone surrogate in ${loneIds.join(", ")} was ${out.status}: ${JSON.stringify(input)?.slice(0, 300)}`);
          const unnamed = loneIds.filter((f) => !names(out.error, f));
          if (unnamed.length) throw new Error(`the rejection does not name ${unnamed.join(", ")}, which holds a lone surrogate: ${out.error}`);
        }
        if (out.status === "rejected") {
          if (valid) throw new Error(`a valid message was rejected: ${out.error}`);
          if (!/^invalid inbound message: .+/.test(out.error)) throw new Error(`unclear rejection: ${out.error}`);
        } else if (!valid) throw new Error(`an invalid message was ${out.status}: ${JSON.stringify(input)?.slice(0, 200)}`);
      }),
      { numRuns: CASES, seed: FUZZ_SEED + 2, endOnFailure: true },
    );
    console.info(`inbound fuzz: ${CASES} messages → ${[...outcomes].map(([k, v]) => `${v} ${k}`).join(", ")}; ${blankIdCases} with a blank id, ${loneSurrogateCases} with a lone surrogate in an id`);
    expect(outcomes.get("accepted") ?? 0).toBeGreaterThan(CASES / 4);
    expect(blankIdCases).toBeGreaterThan(CASES / 20);
    expect(loneSurrogateCases).toBeGreaterThan(CASES / 20);
    expect(outcomes.get("rejected") ?? 0).toBeGreaterThan(CASES / 20);
    // Everything accepted runs to the end (bounded), and the daemon still answers.
    await bounded(h.app.router.idle(), "router.idle()");
    expect(h.model.requests.length).toBeGreaterThan(100);
    const client = await h.client();
    expect((await client.request("health", {})).ok).toBe(true);
  }, 120_000);

  it("fuzz: every record written to the inbound space holds the parsed message: strictly the schema's fields (unknown ones dropped), unchanged, under the id the test computes for an accepted message — and every accepted message was written", async () => {
    await h.app.router.idle();
    const StoredRecord = z.union([
      z.strictObject({ id: z.string(), msg: InboundMessageSchema.strict(), state: z.enum(["pending", "recorded"]), receivedAt: z.number(), session: z.strictObject({ sessionId: z.string(), createdAt: z.number() }).optional() }),
      z.strictObject({ id: z.string(), state: z.literal("done"), receivedAt: z.number() }),
    ]);
    const writes = await audit.writes();
    const problems: string[] = [];
    // Keys are compared with ids the test computes from the accepted inputs, not with the records
    // read back: SQLite stores a key as UTF-8, where a lone surrogate becomes U+FFFD, and only
    // the input still shows what the id was; a check through the store compares it with itself.
    const sourceOf = (key: string): { input: Record<string, unknown>; continued: boolean } | undefined => {
      const input = accepted.get(key);
      if (input) return { input, continued: false };
      // An owner's "/new <text>" goes on as a message of its own, `<messageId>:continue`.
      const base = key.endsWith(":continue") ? accepted.get(key.slice(0, -":continue".length)) : undefined;
      return base && { input: base, continued: true };
    };
    for (const [key, rec] of writes) {
      const source = sourceOf(key);
      if (!source) {
        problems.push(`${JSON.stringify(key)}: written, but no accepted message has this id`);
        continue;
      }
      const stored = (rec as { msg?: Record<string, unknown> }).msg;
      const changed = stored && typeof stored === "object" ? Object.keys(stored).filter((f) => !(source.continued && (f === "text" || f === "messageId")) && JSON.stringify(stored[f]) !== JSON.stringify(source.input[f])) : [];
      if (changed.length) problems.push(`${key}: ${changed.map((f) => `${f} stored as ${JSON.stringify(stored![f])}, accepted as ${JSON.stringify(source.input[f])}`).join("; ")}`);
      const parsed = StoredRecord.safeParse(rec);
      if (!parsed.success) problems.push(`${key}: ${parsed.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`).join("; ")} in ${JSON.stringify(rec)?.slice(0, 300)}`);
      else if (parsed.data.id !== key) problems.push(`${key}: holds the id ${parsed.data.id}`);
      else if ("msg" in parsed.data && key !== `${parsed.data.msg.channel}:${parsed.data.msg.accountId}:${parsed.data.msg.messageId}`) problems.push(`${key}: holds a message of another id`);
      else if ("msg" in parsed.data && ID_FIELDS.some((f) => isBlank((parsed.data as { msg: Record<string, unknown> }).msg[f]))) problems.push(`${key}: a blank id was stored`);
    }
    const written = new Set(writes.map(([key]) => key));
    for (const id of accepted.keys()) if (!written.has(id)) problems.push(`${JSON.stringify(id)}: accepted, but never written under this id`);
    console.info(`inbound fuzz: ${writes.length} writes to the inbound space checked against ${accepted.size} accepted messages`);
    if (problems.length) throw new Error(`${problems.length} problems in ${writes.length} inbound writes for ${accepted.size} accepted messages, e.g.:\n${problems.slice(0, 5).join("\n")}`);
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
      return !safeParse(InboundMessageSchema, rec.msg).success;
    });
    expect(bad).toEqual([]);
    expect(inbound.filter(([, r]) => (r as { state: string }).state !== "done").map(([k]) => k)).toEqual([]);
  });
});
