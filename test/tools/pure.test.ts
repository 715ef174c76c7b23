/**
 * The pure parts of the session tools, table by table: visibility decisions, the history caps,
 * the skip tokens, the parameter schemas and their error messages.
 */
import { describe, expect, it } from "vitest";
import type { z } from "zod";
import { ConfigSchema } from "../../src/config/schema.js";
import type { TranscriptMessage } from "../../src/sessions/transcript.js";
import { isSkip, REPLY_SKIP, ANNOUNCE_SKIP, announceStepPrompt, messageContextPrompt, replyStepPrompt } from "../../src/tools/a2a-prompts.js";
import { capHistory, OMITTED_TEXT, truncateText } from "../../src/tools/sessions-history.js";
import { AgentsListParams, parseArgs, SessionsHistoryParams, SessionsListParams, SessionsSendParams, SessionsSpawnParams, toolParameters } from "../../src/tools/schemas.js";
import { agentToAgentDecision, isSandboxedSession, matchesIdPattern, sessionViewOf, visibilityOf, type SessionView } from "../../src/tools/visibility.js";

describe("R9 R42 sandbox: which sessions are sandboxed", () => {
  const cases: Array<[mode: "off" | "non-main" | "all", key: string, sandboxed: boolean]> = [
    ["off", "agent:main:telegram:group:1", false],
    ["off", "agent:main:main", false],
    ["non-main", "agent:main:main", false],
    ["non-main", "agent:main:main:thread:7", false],
    ["non-main", "global", false],
    ["non-main", "agent:main:telegram:group:1", true],
    ["non-main", "agent:main:subagent:abc", true],
    ["non-main", "cron:daily", true],
    ["non-main", "agent:main:direct:alice", true],
    ["all", "agent:main:main", true],
    ["all", "hook:x", true],
  ];
  it.each(cases)("R42 mode %s, %s → sandboxed %s", (mode, key, expected) => {
    expect(isSandboxedSession(mode, key)).toBe(expected);
  });

  it("R42 sessionToolsVisibility spawned restricts a sandboxed requester; all lifts it", () => {
    const cfg = (sessionToolsVisibility: "spawned" | "all") => ConfigSchema.parse({ agents: { defaults: { sandbox: { mode: "non-main", sessionToolsVisibility } } } });
    expect(sessionViewOf(cfg("spawned"), "agent:main:telegram:group:1", "main")).toMatchObject({ sandboxed: true, restricted: true });
    expect(sessionViewOf(cfg("all"), "agent:main:telegram:group:1", "main")).toMatchObject({ sandboxed: true, restricted: false });
    expect(sessionViewOf(cfg("spawned"), "agent:main:main", "main")).toMatchObject({ sandboxed: false, restricted: false });
  });
});

describe("R42 visibility decision", () => {
  const view = (over: Partial<SessionView> = {}): SessionView => ({
    requesterKey: "agent:main:telegram:group:1",
    requesterAgentId: "main",
    sandboxed: true,
    restricted: true,
    agentToAgent: { enabled: false, allow: [] },
    ...over,
  });
  const cases: Array<[string, SessionView, { key: string; agentId: string; spawnedBy?: string }, ReturnType<typeof visibilityOf>]> = [
    ["own child", view(), { key: "agent:main:subagent:a", agentId: "main", spawnedBy: "agent:main:telegram:group:1" }, { visible: true }],
    ["another session's child", view(), { key: "agent:main:subagent:b", agentId: "main", spawnedBy: "agent:main:telegram:group:2" }, { visible: false, reason: "sandbox" }],
    ["a prefix of its own key as spawnedBy", view(), { key: "agent:main:subagent:c", agentId: "main", spawnedBy: "agent:main:telegram:group:" }, { visible: false, reason: "sandbox" }],
    ["main session", view(), { key: "agent:main:main", agentId: "main" }, { visible: false, reason: "sandbox" }],
    ["itself", view(), { key: "agent:main:telegram:group:1", agentId: "main" }, { visible: false, reason: "sandbox" }],
    // A child spawned under another agent (allowAgents) is still a cross-agent session.
    ["own child under another agent, a2a off", view(), { key: "agent:beta:subagent:d", agentId: "beta", spawnedBy: "agent:main:telegram:group:1" }, { visible: false, reason: "a2a-disabled" }],
    ["unrestricted, same agent", view({ restricted: false }), { key: "agent:main:main", agentId: "main" }, { visible: true }],
    ["unrestricted, other agent, a2a off", view({ restricted: false }), { key: "agent:beta:main", agentId: "beta" }, { visible: false, reason: "a2a-disabled" }],
    ["unrestricted, other agent, allowed", view({ restricted: false, agentToAgent: { enabled: true, allow: ["main", "beta"] } }), { key: "agent:beta:main", agentId: "beta" }, { visible: true }],
    ["unrestricted, other agent, not in allow", view({ restricted: false, agentToAgent: { enabled: true, allow: ["main"] } }), { key: "agent:beta:main", agentId: "beta" }, { visible: false, reason: "a2a-denied" }],
  ];
  it.each(cases)("R42 %s", (_name, v, session, expected) => {
    expect(visibilityOf(v, session)).toEqual(expected);
  });
});

