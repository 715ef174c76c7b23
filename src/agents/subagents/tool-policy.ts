/**
 * Which tools a sub-agent session gets (R34, R35): the full set minus the session tools by
 * default; `tools.subagents.tools.allow` (when non-empty) is an allowlist that can also re-admit
 * a session tool, `deny` removes more and always wins. sessions_spawn is never available —
 * sub-agents do not spawn sub-agents, whatever the config says. Pure.
 */
import { matchesIdPattern } from "../../tools/visibility.js";

export const SESSION_TOOL_NAMES = ["sessions_list", "sessions_history", "sessions_send", "sessions_spawn", "agents_list"] as const;

export interface SubagentToolConfig {
  allow: readonly string[];
  deny: readonly string[];
}

export function subagentToolAllowed(name: string, cfg: SubagentToolConfig): boolean {
  if (name === "sessions_spawn") return false;
  const matches = (patterns: readonly string[]) => patterns.some((p) => matchesIdPattern(p, name));
  if (matches(cfg.deny)) return false;
  if (cfg.allow.length) return matches(cfg.allow);
  return !(SESSION_TOOL_NAMES as readonly string[]).includes(name);
}
