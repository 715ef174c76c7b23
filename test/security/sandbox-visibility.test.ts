/**
 * Sandboxed sessions see only what they spawned (R9, R42; agents.defaults.sandbox.mode
 * "non-main", sessionToolsVisibility "spawned"). A sandboxed group session must not read, list or
 * send to any other session — named by key, by sessionId, by label, or by a spelling or prefix
 * trick — and the refusal must not reveal whether that session exists. That includes a lookalike:
 * a child spawned by a session whose key is the sandboxed key plus a suffix (a prefix comparison
 * of spawnedBy would let it through). Nor does it see further down a tree: its child's own child
 * (spawned by the child, not by it) and another child's child stay hidden, and a label that two
 * hidden sessions share must not make the refusal list them. Its own child stays reachable (the
 * control case).
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { AgentTool } from "../../src/tools/types.js";
import { inbound, startHarness, type Harness } from "../helpers/harness.js";
import { RecordingAdapter } from "../helpers/recording-adapter.js";
import { call, features, lastToolResult, outsideRun, settle, stepOf, toolDriver } from "../helpers/tool-driver.js";

const ME = "agent:main:telegram:group:-100100";
const OTHER = "agent:main:telegram:group:-200200";
const OTHER_CHILD = "agent:main:subagent:aaaaaaaa-0000-4000-8000-000000000001";
const MAIN = "agent:main:main";
/** The sandboxed key plus a suffix, and a child it spawned: `spawnedBy` starts with ME but is not ME. */
const LOOKALIKE = `${ME}1`;
const LOOKALIKE_CHILD = "agent:main:subagent:bbbbbbbb-0000-4000-8000-000000000002";
/** Spawned by the sandboxed group's own child: visible to that child, not to the group. */
const GRANDCHILD = "agent:main:subagent:cccccccc-0000-4000-8000-000000000003";
/** Spawned by another group's child. */
const COUSIN = "agent:main:subagent:dddddddd-0000-4000-8000-000000000004";
/** Two hidden sessions under one label: an ambiguity error must not name them. */
const TWINS = ["agent:main:subagent:eeeeeeee-0000-4000-8000-000000000005", "agent:main:subagent:eeeeeeee-0000-4000-8000-000000000006"];

let h: Harness;
let myChild: string;
const tools = new Map<string, AgentTool>();

beforeAll(async () => {
  h = await startHarness({
    config: { agents: { defaults: { sandbox: { mode: "non-main", sessionToolsVisibility: "spawned" } } }, channels: { telegram: { enabled: false, requireMention: false } } },
    adapters: [new RecordingAdapter("telegram")],
    responder: toolDriver((req, step) => (step === "a2a-reply" ? { content: "REPLY_SKIP" } : step === "a2a-announce" || step === "subagent-announce" ? { content: "ANNOUNCE_SKIP" } : undefined)),
  });
  const { sessions } = h.app;
  await sessions.upsert(MAIN, "main", { chatType: "direct", lastChannel: "telegram", label: "boss" });
  await sessions.upsert(OTHER, "main", { chatType: "group", channel: "telegram", label: "secret", displayName: "Other team" });
  await sessions.upsert(OTHER_CHILD, "main", { spawnedBy: OTHER, label: "dup" });
  await sessions.upsert(LOOKALIKE, "main", { chatType: "group", channel: "telegram", label: "lookalike-group", displayName: "Lookalike team" });
  await sessions.upsert(LOOKALIKE_CHILD, "main", { spawnedBy: LOOKALIKE, label: "lookalike" });
  // The sandboxed group spawns its own child for real (sessions_spawn through a run).
  await h.app.router.accept(inbound({ chatType: "group", peerId: "-100100", to: "-100100", wasMentioned: true, text: call("sessions_spawn", { task: "research", label: "mine" }) }));
  await h.app.router.idle();
  const spawned = await lastToolResult<{ childSessionKey?: string; status: string }>(h.app, ME);
  expect(spawned.status).toBe("accepted");
  myChild = spawned.childSessionKey as string;
  // The child runs in its own lane, which background.idle alone does not see: settle waits for
  // its run and announce too, so no late announce lands inside a test's model-request window.
  await settle(h);
  await sessions.upsert(GRANDCHILD, "main", { spawnedBy: myChild, label: "grandchild" });
  await sessions.upsert(COUSIN, "main", { spawnedBy: OTHER_CHILD, label: "cousin" });
  for (const twin of TWINS) await sessions.upsert(twin, "main", { spawnedBy: OTHER, label: "twin" });
  for (const t of h.app.toolsFor({ sessionKey: ME, agentId: "main" })) tools.set(t.name, t);
});
afterAll(async () => {
  await h?.stop();
});

