/**
 * Sandbox visibility end to end (R9, R42): with agents.defaults.sandbox.mode "non-main", a group
 * session is sandboxed and its session tools see only the sessions it spawned — whatever
 * spelling, sessionId, label or prefix it tries.
 */
import { afterEach, describe, expect, it } from "vitest";
import { inbound, startHarness, type Harness } from "../helpers/harness.js";
import { RecordingAdapter } from "../helpers/recording-adapter.js";
import { callViaTelegram, settle, stepOf, toolDriver } from "../helpers/tool-driver.js";

const SANDBOXED = "-100901";
const OTHER_GROUP = "-100902";
const OTHER_KEY = `agent:main:telegram:group:${OTHER_GROUP}`;

let h: Harness | undefined;
afterEach(async () => {
  await h?.stop();
  h = undefined;
});

interface World {
  h: Harness;
  ownChild: string;
  othersChild: string;
  tool(name: string, args?: Record<string, unknown>): Promise<any>;
}

async function boot(sandbox: { mode: "off" | "non-main" | "all"; sessionToolsVisibility?: "spawned" | "all" }): Promise<World> {
  const telegram = new RecordingAdapter("telegram");
  h = await startHarness({
    store: "memory",
    adapters: [telegram],
    config: { agents: { defaults: { sandbox } } },
    responder: toolDriver((_req, step) => (step === "subagent-announce" ? { content: "ANNOUNCE_SKIP" } : step === "a2a-reply" ? { content: "REPLY_SKIP" } : step === "a2a-announce" ? { content: "ANNOUNCE_SKIP" } : undefined)),
  });
  await h.app.router.accept(inbound({ chatType: "direct", peerId: "1001", to: "1001", text: "hi main" }));
  await h.app.router.idle();
  const own = await callViaTelegram(h, { peerId: SANDBOXED }, "sessions_spawn", { task: "mine", label: "my-child" });
  const other = await callViaTelegram(h, { peerId: OTHER_GROUP }, "sessions_spawn", { task: "theirs", label: "their-child" });
  await settle(h);
  const world = h;
  return {
    h,
    ownChild: own.result.childSessionKey,
    othersChild: other.result.childSessionKey,
    tool: async (name, args = {}) => (await callViaTelegram(world, { peerId: SANDBOXED }, name, args)).result,
  };
}

const forbidden = (input: string) => ({ status: "forbidden", error: `Session not visible from this sandboxed agent session: ${input}` });

