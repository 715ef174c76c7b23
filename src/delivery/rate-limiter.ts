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
 *
 * One timer serves every waiting send: each bucket with a line is due in a min-heap at the time it
 * next has room, and a wake serves only the buckets due. Scanning every waiting bucket instead
 * cost a thousand looks per wake with a thousand chats waiting, and such wakes come about once a
 * send: ~15 µs of CPU per send against ~5 (bench/rate-limiter.ts), growing with the chats waiting.
 */
import type { RateLimit } from "../channels/types.js";
import { MinHeap } from "../util/min-heap.js";

/** How often buckets gone idle are dropped: a daemon meets new chats all its life. */
const SWEEP_MS = 60_000;

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
  /** Sends under this bucket from their ask until their answer: it is not dropped while any is. */
  users: number;
  /**
   * Its entry in the heap while its line waits: never later than it next has room. Absent with a
   * line: not before a send it counts is answered.
   */
  due?: Due;
}

interface Due {
  readonly at: number;
  readonly bucket: Bucket;
  /** The `asked` of the send first in its line: buckets due at once serve the earliest asker first. */
  readonly asked: number;
}

/** A granted send, handed back to `settle` once the platform has answered it. */
export type RateTicket = Send;

class Send {
  /** Index of the bucket it waits for; the buckets before it each keep a place for it. */
  stage = 0;
  settled = false;
  resolve?: (granted: Send | undefined) => void;
  constructor(
    readonly buckets: Bucket[],
    /** Its place in the order sends asked. */
    readonly asked: number,
  ) {}
}

export class RateLimiter {
  private readonly buckets = new Map<string, Bucket>();
  /**
   * When buckets with a line are next due. Entries are never removed early: one superseded by an
   * earlier entry for its bucket, or left after the bucket's line emptied, is skipped when it
   * comes out; one too early (the bucket filled up again since) finds no room and reschedules.
   */
  private readonly dues = new MinHeap<Due>((a, b) => a.at < b.at || (a.at === b.at && a.asked < b.asked));
  private asked = 0;
  /**
   * When the pending timers fire, latest first: one timer serves every waiting send. Only one
   * earlier than all the others is ever armed, so the last is the next to fire.
   */
  private readonly timers: number[] = [];
  private closed = false;
  private sweptAt = -Infinity;

  constructor(
    /** Monotonic by default: every time here is a duration's end (see Outbox). */
    private readonly now: () => number = () => performance.now(),
    private readonly sleep: (ms: number) => Promise<void> = (ms) => new Promise((r) => setTimeout(r, ms)),
  ) {}

  /**
   * Resolves once a send under all of `limits` may go, with the ticket to `settle` when it has
   * been answered; with undefined if the limiter is closed first.
   */
  acquire(limits: readonly RateLimit[]): Promise<RateTicket | undefined> {
    if (this.closed) return Promise.resolve(undefined);
    const t = this.now();
    // Before this send's buckets are looked up, not after: one idle until now would be dropped
    // from under it. Both ways: an injected clock may step back.
    if (Math.abs(t - this.sweptAt) >= SWEEP_MS) this.sweep(t);
    const send = new Send(limits.map((l) => this.bucket(l)).sort(slowestFirst), this.asked++);
    for (const b of send.buckets) b.users++;
    if (this.advance(send, t)) return Promise.resolve(send);
    return new Promise((resolve) => (send.resolve = resolve));
  }

  /** Buckets kept, idle ones included until the next sweep: for tests and metrics. */
  get size(): number {
    return this.buckets.size;
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
    for (const b of ticket.buckets) {
      b.inflight--;
      b.users--;
      // An injected clock may step back: the window stays in order.
      let at = b.stamps.length;
      while (at > b.first && b.stamps[at - 1] > t) at--;
      if (at === b.stamps.length) b.stamps.push(t);
      else b.stamps.splice(at, 0, t);
      // A bucket full of unanswered sends had no time to wake its queue at: now it has one.
      if (b.queue.length > 0) this.schedule(b, t);
    }
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
    for (const b of this.buckets.values()) {
      for (const send of b.queue) send.resolve?.(undefined);
      b.queue.length = 0;
    }
    this.dues.clear();
  }