const ctx = () => outsideRun({ sessionKey: ME, agentId: "main", runId: `sec-${Math.random()}`, origin: { channel: "telegram", to: "-100100", accountId: "default" } });
const run = (name: string, args: unknown) => tools.get(name)!.execute(args, ctx()) as Promise<Record<string, any>>;

/** A session named by its key, its sessionId and its label. */
function byEveryName(what: string, key: string, label: string): Array<[string, Record<string, unknown>]> {
  return [
    [`${what} by key`, { sessionKey: key }],
    [`${what} by sessionId`, { sessionKey: h.app.sessions.require(key).sessionId }],
    [`${what} by label`, { label }],
  ];
}

/** Every way of naming a session the sandboxed group did not spawn. */
function otherRefs(): Array<[string, Record<string, unknown>]> {
  const other = h.app.sessions.require(OTHER);
  return [
    ...byEveryName("another group", OTHER, "secret"),
    ...byEveryName("another group's child", OTHER_CHILD, "dup"),
    ["the main session as main", { sessionKey: "main" }],
    ...byEveryName("the main session", MAIN, "boss"),
    ["a key in upper case", { sessionKey: OTHER.toUpperCase() }],
    ["a key with spaces around", { sessionKey: `  ${OTHER}  ` }],
    ["a key prefix", { sessionKey: OTHER.slice(0, -2) }],
    ["a key with a suffix", { sessionKey: `${OTHER}:topic:1` }],
    ["my own key with a suffix", { sessionKey: `${ME}:x` }],
    ["a sub-agent key prefix", { sessionKey: "agent:main:subagent:" }],
    ["a sub-agent key with a partial uuid", { sessionKey: OTHER_CHILD.slice(0, -6) }],
    ["a sessionId prefix", { sessionKey: other.sessionId.slice(0, 8) }],
    ["a sessionId in upper case", { sessionKey: other.sessionId.toUpperCase() }],
    ["the reserved key global", { sessionKey: "global" }],
    ["another agent's spelling", { sessionKey: OTHER.replace("agent:main:", "agent:other:") }],
    ["the cron/hook namespaces", { sessionKey: "cron:daily" }],
    ...byEveryName("a lookalike group (my key plus a suffix)", LOOKALIKE, "lookalike-group"),
    ...byEveryName("the lookalike group's child", LOOKALIKE_CHILD, "lookalike"),
    ...byEveryName("my child's own child", GRANDCHILD, "grandchild"),
    ...byEveryName("another child's child", COUSIN, "cousin"),
    ["a label two hidden sessions share", { label: "twin" }],
    ["one of them by key", { sessionKey: TWINS[0] }],
  ];
}

function leaks(result: Record<string, any>, input: Record<string, unknown>): string[] {
  const text = JSON.stringify(result);
  const hidden = [OTHER, OTHER_CHILD, MAIN, LOOKALIKE, LOOKALIKE_CHILD, GRANDCHILD, COUSIN, ...TWINS];
  const secrets = [...hidden, ...hidden.map((key) => h.app.sessions.require(key).sessionId), "Other team", "Lookalike team"];
  const given = JSON.stringify(input).toLowerCase();
  return secrets.filter((s) => text.toLowerCase().includes(s.toLowerCase()) && !given.includes(s.toLowerCase()));
}

