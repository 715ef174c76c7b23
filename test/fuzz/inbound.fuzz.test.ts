/**
 * Hostile inbound messages at the router's trust boundary (`router.accept`, what every adapter
 * calls): thousands of generated InboundMessage-like values — mostly plausible with hostile
 * fields, sometimes anything at all — from owners and strangers, with repeats. Each call resolves
 * accepted / duplicate / rejected-with-a-reason within a bound; everything accepted is processed
 * to the end; afterwards the store holds only well-formed session entries and inbound records,
 * and every transcript line parses.
 */
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { InboundMessageSchema, type AcceptOutcome } from "../../src/inbound/router.js";
import { startHarness, type Harness } from "../helpers/harness.js";
import { FUZZ_SEED, hostileString, hostileValue, mostly } from "../helpers/hostile.js";
import { RecordingAdapter } from "../helpers/recording-adapter.js";
import { checkState } from "../helpers/state-check.js";

const CASES = 3000;
const CASE_BOUND_MS = 5000;
const OWNER = "1001";

let h: Harness;
beforeAll(async () => {
  h = await startHarness({
    config: { commands: { owners: [`telegram:${OWNER}`, `discord:${OWNER}`] }, session: { dmScope: "per-channel-peer" }, agents: { defaults: { maxConcurrent: 8, runTimeoutSeconds: 5 } } },
    adapters: [new RecordingAdapter("telegram"), new RecordingAdapter("discord"), new RecordingAdapter("whatsapp")],
  });
});
afterAll(async () => {
  await h?.stop();
});

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

const inboundCase: fc.Arbitrary<unknown> = fc.oneof(
  { weight: 6, arbitrary: validMessage },
  { weight: 4, arbitrary: plausibleMessage },
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
  it(`fuzz: ${CASES} generated inbound messages are each accepted, deduplicated or rejected with a reason — never a throw or a hang`, async () => {
    const outcomes = new Map<string, number>();
    await fc.assert(
      fc.asyncProperty(inboundCase, async (input) => {
        const out: AcceptOutcome = await bounded(h.app.router.accept(input as never), `accept(${JSON.stringify(input)?.slice(0, 200)})`);
        outcomes.set(out.status, (outcomes.get(out.status) ?? 0) + 1);
        if (!["accepted", "duplicate", "rejected"].includes(out.status)) throw new Error(`unexpected outcome ${JSON.stringify(out)}`);
        const valid = InboundMessageSchema.safeParse(input).success;
        if (out.status === "rejected") {
          if (valid) throw new Error(`a valid message was rejected: ${out.error}`);
          if (!/^invalid inbound message: .+/.test(out.error)) throw new Error(`unclear rejection: ${out.error}`);
        } else if (!valid) throw new Error(`an invalid message was ${out.status}: ${JSON.stringify(input)?.slice(0, 200)}`);
      }),
      { numRuns: CASES, seed: FUZZ_SEED + 2, endOnFailure: true },
    );
    console.info(`inbound fuzz: ${CASES} messages → ${[...outcomes].map(([k, v]) => `${v} ${k}`).join(", ")}`);
    expect(outcomes.get("accepted") ?? 0).toBeGreaterThan(CASES / 4);
    expect(outcomes.get("rejected") ?? 0).toBeGreaterThan(CASES / 20);
    // Everything accepted runs to the end (bounded), and the daemon still answers.
    await bounded(h.app.router.idle(), "router.idle()");
    expect(h.model.requests.length).toBeGreaterThan(100);
    const client = await h.client();
    expect((await client.request("health", {})).ok).toBe(true);
  }, 120_000);

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
