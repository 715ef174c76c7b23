/**
 * Sliding-window limiter: keeps each bucket under "at most `count` sends per `intervalMs`", the
 * shape platforms publish their limits in, so the outbox waits instead of collecting 429s.
 *
 * A send counts in a bucket from the moment it is granted until the platform answers it, however
 * long that takes (the platform counts it all that while), and then for a window from its answer.
 *
 * Waiting sends are served first come, first served per bucket. A send under several limits takes
 * its buckets one after another, slowest first (a chat's 1/s before the account's 30/s): it waits
 * in line for one, then keeps a place in it while it queues for the next. So a send waiting for
 * its own chat's second holds no place in the shared bucket, and every chat gets the shared bucket
 * in the order its sends became ready — polling lanes instead took it in whatever order their
 * timers fired, and some chats of a burst finished seconds behind the others. Every send takes
 * its buckets in the same order (slowest first, then by key), so no two can each keep a place
 * the other waits for, and no send is overtaken in a line: every send gets through in the end.
 */
import type { RateLimit } from "../channels/types.js";

interface Bucket {
  readonly key: string;
  readonly count: number;
  readonly intervalMs: number;
  /** Answer times of settled sends, ascending; those before `first` have left the window. */
  readonly stamps: number[];
  first: number;
  /** Granted sends not yet answered. */
  inflight: number;
  /** Places kept for waiting sends already let through here (each queues for a later bucket). */
  held: number;
  /** No room before this: a 429's retry-after. */
  blockedUntil: number;
  /** Sends waiting for room here, in the order they reached it. */
  readonly queue: Send[];
}

/** A granted send, handed back to `settle` once the platform has answered it. */
export type RateTicket = Send;

class Send {
  /** Index of the bucket it waits for; the buckets before it each keep a place for it. */
  stage = 0;
  settled = false;
  resolve?: (granted: Send | undefined) => void;
  constructor(readonly buckets: Bucket[]) {}
}

export class RateLimiter {
  private readonly buckets = new Map<string, Bucket>();
  /** Buckets with a queue. */
  private readonly waiting = new Set<Bucket>();
  /**
   * When the pending timers fire, latest first: one timer serves every waiting send. Only one
   * earlier than all the others is ever armed, so the last is the next to fire.
   */
  private readonly timers: number[] = [];
  private closed = false;

  constructor(
    private readonly now: () => number = Date.now,
    private readonly sleep: (ms: number) => Promise<void> = (ms) => new Promise((r) => setTimeout(r, ms)),
  ) {}

  /**
   * Resolves once a send under all of `limits` may go, with the ticket to `settle` when it has
   * been answered; with undefined if the limiter is closed first.
   */
  acquire(limits: readonly RateLimit[]): Promise<RateTicket | undefined> {
    if (this.closed) return Promise.resolve(undefined);
    const t = this.now();
    const send = new Send(limits.map((l) => this.bucket(l)).sort(slowestFirst));
    if (this.advance(send, t)) return Promise.resolve(send);
    this.arm(this.freeAt(send.buckets[send.stage], t), t);
    return new Promise((resolve) => (send.resolve = resolve));
  }

  /**
   * The platform answered the send: it counts for a window from now. The platform counted it when
   * the request arrived, somewhere between grant and answer; counting from the later end keeps
   * network jitter (a slow request followed by a fast one) from landing a send paced right at the
   * window's edge inside the platform's window — a 429 a pure pacer would collect. Settling twice
   * changes nothing, so a caller may settle on every path out.
   */
  settle(ticket: RateTicket): void {
    if (ticket.settled) return;
    ticket.settled = true;
    const t = this.now();
    let next = Infinity;
    for (const b of ticket.buckets) {
      b.inflight--;
      // Date.now can step back (a clock adjusted): the window stays in order.
      let at = b.stamps.length;
      while (at > b.first && b.stamps[at - 1] > t) at--;
      if (at === b.stamps.length) b.stamps.push(t);
      else b.stamps.splice(at, 0, t);
      // A bucket full of unanswered sends had no time to wake its queue at: now it has one.
      if (b.queue.length > 0) next = Math.min(next, this.freeAt(b, t));
    }
    this.arm(next, t);
  }

  /** A platform said 429: no room in these buckets until `retryAfterMs` has passed. */
  penalize(limits: readonly RateLimit[], retryAfterMs: number): void {
    const until = this.now() + retryAfterMs;
    for (const limit of limits) {
      const b = this.bucket(limit);
      b.blockedUntil = Math.max(b.blockedUntil, until);
    }
  }