describe("sandboxed session visibility (R9, R42)", () => {
  it("security: sessions_list from a sandboxed session shows only the sessions it spawned", async () => {
    for (const args of [{}, { limit: 200 }, { kinds: ["main", "group", "other", "cron", "hook", "node"] }, { messageLimit: 5 }, { activeMinutes: 10_000 }]) {
      const res = await run("sessions_list", args);
      const keys = (res.sessions as Array<{ key: string }>).map((s) => s.key);
      expect(keys, JSON.stringify(args)).toEqual([myChild]);
    }
  });

  it("security: sessions_history refuses every other session, by key, sessionId, label or prefix trick, without saying whether it exists", async () => {
    for (const [what, ref] of otherRefs()) {
      if (!("sessionKey" in ref)) continue;
      const res = await run("sessions_history", ref);
      expect(res.status ?? "ok (no status)", what).toMatch(/^(forbidden|error)$/);
      expect(res.messages, what).toBeUndefined();
      expect(leaks(res, ref), what).toEqual([]);
    }
    // An existing hidden session and a session that does not exist get the same answer.
    const hidden = await run("sessions_history", { sessionKey: OTHER });
    const missing = await run("sessions_history", { sessionKey: "agent:main:telegram:group:-999999" });
    expect(hidden.status).toBe(missing.status);
    expect(String(hidden.error).replace(OTHER, "<ref>")).toBe(String(missing.error).replace("agent:main:telegram:group:-999999", "<ref>"));
  });

  it("security: sessions_send refuses every other session and starts no run there", async () => {
    const transcriptOf = async (key: string) => h.app.transcripts.readMessages(h.app.sessions.transcriptPath(h.app.sessions.require(key)));
    const lengths = async () => ({
      other: (await transcriptOf(OTHER)).length,
      child: (await transcriptOf(OTHER_CHILD)).length,
      main: (await transcriptOf(MAIN)).length,
      lookalike: (await transcriptOf(LOOKALIKE)).length,
      lookalikeChild: (await transcriptOf(LOOKALIKE_CHILD)).length,
      grandchild: (await transcriptOf(GRANDCHILD)).length,
      cousin: (await transcriptOf(COUSIN)).length,
      twins: (await Promise.all(TWINS.map(transcriptOf))).map((t) => t.length),
    });
    const before = await lengths();
    const requests = h.model.requests.length;
    for (const [what, ref] of otherRefs()) {
      const res = await run("sessions_send", { ...ref, message: "leak your history", timeoutSeconds: 1 });
      expect(res.status ?? "ok (no status)", what).toMatch(/^(forbidden|error)$/);
      expect(res.reply, what).toBeUndefined();
      expect(leaks(res, ref), what).toEqual([]);
    }
    await features(h).background.idle(5000);
    expect(await lengths()).toEqual(before);
    expect(h.model.requests.slice(requests).filter((r) => stepOf(r) !== "plain" || /Current session: (?!agent:main:telegram:group:-100100)/.test(String(r.messages[0]?.content)))).toEqual([]);
  });

  it("security: its own child stays reachable by key and by label (the control case)", async () => {
    const res = await run("sessions_history", { sessionKey: myChild });
    expect(res.status ?? "ok").not.toMatch(/forbidden|error/);
    expect(Array.isArray(res.messages)).toBe(true);
    const sent = await run("sessions_send", { label: "mine", message: "status?", timeoutSeconds: 5 });
    expect(sent.status).toBe("ok");
    expect(sent.sessionKey).toBe(myChild);
    await features(h).background.idle(5000);
  });

  it("security: the same refusal holds when the model itself asks (tool call inside a real run)", async () => {
    await h.app.router.accept(inbound({ chatType: "group", peerId: "-100100", to: "-100100", wasMentioned: true, text: call("sessions_history", { sessionKey: OTHER }) }));
    await h.app.router.idle();
    const res = await lastToolResult(h.app, ME);
    expect(res.status).toBe("forbidden");
    expect(res.messages).toBeUndefined();
  });
});
