/**
 * A cron tick missed while the daemon was down (or cut short by it dying) is run at start-up while
 * still nearly on time: within an hour, and within half the job's period.
 */
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import pino from "pino";
import { afterEach, describe, expect, it, vi } from "vitest";
import { catchUp, type TickRecord } from "../../src/sources/cron-catch-up.js";
import { CronScheduler } from "../../src/sources/cron.js";
import { FakeModelServer } from "../fakes/model-server.js";
import { startHarness, type Harness } from "../helpers/harness.js";
import { features, messagesOf, toolDriver } from "../helpers/tool-driver.js";

const T = (iso: string) => new Date(`2026-11-25T${iso}Z`);
const rec = (tick: string, done = true): TickRecord => ({ tick: T(tick).toISOString(), done });
const yesterday: TickRecord = { tick: "2026-11-24T09:00:00.000Z", done: true };

describe("catchUp (pure)", () => {
  // [case, last tick recorded, schedule's previous occurrence, its next, now, expected]
  const cases: Array<[string, TickRecord | undefined, Date | undefined, Date | undefined, Date, ReturnType<typeof catchUp>]> = [
    ["a job that never ran here is not run at once", undefined, T("09:00:00"), T("09:00:00"), T("09:05:00"), undefined],
    ["the previous tick ran to its end: nothing missed", rec("09:00:00"), T("09:00:00"), new Date("2026-11-26T09:00:00Z"), T("09:05:00"), undefined],
    ["down across a daily tick, back 5 minutes later: run it", yesterday, T("09:00:00"), new Date("2026-11-26T09:00:00Z"), T("09:05:00"), { run: T("09:00:00") }],
    ["died while the tick's run was going: run it again", rec("09:00:00", false), T("09:00:00"), new Date("2026-11-26T09:00:00Z"), T("09:01:00"), { run: T("09:00:00") }],
    ["a daily tick more than an hour late is not run", yesterday, T("09:00:00"), new Date("2026-11-26T09:00:00Z"), T("10:00:01"), { late: T("09:00:00"), lateMs: 3_601_000 }],
    ["a daily tick exactly an hour late is run", yesterday, T("09:00:00"), new Date("2026-11-26T09:00:00Z"), T("10:00:00"), { run: T("09:00:00") }],
    ["an every-minute tick more than half a minute late waits for the next", rec("08:59:00"), T("09:00:00"), T("09:01:00"), T("09:00:31"), { late: T("09:00:00"), lateMs: 31_000 }],
    ["an every-minute tick 20 s late is run", rec("08:59:00"), T("09:00:00"), T("09:01:00"), T("09:00:20"), { run: T("09:00:00") }],
    ["several ticks missed: only the latest is run, once", rec("06:00:00"), T("09:00:00"), T("10:00:00"), T("09:10:00"), { run: T("09:00:00") }],
    ["a schedule with no previous occurrence: nothing to catch up", rec("06:00:00"), undefined, T("10:00:00"), T("09:10:00"), undefined],
    ["an unreadable recorded tick counts as missed", { tick: "garbage", done: true }, T("09:00:00"), T("10:00:00"), T("09:10:00"), { run: T("09:00:00") }],
    ["a last occurrence with none after it (a one-off date) is run within the hour", rec("06:00:00"), T("09:00:00"), undefined, T("09:10:00"), { run: T("09:00:00") }],
  ];
  it.each(cases)("%s", (_name, record, previous, next, now, expected) => {
    expect(catchUp(record, previous, next, now.getTime())).toEqual(expected);
  });
});

let h: Harness | undefined;
afterEach(async () => {
  await h?.stop();
  h = undefined;
});

/** A daily job (UTC) whose last occurrence, `due`, was `minutesAgo` minutes ago. */
function dailyJobDue(id: string, minutesAgo: number) {
  const due = new Date(Date.now() - minutesAgo * 60_000);
  due.setUTCSeconds(0, 0);
  return { job: { id, schedule: `${due.getUTCMinutes()} ${due.getUTCHours()} * * *`, timezone: "UTC", message: `report ${id}` }, due };
}

