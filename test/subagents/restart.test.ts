/**
 * The sub-agent registry across restarts (SQLite store, same state dir): a run in flight when
 * the daemon went down, or a finished run not yet announced, is announced exactly once by the
 * next daemon — and never again by the one after.
 */
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import pino from "pino";
import { afterEach, expect, it, vi } from "vitest";
import { formatDuration } from "../../src/agents/subagents/announce.js";
import type { SubagentRun } from "../../src/agents/subagents/registry.js";
import type { ModelReply, ModelRequest } from "../fakes/model-server.js";
import { startHarness, type Harness } from "../helpers/harness.js";
import { RecordingAdapter } from "../helpers/recording-adapter.js";
import { openStoreDb } from "../helpers/store-db.js";
import { afterTool, callViaTelegram, features, settle, stepOf, toolDriver, type Step } from "../helpers/tool-driver.js";

const GROUP_PEER = "-100888";
let stateDir: string;
const running: Harness[] = [];

afterEach(async () => {
  for (const h of running.splice(0)) await h.stop({ keepState: true });
  rmSync(stateDir, { recursive: true, force: true });
});

async function daemon(script: (req: ModelRequest, step: Step) => ModelReply | undefined) {
  const telegram = new RecordingAdapter("telegram");
  const h = await startHarness({ stateDir, store: "sqlite", adapters: [telegram], responder: toolDriver(script) });
  running.push(h);
  return { h, telegram, announces: () => telegram.textsTo(GROUP_PEER).filter((t) => t.startsWith("Status:")) };
}

/** Stop a daemon as a clean shutdown does, keeping its state for the next one. */
async function stopKeeping(h: Harness): Promise<void> {
  running.splice(running.indexOf(h), 1);
  await h.stop({ keepState: true });
}

/** Down the way a stop past its drain window goes: in-flight runs are cut off, then stop. */
async function goDown(h: Harness): Promise<void> {
  await h.app.runtime.drain(0);
  await stopKeeping(h);
}

it("R37 R41 a sub-agent run interrupted by a restart is announced exactly once, as an error, with the tokens and runtime it used before (not the downtime)", async () => {
  stateDir = mkdtempSync(path.join(os.tmpdir(), "sb-restart-"));
  // One tool round (tokens counted), then a model call that never returns.
  const a = await daemon((req, step) =>
    step !== "subagent" ? undefined : afterTool(req) ? { delayMs: 30_000, content: "never arrives" } : { toolCalls: [{ name: "no_such_tool", arguments: {} }], usage: { prompt_tokens: 1000, completion_tokens: 200 } },
  );
  const { result } = await callViaTelegram(a.h, { peerId: GROUP_PEER }, "sessions_spawn", { task: "long research" });
  expect(result.status).toBe("accepted");
  await vi.waitFor(() => expect(a.h.model.requests.filter((r) => stepOf(r) === "subagent")).toHaveLength(2));
  await goDown(a.h);
  expect(a.announces()).toEqual([]);
  // The run was last seen when the shutdown marked its session aborted; then the daemon is down a while.
  const ranFor = a.h.app.sessions.require(result.childSessionKey).updatedAt - features(a.h).subagents.get(result.runId)!.createdAt;
  await new Promise((resolve) => setTimeout(resolve, 1500));
  const restartedAt = Date.now();

  const b = await daemon((_req, step) => (step === "subagent-announce" ? { content: "Result: could not finish\nNotes: try again" } : undefined));
  await settle(b.h);
  expect(b.announces()).toHaveLength(1);
  expect(b.announces()[0].split("\n").slice(0, 3)).toEqual(["Status: error", "Result: could not finish", "Notes: interrupted by restart; try again"]);
  expect(b.announces()[0].split("\n")[3]).toMatch(new RegExp(`^Stats: runtime ${formatDuration(ranFor)} • tokens 1\\.2k \\(in 1k \\/ out 200\\) • `));
  // R40: the archive window starts when the outcome is known, so the requester gets all of it.
  expect(features(b.h).subagents.get(result.runId)!.archiveAt).toBeGreaterThanOrEqual(restartedAt + 60 * 60_000);
  expect(b.h.model.requests.filter((r) => stepOf(r) === "subagent-announce")).toHaveLength(1);
  expect(b.h.model.requests.filter((r) => stepOf(r) === "subagent")).toHaveLength(0);
  expect(features(b.h).subagents.get(result.runId)).toMatchObject({ outcome: { status: "error", error: "interrupted by restart" }, announcedAt: expect.any(Number) });
  await stopKeeping(b.h);

  const c = await daemon(() => ({ content: "unexpected" }));
  await settle(c.h);
  expect(c.announces()).toEqual([]);
  expect(c.h.model.requests).toHaveLength(0);
});