  /** Ends every wait, and every later one, with undefined (the outbox is stopping). */
  close(): void {
    this.closed = true;
    for (const b of this.waiting) {
      for (const send of b.queue) send.resolve?.(undefined);
      b.queue.length = 0;
    }
    this.waiting.clear();
  }

  /** Moves `send` through its buckets from its stage on: true once granted, else it is queued. */
  private advance(send: Send, t: number): boolean {
    const { buckets } = send;
    for (; send.stage < buckets.length; send.stage++) {
      const b = buckets[send.stage];
      if (b.queue.length > 0 || !this.hasRoom(b, t)) {
        b.queue.push(send);
        this.waiting.add(b);
        return false;
      }
      b.held++;
    }
    for (let i = 0; i < buckets.length; i++) {
      if (buckets[i].blockedUntil > t) {
        this.sendBack(send, i);
        return false;
      }
    }
    for (const b of buckets) {
      b.held--;
      b.inflight++;
    }
    return true;
  }

  /**
   * A 429 on a bucket `send` had already been let through: it waits there again, first in line,
   * and gives up the places it kept after it.
   */
  private sendBack(send: Send, stage: number): void {
    const { buckets } = send;
    for (let j = stage; j < buckets.length; j++) buckets[j].held--;
    buckets[stage].queue.unshift(send);
    send.stage = stage;
    this.waiting.add(buckets[stage]);
  }

  /** Lets the sends first in line through while there is room (granting those with no bucket left). */
  private serve(b: Bucket, t: number): void {
    while (b.queue.length > 0 && this.hasRoom(b, t)) {
      const send = b.queue.shift() as Send;
      b.held++;
      send.stage++;
      if (this.advance(send, t)) send.resolve?.(send);
    }
    if (b.queue.length === 0) this.waiting.delete(b);
  }

  /**
   * Makes sure a timer fires by `at`. A sleep cannot be cancelled: one armed for later stays
   * pending when an earlier one is armed, and is used when its time comes.
   */
  private arm(at: number, t: number): void {
    if (at === Infinity || this.closed || at >= (this.timers.at(-1) ?? Infinity)) return;
    this.timers.push(at);
    void this.sleep(Math.max(0, at - t)).then(() => this.wake(at));
  }

  private wake(at: number): void {
    this.timers.splice(this.timers.lastIndexOf(at), 1);
    if (this.closed) return;
    const t = this.now();
    for (const b of this.waiting) this.serve(b, t);
    // Whatever still waits re-arms: a timer fires late or, against this clock, a little early, and
    // a send sent back (sendBack) may have left a place behind in a bucket already served.
    let next = Infinity;
    for (const b of this.waiting) next = Math.min(next, this.freeAt(b, t));
    this.arm(next, t);
  }

  private hasRoom(b: Bucket, t: number): boolean {
    return t >= b.blockedUntil && b.inflight + b.held + this.live(b, t) < b.count;
  }

  /** When `b` may next have room (Infinity: not before a send it counts is answered). */
  private freeAt(b: Bucket, t: number): number {
    const live = this.live(b, t);
    const excess = b.inflight + b.held + live - b.count;
    let at = t;
    if (excess >= 0) at = excess < live ? b.stamps[b.first + excess] + b.intervalMs : Infinity;
    return Math.max(at, b.blockedUntil);
  }

  /** Settled sends still in the window at `t`. */
  private live(b: Bucket, t: number): number {
    const { stamps } = b;
    while (b.first < stamps.length && stamps[b.first] <= t - b.intervalMs) b.first++;
    // Dropped in halves, not one by one: a generous bucket holds thousands of stamps, and shifting
    // them all on every send cost more than the send (bench/).
    if (b.first > 0 && b.first * 2 >= stamps.length) {
      stamps.copyWithin(0, b.first);
      stamps.length -= b.first;
      b.first = 0;
    }
    return stamps.length - b.first;
  }

  private bucket(limit: RateLimit): Bucket {
    const key = `${limit.key}|${limit.count}/${limit.intervalMs}`;
    let b = this.buckets.get(key);
    if (!b) {
      b = { key, count: limit.count, intervalMs: limit.intervalMs, stamps: [], first: 0, inflight: 0, held: 0, blockedUntil: -Infinity, queue: [] };
      this.buckets.set(key, b);
    }
    return b;
  }
}

/**
 * The bucket a send waits longest for first, holding no place while it does: a place kept in a
 * fast bucket during a long wait in a slow one is a place everyone else goes without. Ties by key,
 * so that every send takes any two buckets in the same order.
 */
function slowestFirst(a: Bucket, b: Bucket): number {
  return b.intervalMs / b.count - a.intervalMs / a.count || (a.key < b.key ? -1 : a.key > b.key ? 1 : 0);
}