async function schedulerWithRecord(job: ReturnType<typeof dailyJobDue>["job"], record: TickRecord | undefined) {
  h = await startHarness({ store: "sqlite", responder: toolDriver(), config: { cron: { jobs: [job] } } });
  // The daemon's own scheduler started with no record (a new job); this one starts after a restart.
  features(h).cron.stop();
  if (record) await h.app.kv.space<TickRecord>("cron").set(`cron:${job.id}`, record);
  const logs: Array<{ msg: string; missed?: string }> = [];
  const scheduler = new CronScheduler(h.app, pino({ level: "info" }, { write: (line: string) => void logs.push(JSON.parse(line)) }));
  await scheduler.start();
  return { scheduler, logs };
}

describe("cron: ticks missed while the daemon was down", () => {
  it("a daily tick missed 5 minutes ago (the daemon was restarting) is run once at start, and recorded as done", async () => {
    const { job, due } = dailyJobDue("brief", 5);
    const { scheduler, logs } = await schedulerWithRecord(job, { tick: new Date(due.getTime() - 86_400_000).toISOString(), done: true });
    try {
      await vi.waitFor(async () => expect((await messagesOf(h!.app, "cron:brief")).some((m) => m.role === "assistant")).toBe(true), { timeout: 5000 });
      expect(logs.map((l) => l.msg)).toContain("cron job tick missed while the daemon was down (or cut short): running it now");
      await vi.waitFor(async () => expect(await h!.app.kv.space<TickRecord>("cron").get("cron:brief")).toMatchObject({ done: true }), { timeout: 5000 });
      // The scheduled time, not the moment it ran late.
      expect(await h!.app.kv.space<TickRecord>("cron").get("cron:brief")).toEqual({ tick: due.toISOString(), done: true });
      expect((await messagesOf(h!.app, "cron:brief")).filter((m) => m.role === "user")).toHaveLength(1);
    } finally {
      scheduler.stop();
    }
  });

  it("a tick whose run the daemon died in is run again at start", async () => {
    const { job, due } = dailyJobDue("cut", 2);
    const { scheduler } = await schedulerWithRecord(job, { tick: due.toISOString(), done: false });
    try {
      await vi.waitFor(async () => expect((await messagesOf(h!.app, "cron:cut")).some((m) => m.role === "assistant")).toBe(true), { timeout: 5000 });
    } finally {
      scheduler.stop();
    }
  });

  it("a tick is recorded as started while its run goes; a run cut short by shutdown stays not done, so the next start runs the tick again", async () => {
    const stateDir = mkdtempSync(path.join(os.tmpdir(), "sb-cron-cut-"));
    // The first run is held until the daemon shuts down; the run after the restart is answered.
    const answer = toolDriver();
    const model = new FakeModelServer((req, index) => (index === 0 ? { content: "late", delayMs: 600_000 } : answer(req, index)));
    const { job, due } = dailyJobDue("slow", 5);
    const config = { cron: { jobs: [job] } };
    try {
      h = await startHarness({ stateDir, model, store: "sqlite", config });
      features(h).cron.stop();
      await h.app.kv.space<TickRecord>("cron").set("cron:slow", { tick: new Date(due.getTime() - 86_400_000).toISOString(), done: true });
      const scheduler = new CronScheduler(h.app, pino({ level: "silent" }));
      await scheduler.start();
      await vi.waitFor(() => expect(model.requests).toHaveLength(1), { timeout: 5000 });
      expect(await h.app.kv.space<TickRecord>("cron").get("cron:slow")).toEqual({ tick: due.toISOString(), done: false });
      // Shutdown cuts the run short (drain's bound reached at once).
      await h.app.runtime.drain(0);
      scheduler.stop();
      await h.stop({ keepState: true });
      h = undefined;
      h = await startHarness({ stateDir, model, store: "sqlite", config });
      await vi.waitFor(async () => expect((await messagesOf(h!.app, "cron:slow")).some((m) => m.role === "assistant")).toBe(true), { timeout: 5000 });
      await vi.waitFor(async () => expect(await h!.app.kv.space<TickRecord>("cron").get("cron:slow")).toEqual({ tick: due.toISOString(), done: true }), { timeout: 5000 });
    } finally {
      await h?.stop();
      h = undefined;
      await model.stop();
      rmSync(stateDir, { recursive: true, force: true });
    }
  });

  it("a daily tick missed two hours ago is not run (logged as too late); a new job is not run at once; a tick that ran is not run again", async () => {
    const late = dailyJobDue("late", 120);
    const { scheduler, logs } = await schedulerWithRecord(late.job, { tick: new Date(late.due.getTime() - 86_400_000).toISOString(), done: true });
    scheduler.stop();
    expect(logs.map((l) => l.msg)).toContain("cron job tick missed while the daemon was down: too late to run now, waiting for the next");
    await h!.stop();
    const fresh = await schedulerWithRecord(dailyJobDue("fresh", 5).job, undefined);
    fresh.scheduler.stop();
    await h!.stop();
    const ran = dailyJobDue("ran", 5);
    const again = await schedulerWithRecord(ran.job, { tick: ran.due.toISOString(), done: true });
    again.scheduler.stop();
    await h!.app.router.idle();
    expect(h!.model.requests).toEqual([]);
    expect(h!.app.sessions.get("cron:ran")).toBeUndefined();
    expect(fresh.logs.map((l) => l.msg)).toEqual(["cron job scheduled"]);
    expect(again.logs.map((l) => l.msg)).toEqual(["cron job scheduled"]);
  });
});