it("R37 a finished run whose announce did not complete announces once after a restart; the outbox id dedupes a repeat", async () => {
  stateDir = mkdtempSync(path.join(os.tmpdir(), "sb-restart-"));
  const a = await daemon((_req, step) => (step === "subagent" ? { content: "found it" } : step === "subagent-announce" ? { delayMs: 30_000, content: "never arrives" } : undefined));
  const { result } = await callViaTelegram(a.h, { peerId: GROUP_PEER }, "sessions_spawn", { task: "quick lookup" });
  await vi.waitFor(() => expect(a.h.model.requests.some((r) => stepOf(r) === "subagent-announce")).toBe(true));
  await goDown(a.h);
  expect(a.announces()).toEqual([]);

  const b = await daemon((_req, step) => (step === "subagent-announce" ? { content: "Result: found it" } : undefined));
  await settle(b.h);
  expect(b.announces()).toHaveLength(1);
  expect(b.announces()[0].split("\n").slice(0, 3)).toEqual(["Status: ok", "Result: found it", "Notes: none"]);
  // The announce came from b's own announce step, not from a degraded one a posted while stopping.
  expect(b.h.model.requests.filter((r) => stepOf(r) === "subagent-announce")).toHaveLength(1);
  // Pretend the process died after the enqueue but before the record was marked announced.
  const space = b.h.app.kv.space<SubagentRun>("subagents");
  const record = (await space.get(result.runId))!;
  await space.set(result.runId, { ...record, announcedAt: undefined });
  await stopKeeping(b.h);

  const c = await daemon((_req, step) => (step === "subagent-announce" ? { content: "Result: found it (again)" } : undefined));
  await settle(c.h);
  expect(c.h.model.requests.filter((r) => stepOf(r) === "subagent-announce")).toHaveLength(1);
  expect(c.announces()).toEqual([]);
  expect(c.h.app.outbox.get(`subagent-announce:${result.runId}`)).toMatchObject({ state: "sent", text: expect.stringContaining("Result: found it\n") });
});

it("R37 R39 a sub-agent run that completes while the daemon drains keeps its ok outcome: the next daemon announces it as ok, not as interrupted", async () => {
  stateDir = mkdtempSync(path.join(os.tmpdir(), "sb-restart-"));
  const a = await daemon((_req, step) => (step === "subagent" ? { delayMs: 400, content: "finished while stopping" } : undefined));
  const { result } = await callViaTelegram(a.h, { peerId: GROUP_PEER }, "sessions_spawn", { task: "quick job" });
  await vi.waitFor(() => expect(a.h.model.requests.filter((r) => stepOf(r) === "subagent")).toHaveLength(1));
  // A clean stop: its drain window lets the run finish; no announce step can start any more.
  await stopKeeping(a.h);
  expect(a.announces()).toEqual([]);

  const b = await daemon((_req, step) => (step === "subagent-announce" ? { content: "Notes: none" } : undefined));
  await settle(b.h);
  expect(b.announces()).toHaveLength(1);
  expect(b.announces()[0].split("\n").slice(0, 3)).toEqual(["Status: ok", "Result: finished while stopping", "Notes: none"]);
  expect(features(b.h).subagents.get(result.runId)).toMatchObject({ outcome: { status: "ok", reply: "finished while stopping" } });
});

it("R37 a delete-mode run announced just before the process died is cleaned up by the next daemon: child deleted, record dropped", async () => {
  stateDir = mkdtempSync(path.join(os.tmpdir(), "sb-restart-"));
  const a = await daemon((_req, step) => (step === "subagent-announce" ? { content: "Result: done" } : undefined));
  const { result } = await callViaTelegram(a.h, { peerId: GROUP_PEER }, "sessions_spawn", { task: "quick lookup" });
  await settle(a.h);
  expect(a.announces()).toHaveLength(1);
  // Pretend it was a delete-mode run and the process died after the record was marked announced
  // but before the cleanup deleted the child.
  const space = a.h.app.kv.space<SubagentRun>("subagents");
  const record = (await space.get(result.runId))!;
  expect(record.announcedAt).toEqual(expect.any(Number));
  await space.set(result.runId, { ...record, cleanup: "delete" });
  await stopKeeping(a.h);

  const b = await daemon(() => ({ content: "unexpected" }));
  await settle(b.h);
  expect(b.h.app.sessions.get(result.childSessionKey)).toBeUndefined();
  expect(await b.h.app.kv.space<SubagentRun>("subagents").get(result.runId)).toBeUndefined();
  expect(b.h.model.requests).toHaveLength(0);
  expect(b.announces()).toEqual([]);
});

