/**
 * Hostile tool arguments: the session tools (sessions_list/history/send/spawn, agents_list) get
 * thousands of generated argument objects — mostly shaped like their own parameters with
 * plausible or hostile values, sometimes anything — from a plain and from a sandboxed session;
 * and, through real runs, the model "calls" tools with random argument text (bad JSON included).
 * Each call answers with a JSON result or a clear error within a bound; runs end; the store and
 * the transcripts stay well-formed.
 */
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { AgentTool, ToolContext } from "../../src/tools/types.js";
import { startHarness, type Harness } from "../helpers/harness.js";
import { FUZZ_SEED, hostileString, hostileValue, mostly, shapedLike } from "../helpers/hostile.js";
import { RecordingAdapter } from "../helpers/recording-adapter.js";
import { checkState } from "../helpers/state-check.js";
import { afterTool, features, stepOf } from "../helpers/tool-driver.js";

const DIRECT_CASES = 1600;
const RUN_CASES = 120;
const CASE_BOUND_MS = 10_000;
/** With sandbox mode "non-main", the main session is not sandboxed and a group session is. */
const MAIN = "agent:main:main";
const PLAIN = "agent:main:telegram:group:-100700";
const CHILD = "agent:main:subagent:11111111-2222-3333-4444-555555555555";

let h: Harness;
let runArgs = "{}";
let runTool = "sessions_list";
beforeAll(async () => {
  h = await startHarness({
    config: { agents: { defaults: { sandbox: { mode: "non-main", sessionToolsVisibility: "spawned" }, runTimeoutSeconds: 5, maxConcurrent: 8 } } },
    adapters: [new RecordingAdapter("telegram"), new RecordingAdapter("discord")],
    responder: (req) => {
      const step = stepOf(req);
      if (step === "a2a-reply") return { content: "REPLY_SKIP" };
      if (step === "a2a-announce" || step === "subagent-announce") return { content: "ANNOUNCE_SKIP" };
      if (afterTool(req)) return { content: "done" };
      const last = [...req.messages].reverse().find((m) => m.role === "user");
      if (String(last?.content ?? "").includes("FUZZ-CALL")) return { toolCalls: [{ name: runTool, arguments: runArgs }] };
      return { content: "ok" };
    },
  });
  const { sessions } = h.app;
  await sessions.upsert(PLAIN, "main", { chatType: "group", channel: "telegram", displayName: "Plain", label: "plain", deliveryContext: { channel: "telegram", to: "-100700", accountId: "default" } });
  await sessions.upsert("agent:main:telegram:group:-100701", "main", { chatType: "group", channel: "telegram", label: "other" });
  await sessions.upsert("agent:main:discord:channel:9001", "main", { chatType: "channel", channel: "discord" });
  await sessions.upsert(MAIN, "main", { chatType: "direct", lastChannel: "telegram", deliveryContext: { channel: "telegram", to: "1001", accountId: "default" } });
  await sessions.upsert(CHILD, "main", { spawnedBy: PLAIN, label: "child" });
  await sessions.upsert("agent:main:subagent:99999999-2222-3333-4444-555555555555", "main", { spawnedBy: CHILD, label: "grandchild" });
});
afterAll(async () => {
  await h?.stop();
});

const keys = fc.oneof(
  fc.constantFrom("main", MAIN, PLAIN, CHILD, "agent:main:telegram:group:-100701", "agent:main:discord:channel:9001", "agent:main:subagent:99999999-2222-3333-4444-555555555555", "agent:main:subagent:", "agent:main:sub", "agent:other:main"),
  hostileString,
);
const plausibleArgs: Record<string, fc.Arbitrary<Record<string, unknown>>> = {
  sessions_list: fc.record({ kinds: mostly(fc.subarray(["main", "group", "cron", "hook", "node", "other"])), limit: mostly(fc.integer({ min: 1, max: 500 })), activeMinutes: mostly(fc.integer({ min: 1, max: 600 })), messageLimit: mostly(fc.integer({ min: 0, max: 30 })) }, { requiredKeys: [] }),
  sessions_history: fc.record({ sessionKey: mostly(keys), limit: mostly(fc.integer({ min: 1, max: 2000 })), includeTools: mostly(fc.boolean()) }, { requiredKeys: ["sessionKey"] }),
  sessions_send: fc.record({ sessionKey: mostly(keys), label: mostly(fc.constantFrom("plain", "other", "child", "grandchild", "none")), message: mostly(fc.string({ minLength: 1, maxLength: 40 })), timeoutSeconds: mostly(fc.constantFrom(0, 0.01, 1, 5)) }, { requiredKeys: [] }),
  sessions_spawn: fc.record({ task: mostly(fc.string({ minLength: 1, maxLength: 40 })), label: mostly(fc.string({ minLength: 1, maxLength: 64 })), agentId: mostly(fc.constantFrom("main", "other", "MAIN", "")), model: mostly(fc.constantFrom("fake/m", "nope/x")), runTimeoutSeconds: mostly(fc.integer({ min: 0, max: 5 })), cleanup: mostly(fc.constantFrom("keep", "delete")) }, { requiredKeys: ["task"] }),
  agents_list: fc.constant({}),
};

