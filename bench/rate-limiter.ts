/**
 * CPU the outbox's rate limiter (src/delivery/rate-limiter.ts) spends per send when many chats
 * wait at once: 1,000 Telegram private chats each with 5 replies queued, under each chat's 1/s
 * and the account's shared 30/s, each send answered 50–250 ms after it is let through (answered
 * at once, the sends of a second all left the window together and one wake served them all;
 * spread out, as over a real network, it takes about one wake per send). The clock is a fake one
 * that jumps to the next timer, so the ~3 minutes of pacing run in CPU time only; the figure
 * includes that fake clock's own small cost per timer.
 */
import type { RateLimit } from "../src/channels/types.js";
import { RateLimiter, type RateTicket } from "../src/delivery/rate-limiter.js";

export interface LimiterOptions {
  chats: number;
  sendsPerChat: number;
}

export const LIMITER_WORKLOAD: LimiterOptions = { chats: 1000, sendsPerChat: 5 };

const GLOBAL: RateLimit = { key: "global", count: 30, intervalMs: 1000 };

/** µs of CPU (user + system) per send, from the first ask to the last answer. */
export async function benchRateLimiter({ chats, sendsPerChat }: LimiterOptions = LIMITER_WORKLOAD): Promise<number> {
  let now = 0;
  const timers: Array<{ at: number; fire: () => void }> = [];
  const sleep = (ms: number) => new Promise<void>((fire) => timers.push({ at: now + ms, fire }));
  const limiter = new RateLimiter(() => now, sleep);
  const total = chats * sendsPerChat;
  let granted = 0;
  // Answer times from a fixed-seed LCG: the same run every time.
  let seed = 1;
  const latency = () => 50 + ((seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31) % 200);
  const cpu = process.cpuUsage();
  for (let c = 0; c < chats; c++) {
    const limits: RateLimit[] = [{ key: `chat:${c}`, count: 1, intervalMs: 1000 }, GLOBAL];
    for (let i = 0; i < sendsPerChat; i++) {
      void limiter.acquire(limits).then((ticket) => {
        granted++;
        void sleep(latency()).then(() => limiter.settle(ticket as RateTicket));
      });
    }
  }
  // Everything a timer sets off (the wake, grants, settles) runs before the next one fires: a
  // tick queued from a promise job runs once the promise jobs have all run. An event-loop turn
  // (setImmediate) per timer instead cost three times what the limiter does.
  const drain = () => new Promise<void>((resolve) => process.nextTick(resolve));
  for (await drain(); granted < total || timers.length > 0; await drain()) {
    if (timers.length === 0) throw new Error(`stalled: ${granted} of ${total} sends granted`);
    let next = 0;
    for (let i = 1; i < timers.length; i++) if (timers[i].at < timers[next].at) next = i;
    const [due] = timers.splice(next, 1);
    now = Math.max(now, due.at);
    due.fire();
  }
  const used = process.cpuUsage(cpu);
  return (used.user + used.system) / total;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  for (let run = 0; run < 5; run++) {
    const us = await benchRateLimiter();
    console.log(`rate limiter, ${LIMITER_WORKLOAD.chats} chats waiting: ${us.toFixed(2)} µs of CPU per send`);
  }
}