describe("tools.agentToAgent patterns", () => {
  it.each([
    ["*", "anything", true],
    ["beta", "beta", true],
    ["beta", "Beta", false],
    ["be*", "BETA-2", true],
    ["*-ops", "team-ops", true],
    ["*-ops", "team-dev", false],
    ["*-ops", "team-ops-admin", false],
    ["be*", "alpha-beta", false],
    ["a.b", "axb", false],
  ])("pattern %s vs %s → %s", (pattern, id, expected) => {
    expect(matchesIdPattern(pattern, id)).toBe(expected);
  });

  it.each([
    [{ enabled: false, allow: [] }, "main", "main", { allowed: true }],
    [{ enabled: false, allow: [] }, "main", "beta", { allowed: false, reason: "disabled" }],
    [{ enabled: true, allow: [] }, "main", "beta", { allowed: true }],
    [{ enabled: true, allow: ["main", "beta"] }, "main", "beta", { allowed: true }],
    [{ enabled: true, allow: ["beta"] }, "main", "beta", { allowed: false, reason: "denied" }],
    // Agent ids are case-insensitive (normalised to lower case): so are the names allow lists.
    [{ enabled: true, allow: ["Main", "Ops"] }, "main", "ops", { allowed: true }],
  ] as const)("policy %j, %s → %s", (policy, requester, target, expected) => {
    expect(agentToAgentDecision(policy, requester, target)).toEqual(expected);
  });
});

describe("R11 sessions_history caps (raw format kept)", () => {
  const text = (t: string, at = 1): TranscriptMessage => ({ role: "assistant", content: [{ type: "text", text: t }], timestamp: at });

  it("small histories pass through unchanged", () => {
    const messages: TranscriptMessage[] = [{ role: "user", content: "hi", timestamp: 1, provenance: { kind: "external_user" } }, text("hello", 2)];
    const capped = capHistory(messages);
    expect(capped).toMatchObject({ messages, truncated: false, droppedMessages: false, contentTruncated: false });
    expect(capped.bytes).toBe(Buffer.byteLength(JSON.stringify(messages)));
  });

  it("long texts are cut at 4000 characters with a mark; the byte cap drops the oldest messages", () => {
    const messages = Array.from({ length: 60 }, (_, i) => text(`${i}:${"x".repeat(5000)}`, i));
    const capped = capHistory(messages);
    expect(capped).toMatchObject({ truncated: true, droppedMessages: true, contentTruncated: true });
    expect(capped.bytes).toBeLessThanOrEqual(80 * 1024);
    expect(capped.messages.length).toBeLessThan(60);
    const last = capped.messages.at(-1) as Extract<TranscriptMessage, { role: "assistant" }>;
    expect((last.content[0] as { text: string }).text.startsWith("59:")).toBe(true);
    expect((last.content[0] as { text: string }).text.length).toBeLessThanOrEqual(4000 + 20);
  });

  it("a single message over the byte cap becomes a placeholder", () => {
    const huge: TranscriptMessage = { role: "assistant", content: [{ type: "toolCall", id: "c1", name: "x", arguments: { blob: "y".repeat(3000) } }], timestamp: 5 };
    const capped = capHistory([huge], { maxBytes: 1000, maxChars: 4000 });
    expect(capped.messages).toEqual([{ role: "assistant", content: [{ type: "text", text: OMITTED_TEXT }], timestamp: 5 }]);
    expect(capped).toMatchObject({ truncated: true, droppedMessages: true, contentTruncated: false });
  });

  it.each([
    ["short", 10, "short"],
    ["abcdef", 3, "abc\n…(truncated)…"],
    ["a😀b", 2, "a\n…(truncated)…"],
  ])("truncateText(%j, %i) never splits a surrogate pair", (input, max, expected) => {
    expect(truncateText(input, max)).toBe(expected);
  });
});

