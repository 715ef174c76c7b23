/**
 * The outbox's rate limiter (src/delivery/rate-limiter.ts) on a clock of our own. Each case is a
 * script — sends asking at given times, answers, 429s — and the log of when each send was let
 * through, in the order it was: a wrong wait shows as a wrong time, an unfair one as a wrong order.
 */
import { describe, expect, it } from "vitest";
import type { RateLimit } from "../../src/channels/types.js";
import { limitAtRate, RateLimiter, type RateTicket } from "../../src/delivery/rate-limiter.js";

/** A clock that moves only when told to; the timers it passes fire in time order. */
function manualClock() {
  let now = 0;
  let timers: Array<{ at: number; fire: () => void }> = [];
  // Every promise chain a timer sets off runs before the next timer fires.
  const drain = () => new Promise<void>((resolve) => setImmediate(resolve));
  return {
    now: () => now,
    sleep: (ms: number) => new Promise<void>((fire) => timers.push({ at: now + ms, fire })),
    pendingTimers: () => timers.length,
    /** Sets the clock, firing nothing: a timer running late on a busy loop, or Date.now stepping back. */
    jumpTo(t: number) {
      now = t;
    },
    async advanceTo(t: number) {
      await drain();
      for (;;) {
        const due = timers.filter((x) => x.at <= t).sort((a, b) => a.at - b.at)[0];
        if (!due) break;
        timers = timers.filter((x) => x !== due);
        now = Math.max(now, due.at);
        due.fire();
        await drain();
      }
      now = Math.max(now, t);
      await drain();
    },
  };
}

type Step =
  /** A send asks; answered the instant it is let through unless `inFlight` (then by a settle step). */
  | { at: number; send: string; limits?: RateLimit[]; inFlight?: true }
  | { at: number; settle: string }
  | { at: number; penalize: number; limits?: RateLimit[] }
  | { at: number; close: true }
  /** Logs "size=N": the buckets the limiter keeps. */
  | { at: number; size: true };

/** "name@time" for each send let through, "name ended@time" for each sent away, in that order. */
async function run(steps: Step[], defaults: RateLimit[], until = 10_000): Promise<string[]> {
  const clock = manualClock();
  const limiter = new RateLimiter(clock.now, clock.sleep);
  const tickets = new Map<string, RateTicket>();
  const log: string[] = [];
  for (const step of steps) {
    await clock.advanceTo(step.at);
    if ("send" in step) {
      void limiter.acquire(step.limits ?? defaults).then((ticket) => {
        log.push(ticket ? `${step.send}@${clock.now()}` : `${step.send} ended@${clock.now()}`);
        if (!ticket) return;
        tickets.set(step.send, ticket);
        if (!step.inFlight) limiter.settle(ticket);
      });
    } else if ("settle" in step) limiter.settle(tickets.get(step.settle) as RateTicket);
    else if ("penalize" in step) limiter.penalize(step.limits ?? defaults, step.penalize);
    else if ("size" in step) log.push(`size=${limiter.size}`);
    else limiter.close();
  }
  await clock.advanceTo(until);
  return log;
}

const TWO: RateLimit = { key: "chat:1", count: 2, intervalMs: 100 };
const ONE: RateLimit = { key: "chat:1", count: 1, intervalMs: 100 };
const OTHER: RateLimit = { key: "chat:2", count: 1, intervalMs: 100 };
/** A chat's own limit, slower per send than the account's GLOBAL, which all chats share. */
const chat = (n: number): RateLimit => ({ key: `chat:${n}`, count: 1, intervalMs: 1000 });
const GLOBAL: RateLimit = { key: "global", count: 1, intervalMs: 100 };
/** Between a chat's limit and GLOBAL, as a Telegram group's is. */
const GROUP: RateLimit = { key: "group:1", count: 1, intervalMs: 500 };

