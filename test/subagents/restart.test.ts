/**
 * The sub-agent registry across restarts (SQLite store, same state dir): a run in flight when
 * the daemon went down, or a finished run not yet announced, is announced exactly once by the
 * next daemon — and never again by the one after.
 */
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterEach, expect, it, vi } from "vitest";
import type { SubagentRun } from "../../src/agents/subagents/registry.js";
import type { ModelReply, ModelRequest } from "../fakes/model-server.js";
import { startHarness, type Harness } from "../helpers/harness.js";
import { RecordingAdapter } from "../helpers/recording-adapter.js";
import { callViaTelegram, features, settle, stepOf, toolDriver, type Step } from "../helpers/tool-driver.js";

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

/** Down the way a stop past its drain window goes: in-flight runs are cut off, then stop. */
async function goDown(h: Harness): Promise<void> {
  await h.app.runtime.drain(0);
  running.splice(running.indexOf(h), 1);
  await h.stop({ keepState: true });
}

it("R37 a sub-agent run interrupted by a restart is announced exactly once, as an error", async () => {
  stateDir = mkdtempSync(path.join(os.tmpdir(), "sb-restart-"));
  const a = await daemon((_req, step) => (step === "subagent" ? { delayMs: 30_000, content: "never arrives" } : undefined));
  const { result } = await callViaTelegram(a.h, { peerId: GROUP_PEER }, "sessions_spawn", { task: "long research" });
  expect(result.status).toBe("accepted");
  await vi.waitFor(() => expect(a.h.model.requests.some((r) => stepOf(r) === "subagent")).toBe(true));
  await goDown(a.h);
  expect(a.announces()).toEqual([]);

  const b = await daemon((_req, step) => (step === "subagent-announce" ? { content: "Result: could not finish\nNotes: try again" } : undefined));
  await settle(b.h);
  expect(b.announces()).toHaveLength(1);
  expect(b.announces()[0].split("\n").slice(0, 3)).toEqual(["Status: error", "Result: could not finish", "Notes: interrupted by restart; try again"]);
  expect(b.h.model.requests.filter((r) => stepOf(r) === "subagent-announce")).toHaveLength(1);
  expect(b.h.model.requests.filter((r) => stepOf(r) === "subagent")).toHaveLength(0);
  expect(features(b.h).subagents.get(result.runId)).toMatchObject({ outcome: { status: "error", error: "interrupted by restart" }, announcedAt: expect.any(Number) });
  await b.h.stop({ keepState: true });
  running.splice(running.indexOf(b.h), 1);

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
  // Pretend the process died after the enqueue but before the record was marked announced.
  const space = b.h.app.kv.space<SubagentRun>("subagents");
  const record = (await space.get(result.runId))!;
  await space.set(result.runId, { ...record, announcedAt: undefined });
  running.splice(running.indexOf(b.h), 1);
  await b.h.stop({ keepState: true });

  const c = await daemon((_req, step) => (step === "subagent-announce" ? { content: "Result: found it (again)" } : undefined));
  await settle(c.h);
  expect(c.h.model.requests.filter((r) => stepOf(r) === "subagent-announce")).toHaveLength(1);
  expect(c.announces()).toEqual([]);
  expect(c.h.app.outbox.get(`subagent-announce:${result.runId}`)).toMatchObject({ state: "sent", text: expect.stringContaining("Result: found it\n") });
});
