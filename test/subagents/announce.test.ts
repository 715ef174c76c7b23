/**
 * The pure parts of sub-agents, table by table: announce normalisation (R39), the stats line
 * (R41), the sub-agent tool policy (R34, R35) and the spawn allowlist (R31, R32).
 */
import { describe, expect, it } from "vitest";
import { estimateCost, formatCost, formatDuration, formatStatsLine, formatTokenCount, normalizeAnnounce, parseSections, type AnnounceInput } from "../../src/agents/subagents/announce.js";
import { subagentContextPrompt, subagentAnnouncePrompt } from "../../src/agents/subagents/prompts.js";
import { subagentToolAllowed } from "../../src/agents/subagents/tool-policy.js";
import { ConfigSchema } from "../../src/config/schema.js";
import { allowedSpawnTargets } from "../../src/tools/agents-list.js";

describe("R39 announce normalisation: Status from the outcome, then Result and Notes", () => {
  const cases: Array<[string, AnnounceInput, string]> = [
    ["free text becomes the result", { reply: "Found 3 bugs.", status: "ok" }, "Status: ok\nResult: Found 3 bugs.\nNotes: none"],
    ["the model's Status is replaced by the outcome", { reply: "Status: ok\nResult: all good\nNotes: none", status: "error", error: "HTTP 500" }, "Status: error\nResult: all good\nNotes: HTTP 500"],
    ["sections in markdown, multi-line result", { reply: "**Status:** done\n**Result:** line 1\nline 2\n**Notes:** check CI", status: "ok" }, "Status: ok\nResult: line 1\nline 2\nNotes: check CI"],
    ["Note: is accepted for Notes", { reply: "Result: x\nNote: y", status: "ok" }, "Status: ok\nResult: x\nNotes: y"],
    ["an error joins the model's notes", { reply: "Result: partial\nNotes: retry later", status: "timeout", error: "run timed out after 1 s" }, "Status: timeout\nResult: partial\nNotes: run timed out after 1 s; retry later"],
    ["empty reply falls back to the child's final reply", { reply: "", status: "ok", fallbackResult: "42" }, "Status: ok\nResult: 42\nNotes: none"],
    ["nothing at all", { reply: "  ", status: "error", error: "interrupted by restart" }, "Status: error\nResult: (no output)\nNotes: interrupted by restart"],
    ["sections without a result use the fallback", { reply: "Notes: only notes", status: "ok", fallbackResult: "the answer" }, "Status: ok\nResult: the answer\nNotes: only notes"],
    ["an error the notes already name is not repeated", { reply: "Result: partial\nNotes: gave up after HTTP 500", status: "error", error: "HTTP 500" }, "Status: error\nResult: partial\nNotes: gave up after HTTP 500"],
    ["headers in lower case are sections too", { reply: "result: x\nnotes: y", status: "ok" }, "Status: ok\nResult: x\nNotes: y"],
    ["an ok outcome carries no error note", { reply: "Result: done", status: "ok", error: "stale error" }, "Status: ok\nResult: done\nNotes: none"],
  ];
  it.each(cases)("R39 %s", (_name, input, expected) => {
    expect(normalizeAnnounce(input)).toBe(expected);
  });

  it("parseSections tells free text from sections", () => {
    expect(parseSections("just text")).toBeUndefined();
    expect(parseSections("Result: a\nNotes: b")).toEqual({ result: "a", notes: "b" });
  });
});

describe("R41 stats line", () => {
  it.each([
    [0, "0ms"],
    [850, "850ms"],
    [45_000, "45s"],
    [59_600, "1m0s"],
    [60_000, "1m0s"],
    [151_000, "2m31s"],
    [3_600_000, "1h0m"],
    [3_900_000, "1h5m"],
    [86_399_000, "23h59m"],
    [86_400_000, "1d0h"],
    [183_600_000, "2d3h"],
  ])("formatDuration(%i) = %s", (ms, text) => expect(formatDuration(ms)).toBe(text));

  it.each([
    [0, "0"],
    [999, "999"],
    [1000, "1k"],
    [1234, "1.2k"],
    [3_400_000, "3.4m"],
  ])("formatTokenCount(%i) = %s", (n, text) => expect(formatTokenCount(n)).toBe(text));

  it.each([
    [1_000_000, 0, { input: 3, output: 15 }, "3.00"],
    [100, 50, { input: 1, output: 2 }, "0.0002"],
    [10_000, 0, { input: 1, output: 2 }, "0.01"],
    [0, 0, { input: 1, output: 2 }, "0.0000"],
  ])("cost of %i in / %i out at %j = $%s", (input, output, cost, text) => {
    expect(formatCost(estimateCost(input, output, cost))).toBe(text);
  });

  it("R41 runtime, tokens in/out/total, est cost, sessionKey, sessionId and transcript path", () => {
    const line = formatStatsLine({ runtimeMs: 151_000, inputTokens: 1000, outputTokens: 234, cost: { input: 1, output: 2 }, sessionKey: "agent:main:subagent:x", sessionId: "s-1", transcriptPath: "/data/agents/main/sessions/s-1.jsonl" });
    expect(line).toBe("Stats: runtime 2m31s • tokens 1.2k (in 1k / out 234) • est $0.0015 • sessionKey agent:main:subagent:x • sessionId s-1 • transcript /data/agents/main/sessions/s-1.jsonl");
  });

  it("R41 without prices or usage the line says so and has no cost", () => {
    expect(formatStatsLine({ sessionKey: "k", sessionId: "i", transcriptPath: "p" })).toBe("Stats: runtime n/a • tokens n/a • sessionKey k • sessionId i • transcript p");
    // Prices alone are no estimate: without token counts there is nothing to price.
    expect(formatStatsLine({ cost: { input: 1, output: 2 }, sessionKey: "k", sessionId: "i", transcriptPath: "p" })).toBe("Stats: runtime n/a • tokens n/a • sessionKey k • sessionId i • transcript p");
  });
});

