/**
 * The outbox's sliding-window limiter (src/delivery/rate-limiter.ts), on a clock of our own.
 * Observed through delayFor, the only thing the outbox reads: the wait is set by the stamp
 * `count` places from the newest, so a window out of order shows as a wrong wait.
 */
import { describe, expect, it } from "vitest";
import type { RateLimit } from "../../src/channels/types.js";
import { RateLimiter } from "../../src/delivery/rate-limiter.js";

const LIMIT: RateLimit = { key: "chat:1", count: 2, intervalMs: 100 };

type Step = { at: number; record: string } | { at: number; settle: string } | { at: number; penalize: number } | { at: number; expectDelay: number };

function run(steps: Step[], limits: RateLimit[] = [LIMIT]): void {
  let now = 0;
  const limiter = new RateLimiter(() => now);
  const stamps = new Map<string, number>();
  for (const step of steps) {
    now = step.at;
    if ("record" in step) stamps.set(step.record, limiter.record(limits));
    else if ("settle" in step) limiter.settle(limits, stamps.get(step.settle) as number);
    else if ("penalize" in step) limiter.penalize(limits, step.penalize);
    else expect({ at: step.at, delay: limiter.delayFor(limits) }).toEqual({ at: step.at, delay: step.expectDelay });
  }
}

describe("rate limiter", () => {
  const cases: Array<[string, Step[]]> = [
    ["under the count, a send may go at once", [{ at: 0, record: "a" }, { at: 5, expectDelay: 0 }]],
    [
      "a full window waits until its oldest counted send leaves it",
      [{ at: 0, record: "a" }, { at: 10, record: "b" }, { at: 20, expectDelay: 80 }, { at: 100, expectDelay: 0 }],
    ],
    [
      "a settled send counts from its answer, and the window stays in order (15 sits between 10 and 20)",
      [{ at: 0, record: "a" }, { at: 10, record: "b" }, { at: 20, record: "c" }, { at: 15, settle: "a" }, { at: 20, expectDelay: 95 }],
    ],
    [
      "a send settled after every later one moves to the newest place",
      [{ at: 0, record: "a" }, { at: 10, record: "b" }, { at: 20, record: "c" }, { at: 25, settle: "a" }, { at: 25, expectDelay: 95 }],
    ],
    [
      "settling at its own stamp changes nothing",
      [{ at: 0, record: "a" }, { at: 10, record: "b" }, { at: 10, settle: "b" }, { at: 10, expectDelay: 90 }],
    ],
    [
      // Its request may have reached the platform just now (a call slower than the window): the
      // platform counts it, so the limiter must too. Forgotten instead, it let a 429 through
      // under load (rate-limit.test.ts, 40 chats sharing Telegram's global limit).
      "a send answered after its stamp left the window counts again, from its answer",
      [{ at: 0, record: "a" }, { at: 150, record: "b" }, { at: 160, settle: "a" }, { at: 160, expectDelay: 90 }, { at: 250, record: "c" }, { at: 250, expectDelay: 10 }, { at: 260, expectDelay: 0 }],
    ],
    [
      "R2 a 429 keeps the bucket full for retry_after",
      [{ at: 0, penalize: 3000 }, { at: 0, expectDelay: 3000 }, { at: 2999, expectDelay: 1 }, { at: 3000, expectDelay: 0 }],
    ],
  ];
  it.each(cases)("%s", (_name, steps) => run(steps));

  it("every bucket of a send counts it; the longest wait wins", () => {
    const global: RateLimit = { key: "global", count: 3, intervalMs: 1000 };
    run(
      [
        { at: 0, record: "a" },
        { at: 10, record: "b" },
        { at: 20, record: "c" },
        { at: 30, expectDelay: 970 },
      ],
      [LIMIT, global],
    );
  });
});