describe("R42 sandboxed session, sessionToolsVisibility spawned (default)", () => {
  it("R9 R42 sessions_list shows only the sessions it spawned", async () => {
    const w = await boot({ mode: "non-main" });
    const list = await w.tool("sessions_list");
    expect(list.sessions.map((r: any) => r.key)).toEqual([w.ownChild]);
    expect(list.sessions[0]).toMatchObject({ kind: "other", spawnedBy: `agent:main:telegram:group:${SANDBOXED}` });
  });

  it("R42 sessions_history works for its own child by key and by sessionId", async () => {
    const w = await boot({ mode: "non-main" });
    expect(await w.tool("sessions_history", { sessionKey: w.ownChild })).toMatchObject({ sessionKey: w.ownChild });
    const id = w.h.app.sessions.require(w.ownChild).sessionId;
    expect(await w.tool("sessions_history", { sessionKey: id })).toMatchObject({ sessionKey: w.ownChild });
    expect(await w.tool("sessions_history", { sessionKey: w.ownChild.toUpperCase() })).toMatchObject({ sessionKey: w.ownChild });
  });

  it("R42 everything else is forbidden — by key, sessionId, label, spelling or prefix — without revealing whether it exists", async () => {
    const w = await boot({ mode: "non-main" });
    const othersId = w.h.app.sessions.require(w.othersChild).sessionId;
    const ownId = w.h.app.sessions.require(w.ownChild).sessionId;
    const attempts = [
      "main",
      "agent:main:main",
      "AGENT:MAIN:MAIN",
      " agent:main:main ",
      OTHER_KEY,
      OTHER_KEY.toUpperCase(),
      w.othersChild,
      othersId,
      ownId.slice(0, 8),
      "agent:main:subagent:",
      w.ownChild.slice(0, -4),
      `${w.ownChild}:x`,
      `agent:main:telegram:group:${SANDBOXED}`,
      "0b6f1f53-7c1e-4a6a-9a43-3d2f1b0c9e11",
      "global",
      "unknown",
    ];
    for (const input of attempts) {
      expect(await w.tool("sessions_history", { sessionKey: input }), input).toEqual(forbidden(input.trim()));
    }
    expect(await w.tool("sessions_send", { sessionKey: "main", message: "let me in" })).toEqual(forbidden("main"));
    expect(await w.tool("sessions_send", { sessionKey: othersId, message: "let me in" })).toEqual(forbidden(othersId));
    expect(await w.tool("sessions_send", { label: "their-child", message: "let me in" })).toEqual(forbidden("their-child"));
    expect(w.h.model.requests.filter((r) => stepOf(r) === "a2a-message")).toHaveLength(0);
  });

  it("R42 a gateway agent call cannot hand a sandboxed session another session: spawnedBy is refused on a key sessions_spawn never mints", async () => {
    const w = await boot({ mode: "non-main" });
    const client = await w.h.client();
    await expect(
      client.request("agent", { sessionKey: OTHER_KEY, spawnedBy: `agent:main:telegram:group:${SANDBOXED}`, message: "hi", idempotencyKey: "spawned-by-other" }),
    ).rejects.toMatchObject({ code: "INVALID_REQUEST", message: expect.stringMatching(/^spawnedBy is only for sub-agent sessions/) });
    await settle(w.h);
    expect(w.h.app.sessions.require(OTHER_KEY).spawnedBy).toBeUndefined();
    expect((await w.tool("sessions_list")).sessions.map((r: any) => r.key)).toEqual([w.ownChild]);
    expect(await w.tool("sessions_history", { sessionKey: OTHER_KEY })).toEqual(forbidden(OTHER_KEY));
  });

  it("R42 sessions_send reaches its own child, by key or label", async () => {
    const w = await boot({ mode: "non-main" });
    expect(await w.tool("sessions_send", { sessionKey: w.ownChild, message: "status?", timeoutSeconds: 5 })).toMatchObject({ status: "ok", reply: "echo: status?", sessionKey: w.ownChild });
    expect(await w.tool("sessions_send", { label: "my-child", message: "again?", timeoutSeconds: 5 })).toMatchObject({ status: "ok", sessionKey: w.ownChild });
    await settle(w.h);
  });

  it("R9 the main session is not sandboxed under mode non-main and sees everything", async () => {
    const w = await boot({ mode: "non-main" });
    const { result } = await callViaTelegram(w.h, { peerId: "1001", chatType: "direct" }, "sessions_list");
    expect(result.sessions.map((r: any) => r.key)).toEqual(expect.arrayContaining([OTHER_KEY, w.ownChild, w.othersChild, `agent:main:telegram:group:${SANDBOXED}`]));
  });

  it("R9 mode all sandboxes the main session too", async () => {
    const w = await boot({ mode: "all" });
    const { result } = await callViaTelegram(w.h, { peerId: "1001", chatType: "direct" }, "sessions_list");
    expect(result.sessions).toEqual([]);
  });
});

describe("R42 sessionToolsVisibility all", () => {
  it("R42 lifts the restriction for sandboxed sessions", async () => {
    const w = await boot({ mode: "non-main", sessionToolsVisibility: "all" });
    const list = await w.tool("sessions_list");
    expect(list.sessions.map((r: any) => r.key)).toEqual(expect.arrayContaining(["agent:main:main", OTHER_KEY, w.ownChild, w.othersChild]));
    expect(await w.tool("sessions_history", { sessionKey: "main" })).toMatchObject({ sessionKey: "agent:main:main" });
  });

  it("mode off: nothing is sandboxed", async () => {
    const w = await boot({ mode: "off" });
    expect(await w.tool("sessions_history", { sessionKey: OTHER_KEY })).toMatchObject({ sessionKey: OTHER_KEY });
  });
});
