/**
 * Who may see which session through the session tools (R9, R42, tools.agentToAgent). Pure.
 *
 * Two independent gates:
 * - the sandbox: a sandboxed requester with `sessionToolsVisibility: "spawned"` sees only the
 *   sessions it spawned (entry.spawnedBy === its own key) — an exact comparison of canonical keys,
 *   so no spelling, prefix or sessionId of another session gets through;
 * - agent-to-agent: a session of another agent is visible only when tools.agentToAgent is enabled
 *   and both agent ids match its allow patterns (an empty list matches every agent).
 */
import type { Config } from "../config/schema.js";
import { classifySessionKind } from "../sessions/keys.js";

export type SandboxMode = Config["agents"]["defaults"]["sandbox"]["mode"];

/** off: none; non-main: every session whose kind is not main; all: every session. */
export function isSandboxedSession(mode: SandboxMode, sessionKey: string): boolean {
  if (mode === "all") return true;
  if (mode === "non-main") return classifySessionKind(sessionKey) !== "main";
  return false;
}

/** What a requester session is allowed to see. */
export interface SessionView {
  requesterKey: string;
  requesterAgentId: string;
  sandboxed: boolean;
  /** Sandboxed with visibility "spawned": limited to the sessions it spawned. */
  restricted: boolean;
  agentToAgent: { enabled: boolean; allow: readonly string[] };
}

export function sessionViewOf(config: Config, requesterKey: string, requesterAgentId: string): SessionView {
  const sandbox = config.agents.defaults.sandbox;
  const sandboxed = isSandboxedSession(sandbox.mode, requesterKey);
  return { requesterKey, requesterAgentId, sandboxed, restricted: sandboxed && sandbox.sessionToolsVisibility === "spawned", agentToAgent: config.tools.agentToAgent };
}

/**
 * `*` matches any id; a pattern without `*` matches exactly (case-sensitive); a pattern with `*`
 * is a case-insensitive glob (reference §3.0).
 */
export function matchesIdPattern(pattern: string, id: string): boolean {
  const p = pattern.trim();
  if (p === "*") return true;
  if (!p.includes("*")) return p === id;
  const source = p.split("*").map((part) => part.replace(/[.+?^${}()|[\]\\]/g, "\\$&")).join(".*");
  return new RegExp(`^${source}$`, "i").test(id);
}

export type AgentToAgentDecision = { allowed: true } | { allowed: false; reason: "disabled" | "denied" };

export function agentToAgentDecision(policy: SessionView["agentToAgent"], requesterAgentId: string, targetAgentId: string): AgentToAgentDecision {
  if (requesterAgentId === targetAgentId) return { allowed: true };
  if (!policy.enabled) return { allowed: false, reason: "disabled" };
  // Agent ids are lowercased wherever they are read (sessions/keys.ts normalizeAgentId), so a
  // pattern is too: `allow: ["Ops"]` names the agent `Ops` of agents.list, which is `ops`.
  const matches = (id: string) => policy.allow.length === 0 || policy.allow.some((p) => matchesIdPattern(p.toLowerCase(), id));
  return matches(requesterAgentId) && matches(targetAgentId) ? { allowed: true } : { allowed: false, reason: "denied" };
}

export type Visibility = { visible: true } | { visible: false; reason: "sandbox" | "a2a-disabled" | "a2a-denied" };

/** Can the requester see this session? */
export function visibilityOf(view: SessionView, session: { key: string; agentId: string; spawnedBy?: string }): Visibility {
  if (view.restricted && session.spawnedBy !== view.requesterKey) return { visible: false, reason: "sandbox" };
  const a2a = agentToAgentDecision(view.agentToAgent, view.requesterAgentId, session.agentId);
  if (!a2a.allowed) return { visible: false, reason: a2a.reason === "disabled" ? "a2a-disabled" : "a2a-denied" };
  return { visible: true };
}

export function sandboxForbidden(input: string): string {
  return `Session not visible from this sandboxed agent session: ${input}`;
}

/** The error a tool returns for a session hidden by the agent-to-agent policy. */
export function agentToAgentForbidden(reason: "a2a-disabled" | "a2a-denied", action: "history" | "messaging"): string {
  const what = action === "history" ? "history" : "messaging";
  return reason === "a2a-disabled"
    ? `Agent-to-agent ${what} is disabled. Set tools.agentToAgent.enabled=true to allow cross-agent ${action === "history" ? "access" : "sends"}.`
    : `Agent-to-agent ${what} denied by tools.agentToAgent.allow.`;
}