describe("R21 R22 skip tokens and step prompts", () => {
  it.each([
    ["REPLY_SKIP", REPLY_SKIP, true],
    ["  REPLY_SKIP \n", REPLY_SKIP, true],
    ["", REPLY_SKIP, true],
    [undefined, REPLY_SKIP, true],
    ["REPLY_SKIP please", REPLY_SKIP, false],
    ["reply_skip", REPLY_SKIP, false],
    ["ANNOUNCE_SKIP", ANNOUNCE_SKIP, true],
    ["Done.", ANNOUNCE_SKIP, false],
    // A dressed bare token is still the token: posted, the chat would read it literally.
    ["REPLY_SKIP.", REPLY_SKIP, true],
    ["`ANNOUNCE_SKIP`", ANNOUNCE_SKIP, true],
    ["**ANNOUNCE_SKIP**", ANNOUNCE_SKIP, true],
    ["\u201cANNOUNCE_SKIP\u201d", ANNOUNCE_SKIP, true],
    ["> ANNOUNCE_SKIP!", ANNOUNCE_SKIP, true],
    ["ANNOUNCE_SKIP. Nothing new.", ANNOUNCE_SKIP, false],
    ["`announce_skip`", ANNOUNCE_SKIP, false],
  ])("isSkip(%j, %s) → %s", (reply, token, expected) => {
    expect(isSkip(reply, token)).toBe(expected);
  });

  it("R19 R21 R22 each step prompt starts with its fixed first line", () => {
    const parties = { requesterKey: "agent:main:main", requesterChannel: "telegram", targetKey: "agent:main:discord:group:x", targetChannel: "discord" };
    expect(messageContextPrompt(parties).split("\n")[0]).toBe("Agent-to-agent message context:");
    const reply = replyStepPrompt({ ...parties, turn: 1, maxTurns: 5, current: "requester" });
    expect(reply.split("\n")[0]).toBe("Agent-to-agent reply step:");
    expect(reply).toContain('reply exactly "REPLY_SKIP"');
    const announce = announceStepPrompt({ ...parties, request: "ping", roundOneReply: "pong", latestReply: "pong-3" });
    expect(announce.split("\n")[0]).toBe("Agent-to-agent announce step:");
    expect(announce).toContain("Original request: ping");
    expect(announce).toContain("Round 1 reply: pong");
    expect(announce).toContain("Latest reply: pong-3");
    expect(announce).toContain('reply exactly "ANNOUNCE_SKIP"');
  });

  it("R19 R22 the prompts say who the sender is and when the exchange ends; a reply that never came is named as missing, not left blank", () => {
    const parties = { requesterKey: "agent:main:main", requesterChannel: "telegram", targetKey: "agent:main:discord:group:x", targetChannel: "discord" };
    expect(messageContextPrompt(parties)).toContain("sent by another agent session (sessions_send), not by a user of this chat");
    const announce = announceStepPrompt({ ...parties, request: "ping", roundOneReply: "", latestReply: "" });
    expect(announce).toContain("Round 1 reply: (not available).\nLatest reply: (not available).");
    expect(announce.split("\n").at(-1)).toBe("After this reply, the agent-to-agent conversation is over.");
  });
});

describe("tool parameter schemas", () => {
  const schemas = { SessionsListParams, SessionsHistoryParams, SessionsSendParams, SessionsSpawnParams, AgentsListParams };
  it.each(Object.entries(schemas))("%s: an object, numbers as number (never integer), no top-level anyOf/oneOf", (_name, schema) => {
    const json = toolParameters(schema);
    expect(json.type).toBe("object");
    expect(json).not.toHaveProperty("anyOf");
    expect(json).not.toHaveProperty("oneOf");
    expect(json).not.toHaveProperty("$schema");
    expect(JSON.stringify(json)).not.toContain('"integer"');
  });

  it.each([
    [SessionsHistoryParams, {}, "sessionKey required"],
    [SessionsHistoryParams, { sessionKey: "   " }, "sessionKey required"],
    [SessionsHistoryParams, { sessionKey: 5 }, "sessionKey must be a string"],
    [SessionsHistoryParams, { sessionKey: "main", limit: 0 }, "limit must be at least 1"],
    [SessionsSendParams, { sessionKey: "main" }, "message required"],
    [SessionsSendParams, { sessionKey: "main", message: "x", timeoutSeconds: -1 }, "timeoutSeconds must be 0 or more"],
    // Unbounded, a wait past setTimeout's 2^31 ms limit would fire at once and report a timeout.
    [SessionsSendParams, { sessionKey: "main", message: "x", timeoutSeconds: 3601 }, "timeoutSeconds: at most 3600"],
    [SessionsSpawnParams, {}, "task required"],
    [SessionsSpawnParams, { task: "x", cleanup: "later" }, 'cleanup: use "delete" or "keep"'],
    [SessionsListParams, { kinds: ["cron", "bogus"] }, "kinds: use any of main, group, cron, hook, node, other"],
    [SessionsListParams, { limit: "10" }, "limit must be a number"],
  ] as const)("invalid arguments give a clear message: %#", (schema, args, message) => {
    expect(parseArgs(schema as z.ZodType<unknown>, args)).toEqual({ ok: false, error: message });
  });

  it("null arguments (a model sending JSON null) count as no arguments", () => {
    expect(parseArgs(SessionsListParams, null)).toEqual({ ok: true, value: {} });
    expect(parseArgs(SessionsHistoryParams, null)).toEqual({ ok: false, error: "sessionKey required" });
  });

  it("kinds are trimmed and lowercased", () => {
    expect(parseArgs(SessionsListParams, { kinds: [" Cron ", "GROUP"] })).toEqual({ ok: true, value: { kinds: ["cron", "group"] } });
  });
});