describe("cron: the wall clock set back while the daemon runs", () => {
  it("a clock set back across a tick that already ran (an NTP correction) does not run that tick again", async () => {
    const job = { id: "hourly", schedule: "0 * * * *", timezone: "UTC", message: "hourly report" };
    h = await startHarness({ store: "sqlite", responder: toolDriver(), config: { cron: { jobs: [job] } } });
    features(h).cron.stop();
    // croner's timers and the wall clock are driven by hand from here; the rest runs in real time.
    vi.useFakeTimers({ toFake: ["Date", "setTimeout", "clearTimeout"], shouldAdvanceTime: true, now: new Date("2026-11-25T08:59:59.000Z") });
    const logs: Array<{ msg: string }> = [];
    const scheduler = new CronScheduler(h.app, pino({ level: "info" }, { write: (line: string) => void logs.push(JSON.parse(line)) }));
    const reports = async () => (await messagesOf(h!.app, "cron:hourly")).filter((m) => m.role === "user");
    try {
      await scheduler.start();
      await vi.advanceTimersByTimeAsync(1000);
      await vi.waitFor(async () => expect(await h!.app.kv.space<TickRecord>("cron").get("cron:hourly")).toEqual({ tick: "2026-11-25T09:00:00.000Z", done: true }), { timeout: 5000 });
      // Set back an hour: 09:00 comes round again.
      vi.setSystemTime(new Date(Date.now() - 3600_000));
      await vi.advanceTimersByTimeAsync(3600_000);
      await h.app.router.idle();
      await vi.waitFor(async () => expect(await h!.app.kv.space<TickRecord>("cron").get("cron:hourly")).toMatchObject({ done: true }), { timeout: 5000 });
      expect(await reports()).toHaveLength(1);
      expect(h.model.requests).toHaveLength(1);
      expect(logs.map((l) => l.msg)).toContain("cron job tick skipped: the clock was set back, and this tick already ran");
      // Ticks after the last one run as ever.
      await vi.advanceTimersByTimeAsync(3600_000);
      await vi.waitFor(async () => expect(await h!.app.kv.space<TickRecord>("cron").get("cron:hourly")).toEqual({ tick: "2026-11-25T10:00:00.000Z", done: true }), { timeout: 5000 });
      expect(await reports()).toHaveLength(2);
    } finally {
      scheduler.stop();
      vi.useRealTimers();
    }
  });
});