  /** Moves `send` through its buckets from its stage on: true once granted, else it is queued. */
  private advance(send: Send, t: number): boolean {
    const { buckets } = send;
    for (; send.stage < buckets.length; send.stage++) {
      const b = buckets[send.stage];
      if (b.queue.length > 0 || !this.hasRoom(b, t)) {
        // A line already there is scheduled.
        if (b.queue.push(send) === 1) this.schedule(b, t);
        return false;
      }
      b.held++;
    }
    for (let i = 0; i < buckets.length; i++) {
      if (buckets[i].blockedUntil > t) {
        this.sendBack(send, i, t);
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
  private sendBack(send: Send, stage: number, t: number): void {
    const { buckets } = send;
    for (let j = stage; j < buckets.length; j++) buckets[j].held--;
    buckets[stage].queue.unshift(send);
    send.stage = stage;
    // A place given up may be the room a line behind it waits for, sooner than it is scheduled.
    for (let j = stage; j < buckets.length; j++) if (buckets[j].queue.length > 0) this.schedule(buckets[j], t);
  }

  /** Lets the sends first in line through while there is room (granting those with no bucket left). */
  private serve(b: Bucket, t: number): void {
    while (b.queue.length > 0 && this.hasRoom(b, t)) {
      const send = b.queue.shift() as Send;
      b.held++;
      send.stage++;
      if (this.advance(send, t)) send.resolve?.(send);
    }
  }

  /**
   * Makes sure `b`'s line is served by the time it next has room. An entry already due by then
   * stays: if it comes too early, the bucket is scheduled again.
   */
  private schedule(b: Bucket, t: number): void {
    const at = this.freeAt(b, t);
    if (at >= (b.due?.at ?? Infinity)) return;
    b.due = { at, bucket: b, asked: b.queue[0].asked };
    this.dues.push(b.due);
    this.arm(at, t);
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
    const t = this.now();
    for (let due = this.dues.peek(); due && due.at <= t; due = this.dues.peek()) {
      this.dues.pop();
      const b = due.bucket;
      if (b.due !== due) continue;
      // Unscheduled while served: a send sent back here meanwhile schedules it afresh.
      b.due = undefined;
      this.serve(b, t);
      if (b.queue.length > 0) this.schedule(b, t);
    }
    // Armed for the next due: one later than a timer then pending got no timer of its own, and a
    // timer fires late or, against this clock, a little early. Superseded entries go unarmed.
    for (let due = this.dues.peek(); due; due = this.dues.peek()) {
      if (due.bucket.due === due) {
        this.arm(due.at, t);
        break;
      }
      this.dues.pop();
    }
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

  /**
   * Drops the buckets no send is under that have nothing left in their window and no penalty:
   * one is made afresh, empty, when its chat sends again.
   */
  private sweep(t: number): void {
    this.sweptAt = t;
    for (const [key, b] of this.buckets) {
      if (b.users === 0 && t >= b.blockedUntil && this.live(b, t) === 0) this.buckets.delete(key);
    }
  }

  private bucket(limit: RateLimit): Bucket {
    const key = `${limit.key}|${limit.count}/${limit.intervalMs}`;
    let b = this.buckets.get(key);
    if (!b) {
      b = { key, count: limit.count, intervalMs: limit.intervalMs, stamps: [], first: 0, inflight: 0, held: 0, blockedUntil: -Infinity, queue: [], users: 0 };
      this.buckets.set(key, b);
    }
    return b;
  }
}

/**
 * `rate` sends per `intervalMs` as a bucket: buckets count whole sends, so a fractional rate
 * (0.5/s) becomes one send per stretched interval (1 per 2 s).
 */
export function limitAtRate(key: string, rate: number, intervalMs: number): RateLimit {
  return rate >= 1 ? { key, count: Math.floor(rate), intervalMs } : { key, count: 1, intervalMs: Math.round(intervalMs / rate) };
}

/**
 * The bucket a send waits longest for first, holding no place while it does: a place kept in a
 * fast bucket during a long wait in a slow one is a place everyone else goes without. Ties by key,
 * so that every send takes any two buckets in the same order.
 */
function slowestFirst(a: Bucket, b: Bucket): number {
  return b.intervalMs / b.count - a.intervalMs / a.count || (a.key < b.key ? -1 : a.key > b.key ? 1 : 0);
}