describe("R34 R35 sub-agent tool policy", () => {
  const cases: Array<[string, { allow: string[]; deny: string[] }, boolean]> = [
    ["exec_tool", { allow: [], deny: [] }, true],
    ["sessions_list", { allow: [], deny: [] }, false],
    ["sessions_history", { allow: [], deny: [] }, false],
    ["sessions_send", { allow: [], deny: [] }, false],
    ["sessions_spawn", { allow: [], deny: [] }, false],
    ["agents_list", { allow: [], deny: [] }, false],
    ["exec_tool", { allow: [], deny: ["exec_tool"] }, false],
    ["exec_tool", { allow: ["other_tool"], deny: [] }, false],
    ["sessions_history", { allow: ["sessions_history"], deny: [] }, true],
    ["sessions_history", { allow: ["sessions_*"], deny: ["sessions_history"] }, false],
    ["sessions_list", { allow: ["sessions_*"], deny: [] }, true],
    ["exec_tool", { allow: ["*"], deny: [] }, true],
    ["exec_tool", { allow: [], deny: ["exec_*"] }, false],
    ["sessions_spawn", { allow: ["*"], deny: [] }, false],
    ["sessions_spawn", { allow: ["sessions_spawn"], deny: [] }, false],
  ];
  it.each(cases)("R34 %s with %j → %s", (name, cfg, expected) => {
    expect(subagentToolAllowed(name, cfg)).toBe(expected);
  });
});

describe("R31 R32 spawn allowlist", () => {
  const config = ConfigSchema.parse({
    agents: {
      list: [
        { id: "main", default: true, name: "Main", subagents: { allowAgents: ["research", " Zeta "] } },
        { id: "research", name: "Research" },
        { id: "coder" },
        { id: "boss", subagents: { allowAgents: ["*"] } },
      ],
    },
  });
  it("R32 default only the requester", () => {
    expect(allowedSpawnTargets(config, "coder")).toEqual({ requester: "coder", allowAny: false, agents: [{ id: "coder", configured: true }] });
  });
  it("R32 allowlisted ids are normalised; one not in agents.list is configured:false", () => {
    expect(allowedSpawnTargets(config, "main")).toEqual({
      requester: "main",
      allowAny: false,
      agents: [
        { id: "main", name: "Main", configured: true },
        { id: "research", name: "Research", configured: true },
        { id: "zeta", configured: false },
      ],
    });
  });
  it('R31 R32 ["*"] allows every configured agent, requester first then sorted', () => {
    const result = allowedSpawnTargets(config, "boss");
    expect(result.allowAny).toBe(true);
    expect(result.agents.map((a) => a.id)).toEqual(["boss", "coder", "main", "research"]);
  });
});

describe("sub-agent prompts", () => {
  it("R33 R38 first lines are fixed; the announce prompt names ANNOUNCE_SKIP", () => {
    const base = { task: "count  the\nfiles", label: "count", requesterKey: "agent:main:main", requesterChannel: "telegram", childKey: "agent:main:subagent:x" };
    const context = subagentContextPrompt(base);
    expect(context.split("\n")[0]).toBe("Subagent context:");
    expect(context).toContain("Task: count the files");
    expect(context).toContain("Label: count.");
    const announce = subagentAnnouncePrompt({ ...base, status: "timeout", error: "run timed out after 1 s", finalReply: " 41 so far \n" });
    expect(announce.split("\n")[0]).toBe("Subagent announce step:");
    expect(announce).toContain('reply exactly "ANNOUNCE_SKIP"');
    expect(announce).toContain("timed out (run timed out after 1 s)");
    expect(announce).toContain("Your final reply: 41 so far\n");
    expect(subagentAnnouncePrompt({ ...base, status: "error", error: "HTTP 500" })).toContain("Your task run has ended: failed (HTTP 500).");
    expect(subagentAnnouncePrompt({ ...base, status: "ok" })).toContain("Your task run has ended: completed.");
  });
});