it("R40 archive times survive a restart: children whose time came while the daemon was down are archived at start, one not yet due is not", async () => {
  stateDir = mkdtempSync(path.join(os.tmpdir(), "sb-restart-"));
  const a = await daemon((_req, step) => (step === "subagent-announce" ? { content: "ANNOUNCE_SKIP" } : undefined));
  const spawnOne = async (task: string) => (await callViaTelegram(a.h, { peerId: GROUP_PEER }, "sessions_spawn", { task })).result;
  const due = await spawnOne("one");
  const dueArchived = await spawnOne("two");
  const later = await spawnOne("three");
  await settle(a.h);
  const space = a.h.app.kv.space<SubagentRun>("subagents");
  for (const run of [due, dueArchived]) await space.set(run.runId, { ...(await space.get(run.runId))!, archiveAt: Date.now() - 1 });
  // Archived by hand meanwhile: the sweep keeps that time.
  await a.h.app.sessions.upsert(dueArchived.childSessionKey, "main", { archivedAt: 1234 });
  await stopKeeping(a.h);

  const b = await daemon(() => undefined);
  await vi.waitFor(() => expect(b.h.app.sessions.require(due.childSessionKey).archivedAt).toBeDefined());
  await settle(b.h);
  expect(b.h.app.sessions.require(dueArchived.childSessionKey).archivedAt).toBe(1234);
  expect(features(b.h).subagents.get(due.runId)).toBeUndefined();
  expect(features(b.h).subagents.get(dueArchived.runId)).toBeUndefined();
  expect(b.h.app.sessions.require(later.childSessionKey).archivedAt).toBeUndefined();
  expect(features(b.h).subagents.get(later.runId)).toMatchObject({ archiveAt: expect.any(Number), announcedAt: expect.any(Number) });
  // R38 an ANNOUNCE_SKIP counts as announced: the next daemon does not ask again, nor post.
  expect(b.h.model.requests).toHaveLength(0);
  expect(b.announces()).toEqual([]);
});

it("R37 a sub-agent run that ends while the store cannot write (a full disk) is announced with its outcome once the store writes again — not left for a restart to report it interrupted", async () => {
  stateDir = mkdtempSync(path.join(os.tmpdir(), "sb-restart-"));
  let release!: () => void;
  const held = new Promise<void>((resolve) => (release = resolve));
  const lines: Array<{ level: number; msg: string }> = [];
  const telegram = new RecordingAdapter("telegram");
  const h = await startHarness({
    stateDir,
    store: "sqlite",
    adapters: [telegram],
    log: pino({ level: "warn" }, { write: (line: string) => void lines.push(JSON.parse(line)) }),
    responder: toolDriver(async (_req, step) => {
      if (step === "subagent") {
        await held;
        return { content: "found it" };
      }
      return step === "subagent-announce" ? { content: "Notes: none" } : undefined;
    }),
  });
  running.push(h);
  const { result } = await callViaTelegram(h, { peerId: GROUP_PEER }, "sessions_spawn", { task: "quick lookup" });
  await vi.waitFor(() => expect(h.model.requests.some((r) => stepOf(r) === "subagent")).toBe(true));
  const db = await openStoreDb(stateDir);
  try {
    await db.exec("CREATE TRIGGER test_disk_full BEFORE UPDATE ON keyv WHEN NEW.key LIKE 'subagents:%' BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END");
    release();
    // The run's end could not be recorded: the log says so.
    await vi.waitFor(() => expect(lines.some((l) => /disk is full/.test(JSON.stringify(l)))).toBe(true), { timeout: 5000 });
    await db.exec("DROP TRIGGER test_disk_full");
  } finally {
    await db.close();
  }
  await vi.waitFor(() => expect(telegram.textsTo(GROUP_PEER).filter((t) => t.startsWith("Status:"))).toHaveLength(1), { timeout: 10_000 });
  expect(telegram.textsTo(GROUP_PEER).find((t) => t.startsWith("Status:"))!.split("\n").slice(0, 2)).toEqual(["Status: ok", "Result: found it"]);
  expect(await h.app.kv.space<SubagentRun>("subagents").get(result.runId)).toMatchObject({ outcome: { status: "ok" }, announcedAt: expect.any(Number) });
});