function argsFor(tool: AgentTool): fc.Arbitrary<unknown> {
  const props = Object.keys((tool.parameters as { properties?: Record<string, unknown> }).properties ?? {});
  return fc.oneof({ weight: 4, arbitrary: plausibleArgs[tool.name] ?? shapedLike(props) }, { weight: 2, arbitrary: shapedLike(props) }, { weight: 1, arbitrary: hostileValue }, { weight: 1, arbitrary: fc.anything() });
}

function bounded<T>(p: Promise<T>, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([p, new Promise<T>((_, reject) => (timer = setTimeout(() => reject(new Error(`${what}: no answer within ${CASE_BOUND_MS} ms`)), CASE_BOUND_MS)))]).finally(() => clearTimeout(timer));
}

describe("session tools under hostile arguments", () => {
  it(`fuzz: ${DIRECT_CASES} generated argument objects get a JSON result or a clear error, from the main and from a sandboxed session`, async () => {
    const from = (key: string) => h.app.toolsFor({ sessionKey: key, agentId: "main" });
    const byName = (key: string) => new Map(from(key).map((t) => [t.name, t]));
    const tools = { plain: byName(MAIN), sandboxed: byName(PLAIN) };
    const names = [...tools.plain.keys()].filter((n) => n.startsWith("sessions_") || n === "agents_list");
    expect(names).toEqual(expect.arrayContaining(["sessions_list", "sessions_history", "sessions_send", "sessions_spawn", "agents_list"]));
    const outcomes = new Map<string, number>();
    let n = 0;
    const cases = fc.tuple(fc.constantFrom(...names), fc.constantFrom("plain", "sandboxed" as const)).chain(([name, who]) => {
      const tool = tools[who].get(name) ?? tools.plain.get(name)!;
      return argsFor(tool).map((args) => ({ name, who, tool: tools[who].get(name), args }));
    });
    await fc.assert(
      fc.asyncProperty(cases, async ({ name, who, tool, args }) => {
        if (!tool) throw new Error(`${name} missing for the ${who} session`);
        const ctx: ToolContext = { sessionKey: who === "plain" ? MAIN : PLAIN, agentId: "main", runId: `fuzz-${++n}`, signal: new AbortController().signal, origin: { channel: "telegram", to: "-100700", accountId: "default" } };
        let result: unknown;
        try {
          result = await bounded(tool.execute(args, ctx), `${name}(${JSON.stringify(args)?.slice(0, 200)})`);
        } catch (err) {
          if (!(err instanceof Error) || !err.message || /no answer within/.test(err.message)) throw err;
          outcomes.set("threw", (outcomes.get("threw") ?? 0) + 1);
          return;
        }
        const json = JSON.stringify(result);
        if (json === undefined || typeof result !== "object" || result === null) throw new Error(`${name} returned ${String(result)}`);
        const status = (result as { status?: unknown }).status;
        if (status === "error" || status === "forbidden") {
          const error = (result as { error?: unknown }).error;
          if (typeof error !== "string" || !error.trim()) throw new Error(`${name} error without a message: ${json}`);
        }
        outcomes.set(String(status ?? "ok"), (outcomes.get(String(status ?? "ok")) ?? 0) + 1);
      }),
      { numRuns: DIRECT_CASES, seed: FUZZ_SEED + 7, endOnFailure: true },
    );
    console.info(`tools fuzz: ${DIRECT_CASES} calls → ${[...outcomes].map(([k, v]) => `${v} ${k}`).join(", ")}`);
    await bounded(features(h).background.idle(), "background work");
  }, 180_000);

  it(`fuzz: ${RUN_CASES} model tool calls with random argument text end their runs with a recorded tool result`, async () => {
    const names = ["sessions_list", "sessions_history", "sessions_send", "sessions_spawn", "agents_list", "no_such_tool"];
    const argText = fc.oneof(fc.string({ maxLength: 80 }), hostileValue.map((v) => JSON.stringify(v) ?? ""), fc.constantFrom("", "{", "null", "[]", '{"sessionKey":', '{"task":"x","__proto__":{"admin":true}}', "\u0000"));
    let i = 0;
    await fc.assert(
      fc.asyncProperty(fc.constantFrom(...names), argText, async (name, args) => {
        runTool = name;
        runArgs = args;
        const { done } = h.app.runtime.start({ sessionKey: PLAIN, agentId: "main", message: `FUZZ-CALL ${++i}`, runId: `fuzz-run-${i}` });
        const outcome = await bounded(done, `run calling ${name}(${args.slice(0, 80)})`);
        if (outcome.status !== "ok" && !(outcome.status === "error" && outcome.error)) throw new Error(`run ended ${JSON.stringify(outcome)}`);
      }),
      { numRuns: RUN_CASES, seed: FUZZ_SEED + 8, endOnFailure: true },
    );
    const entry = h.app.sessions.require(PLAIN);
    const messages = await h.app.transcripts.readMessages(h.app.sessions.transcriptPath(entry));
    expect(messages.filter((m) => m.role === "toolResult").length).toBeGreaterThanOrEqual(RUN_CASES);
    await bounded(features(h).background.idle(), "background work");
  }, 120_000);

  it("fuzz: afterwards every session entry and transcript line in the state directory is well-formed", async () => {
    await h.app.router.idle();
    await h.app.sessions.flush();
    await h.app.transcripts.flush();
    const { problems } = await checkState(h.stateDir);
    expect(problems).toEqual([]);
  });
});