describe("rate limiter", () => {
  const oneBucket: Array<[string, RateLimit, Step[], string[]]> = [
    ["under the count, a send goes at once", TWO, [{ at: 0, send: "a" }, { at: 5, send: "b" }], ["a@0", "b@5"]],
    [
      "a full window waits until its oldest counted send leaves it",
      TWO,
      [{ at: 0, send: "a" }, { at: 10, send: "b" }, { at: 20, send: "c" }, { at: 20, send: "d" }],
      ["a@0", "b@10", "c@100", "d@110"],
    ],
    [
      "waiting sends go one per freed place, in the order they asked",
      ONE,
      [{ at: 0, send: "a" }, { at: 10, send: "b" }, { at: 20, send: "c" }, { at: 30, send: "d" }],
      ["a@0", "b@100", "c@200", "d@300"],
    ],
    [
      "an answered send counts from its answer (50), not from when it was let through (0)",
      TWO,
      [{ at: 0, send: "a", inFlight: true }, { at: 0, send: "b" }, { at: 50, settle: "a" }, { at: 60, send: "c" }, { at: 60, send: "d" }],
      ["a@0", "b@0", "c@100", "d@150"],
    ],
    [
      // The platform counts a slow send until it has answered it: counted only for a window from
      // its grant, it left room for a send that collected a 429 from Telegram's global limit.
      "an unanswered send counts however long ago it was let through, until its answer",
      TWO,
      [{ at: 0, send: "a", inFlight: true }, { at: 0, send: "b", inFlight: true }, { at: 0, send: "c" }, { at: 300, settle: "b" }, { at: 350, settle: "a" }],
      ["a@0", "b@0", "c@400"],
    ],
    [
      "settling a send twice counts it once",
      ONE,
      [{ at: 0, send: "a", inFlight: true }, { at: 50, settle: "a" }, { at: 60, send: "b" }, { at: 60, send: "c" }, { at: 90, settle: "a" }],
      ["a@0", "b@150", "c@250"],
    ],
    [
      "a 429 keeps the bucket full for retry_after",
      TWO,
      [{ at: 0, penalize: 3000 }, { at: 0, send: "a" }, { at: 2999, send: "b" }, { at: 3000, send: "c" }],
      ["a@3000", "b@3000", "c@3100"],
    ],
    [
      "a shorter 429 after a longer one does not cut the longer one short",
      ONE,
      [{ at: 0, penalize: 3000 }, { at: 10, penalize: 100 }, { at: 20, send: "a" }],
      ["a@3000"],
    ],
    [
      // Its entry in the schedule came first, and finds no room.
      "a 429 on a bucket whose line was due sooner holds the line until it ends",
      ONE,
      [{ at: 0, send: "a" }, { at: 10, send: "b" }, { at: 50, penalize: 500 }],
      ["a@0", "b@550"],
    ],
    [
      "closing ends every wait at once, and every later one, with no send let through after",
      ONE,
      [{ at: 0, send: "a" }, { at: 10, send: "b" }, { at: 20, send: "c" }, { at: 30, close: true }, { at: 40, send: "d" }],
      ["a@0", "b ended@30", "c ended@30", "d ended@40"],
    ],
  ];
  it.each(oneBucket)("%s", async (_name, limit, steps, expected) => {
    expect(await run(steps, [limit])).toEqual(expected);
  });

  const sharedBucket: Array<[string, Step[], string[]]> = [
    [
      "every bucket of a send counts it; the longest wait wins",
      [{ at: 0, send: "a" }, { at: 10, send: "b" }, { at: 20, send: "c" }, { at: 30, send: "d" }],
      ["a@0", "b@10", "c@100", "d@1000"],
    ],
    [
      "a send waiting for its own chat keeps no place in the shared bucket: another chat's send takes it first",
      [{ at: 0, send: "a1", limits: [chat(1), GLOBAL] }, { at: 10, send: "a2", limits: [chat(1), GLOBAL] }, { at: 20, send: "b", limits: [chat(2), GLOBAL] }],
      ["a1@0", "b@100", "a2@1000"],
    ],
    [
      "the order limits are listed in does not matter: a send waits for its slowest bucket first",
      [{ at: 0, send: "a1", limits: [GLOBAL, chat(1)] }, { at: 10, send: "a2", limits: [GLOBAL, chat(1)] }, { at: 20, send: "b", limits: [GLOBAL, chat(2)] }],
      ["a1@0", "b@100", "a2@1000"],
    ],
    [
      "sends ready for the shared bucket take it in the order they became ready, not the order they asked",
      [
        { at: 0, send: "g", limits: [GLOBAL] },
        { at: 0, send: "a1", limits: [chat(1), GLOBAL] },
        { at: 10, send: "a2", limits: [chat(1), GLOBAL] },
        { at: 20, send: "b", limits: [chat(2), GLOBAL] },
        { at: 30, send: "c", limits: [chat(3), GLOBAL] },
      ],
      ["g@0", "a1@100", "b@200", "c@300", "a2@1100"],
    ],
    [
      "a send let through its chat keeps its place there while it waits for the shared bucket: the chat's next send waits for both",
      [{ at: 0, send: "g", limits: [GLOBAL] }, { at: 10, send: "x", limits: [chat(1), GLOBAL] }, { at: 20, send: "y", limits: [chat(1), GLOBAL] }],
      ["g@0", "x@100", "y@1100"],
    ],
    [
      "a 429 on a chat a waiting send was let through sends it back there, and other chats take the shared bucket meanwhile",
      [
        { at: 0, send: "g", limits: [GLOBAL] },
        { at: 10, send: "x", limits: [chat(1), GLOBAL] },
        { at: 50, penalize: 500, limits: [chat(1)] },
        { at: 60, send: "y", limits: [chat(2), GLOBAL] },
      ],
      ["g@0", "y@100", "x@550"],
    ],
    [
      "sends under two equally fast buckets, listed in opposite orders, take them in one order: neither keeps a place the other waits for",
      [
        { at: 0, send: "z", limits: [ONE, OTHER] },
        { at: 10, send: "a", limits: [ONE, OTHER] },
        { at: 20, send: "b", limits: [OTHER, ONE] },
      ],
      ["z@0", "a@100", "b@200"],
    ],
    [
      // Chat 2's line was scheduled first (its send was answered first), but x asked before y.
      "chats whose lines come due at once take the shared bucket in the order their sends asked",
      [
        { at: 0, send: "p", limits: [chat(1)], inFlight: true },
        { at: 0, send: "q", limits: [chat(2)], inFlight: true },
        { at: 10, send: "x", limits: [chat(1), GLOBAL] },
        { at: 20, send: "y", limits: [chat(2), GLOBAL] },
        { at: 30, settle: "q" },
        { at: 30, settle: "p" },
      ],
      ["p@0", "q@0", "x@1030", "y@1130"],
    ],
    [
      // x keeps its place in the group while it waits for the global bucket; a 429 on its chat
      // sends it back there, and the place it gives up is y's at once.
      "a send sent back by a 429 gives up the places it kept: a line waiting for one goes then, not when the send comes back through",
      [
        { at: 0, send: "b0", limits: [GROUP] },
        { at: 0, send: "g0", limits: [GLOBAL], inFlight: true },
        { at: 10, send: "x", limits: [chat(1), GROUP, GLOBAL] },
        { at: 20, send: "y", limits: [GROUP] },
        { at: 600, penalize: 1000, limits: [chat(1)] },
        { at: 700, settle: "g0" },
      ],
      ["b0@0", "g0@0", "y@800", "x@1600"],
    ],
    [
      // Two forum topics of one chat: two lanes, one chat bucket. x keeps its place in chat 1 while
      // it waits for the shared bucket, so x2 queues there behind it.
      "a send sent back by a 429 waits first in line again, ahead of a send that queued there behind it meanwhile",
      [
        { at: 0, send: "g", limits: [GLOBAL] },
        { at: 10, send: "x", limits: [chat(1), GLOBAL] },
        { at: 20, send: "x2", limits: [chat(1), GLOBAL] },
        { at: 50, penalize: 500, limits: [chat(1)] },
      ],
      ["g@0", "x@550", "x2@1550"],
    ],
    [
      "closing ends the waits in every bucket, those due at a time and those waiting for an answer alike",
      [
        { at: 0, send: "u", limits: [ONE], inFlight: true },
        { at: 0, send: "v", limits: [ONE] },
        { at: 0, send: "p", limits: [OTHER] },
        { at: 10, send: "q", limits: [OTHER] },
        { at: 20, close: true },
      ],
      ["u@0", "p@0", "v ended@20", "q ended@20"],
    ],
  ];
  it.each(sharedBucket)("%s", async (_name, steps, expected) => {
    expect(await run(steps, [TWO, { key: "global", count: 3, intervalMs: 1000 }])).toEqual(expected);
  });

  it("drops the buckets of chats gone quiet at the next sweep (a minute on), keeping those a send is under (waiting, in flight or yet to reach), a 429 blocks or whose window still counts a send", async () => {
    const SLOW: RateLimit = { key: "slow", count: 1, intervalMs: 100_000 };
    const FAST: RateLimit = { key: "fast", count: 1, intervalMs: 10 };
    const LONG: RateLimit = { key: "long", count: 1, intervalMs: 90_000 };
    const steps: Step[] = [
      { at: 0, send: "a1", limits: [chat(1)] },
      { at: 0, send: "b1", limits: [chat(2)] },
      { at: 0, send: "c1", limits: [chat(3)], inFlight: true },
      { at: 0, penalize: 120_000, limits: [chat(4)] },
      { at: 0, send: "l1", limits: [LONG] },
      { at: 0, send: "s1", limits: [SLOW] },
      // Waits for SLOW until 100,000; FAST, which it has yet to reach, has nothing in it till then.
      { at: 0, send: "s2", limits: [SLOW, FAST] },
      { at: 0, size: true },
      // Not swept on every send: chat:1 and chat:2, idle since 0, are still kept.
      { at: 30_000, send: "e", limits: [chat(5)] },
      { at: 30_000, size: true },
      // The sweep, before this send's bucket is looked up: chat:1, chat:2 and chat:5 go, chat:1 comes back.
      { at: 60_000, send: "a2", limits: [chat(1)] },
      { at: 60_000, size: true },
      // Each waits as long as it would have with no sweep.
      { at: 60_000, send: "c2", limits: [chat(3)] },
      { at: 60_000, send: "d2", limits: [chat(4)] },
      { at: 60_000, send: "l2", limits: [LONG] },
      { at: 60_500, send: "a3", limits: [chat(1)] },
      { at: 61_000, settle: "c1" },
      { at: 100_000, send: "f", limits: [FAST] },
      // Everything has finished and left its window: only chat:9's own bucket is left.
      { at: 200_000, send: "z", limits: [chat(9)] },
      { at: 200_000, size: true },
    ];
    expect(await run(steps, [], 200_000)).toEqual([
      "a1@0", "b1@0", "c1@0", "l1@0", "s1@0", "size=7",
      "e@30000", "size=8",
      "a2@60000", "size=6",
      "a3@61000", "c2@62000", "l2@90000", "s2@100000", "f@100010", "d2@120000",
      "z@200000", "size=1",
    ]);
  });

  it("a send that asks while an earlier one waits for a timer running late queues behind it: first come, first served", async () => {
    const clock = manualClock();
    const limiter = new RateLimiter(clock.now, clock.sleep);
    const log: string[] = [];
    const ask = (name: string) =>
      void limiter.acquire([ONE]).then((ticket) => {
        log.push(`${name}@${clock.now()}`);
        limiter.settle(ticket as RateTicket);
      });
    ask("a");
    await clock.advanceTo(10);
    ask("b");
    // b's turn came at 100, but its timer has not fired yet.
    clock.jumpTo(150);
    ask("c");
    await clock.advanceTo(1000);
    expect(log).toEqual(["a@0", "b@150", "c@250"]);
  });

  it("a send answered after the clock stepped back counts in its window by its answer time, not after the later answers", async () => {
    const clock = manualClock();
    const limiter = new RateLimiter(clock.now, clock.sleep);
    await clock.advanceTo(1000);
    const [a, b] = await Promise.all([limiter.acquire([TWO]), limiter.acquire([TWO])]);
    limiter.settle(a as RateTicket);
    clock.jumpTo(500);
    limiter.settle(b as RateTicket);
    await clock.advanceTo(550);
    let grantedAt: number | undefined;
    void limiter.acquire([TWO]).then(() => (grantedAt = clock.now()));
    await clock.advanceTo(2000);
    // b's answer at 500 leaves the window at 600, a's at 1000 only at 1100.
    expect(grantedAt).toBe(600);
  });

  it("however many sends wait, no more than two timers are pending — the next due, and one armed before it for later: none polls on its own", async () => {
    const clock = manualClock();
    const limiter = new RateLimiter(clock.now, clock.sleep);
    const chats = 40;
    const order: number[] = [];
    let mostTimers = 0;
    const ask = (c: number) =>
      void limiter.acquire([chat(c), GLOBAL]).then((ticket) => {
        order.push(c);
        limiter.settle(ticket as RateTicket);
      });
    // Every chat asks twice at once: 39 first sends wait in line for the shared bucket, and each
    // second send for its chat and then, behind every first, for the shared bucket.
    for (let c = 0; c < chats; c++) ask(c);
    for (let c = 0; c < chats; c++) ask(c);
    for (let t = 0; t <= 10_000; t += 10) {
      await clock.advanceTo(t);
      mostTimers = Math.max(mostTimers, clock.pendingTimers());
    }
    expect(order).toEqual([...Array.from({ length: chats }, (_, c) => c), ...Array.from({ length: chats }, (_, c) => c)]);
    expect(mostTimers).toBeLessThanOrEqual(2);
  });
});

describe("limitAtRate: a configured rate as a bucket of whole sends", () => {
  it.each([
    [30, 1000, { count: 30, intervalMs: 1000 }],
    [1, 1000, { count: 1, intervalMs: 1000 }],
    [2.7, 1000, { count: 2, intervalMs: 1000 }],
    [0.5, 1000, { count: 1, intervalMs: 2000 }],
    [0.3, 60_000, { count: 1, intervalMs: 200_000 }],
  ])("%s per %s ms → %o", (rate, intervalMs, bucket) => {
    expect(limitAtRate("chat:1", rate, intervalMs)).toEqual({ key: "chat:1", ...bucket });
  });
});
