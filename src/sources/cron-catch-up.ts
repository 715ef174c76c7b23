/**
 * Which cron tick to run at start-up in place of one the daemon missed: it was down at that time,
 * or it died while the tick's run was going. A restart across 09:00 must not lose the 09:00
 * briefing; but a briefing from a daemon that was down all morning arrives at 15:00 only to
 * confuse, so a missed tick is run only while it is still nearly on time. Pure.
 */

/** The last tick a job started, kept in the store (key `cron:<job id>`). */
export interface TickRecord {
  /** The scheduled time of the tick (ISO), not the moment it ran. */
  tick: string;
  /** Its run ended (with any outcome). False: the daemon stopped or died before that. */
  done: boolean;
}

export type CatchUp = { run: Date } | { late: Date; lateMs: number } | undefined;

/** A missed tick is run once at start if it is at most this late… */
export const CATCH_UP_MAX_MS = 3600_000;

/**
 * …and at most half its schedule's period late: an every-minute job is not run again 40 s
 * before its next tick, a daily one is caught up within the hour.
 *
 * `previous` and `next` are the schedule's occurrences around `now`; undefined `record` means the
 * job never ran here (a new job is not run at once).
 */
export function catchUp(record: TickRecord | undefined, previous: Date | undefined, next: Date | undefined, now: number): CatchUp {
  if (!record || !previous) return undefined;
  const last = Date.parse(record.tick);
  const due = previous.getTime();
  const missed = Number.isNaN(last) || last < due || (last === due && !record.done);
  if (!missed) return undefined;
  const period = next ? next.getTime() - due : Number.POSITIVE_INFINITY;
  const lateMs = now - due;
  return lateMs <= Math.min(CATCH_UP_MAX_MS, period / 2) ? { run: previous } : { late: previous, lateMs };
}
