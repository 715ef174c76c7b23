/**
 * agents_list (R32): the agent ids sessions_spawn accepts from this requester — itself, plus
 * agents.list[requester].subagents.allowAgents (["*"] = every configured agent).
 */
import type { Config } from "../config/schema.js";
import { normalizeAgentId } from "../sessions/keys.js";
import type { AgentTool } from "./types.js";
import { AgentsListParams, toolParameters } from "./schemas.js";

export interface AgentsListResult {
  requester: string;
  allowAny: boolean;
  agents: Array<{ id: string; name?: string; configured: boolean }>;
}

/** The requester's spawn allowlist, normalised; "*" kept as is. */
export function spawnAllowlist(config: Config, requesterAgentId: string): string[] {
  const agent = config.agents.list.find((a) => normalizeAgentId(a.id) === requesterAgentId);
  return (agent?.subagents.allowAgents ?? []).map((id) => (id.trim() === "*" ? "*" : normalizeAgentId(id)));
}

/** Requester first, then the others sorted. Pure. */
export function allowedSpawnTargets(config: Config, requesterAgentId: string): AgentsListResult {
  const allow = spawnAllowlist(config, requesterAgentId);
  const allowAny = allow.includes("*");
  const configured = new Map(config.agents.list.map((a) => [normalizeAgentId(a.id), a]));
  const others = new Set(allowAny ? configured.keys() : allow);
  others.delete(requesterAgentId);
  others.delete("*");
  const ids = [requesterAgentId, ...[...others].sort((a, b) => a.localeCompare(b))];
  return {
    requester: requesterAgentId,
    allowAny,
    agents: ids.map((id) => {
      const name = configured.get(id)?.name;
      return { id, ...(name ? { name } : {}), configured: configured.has(id) };
    }),
  };
}

export function createAgentsListTool(config: Config): AgentTool {
  return {
    name: "agents_list",
    description: "List the agent ids you may use as sessions_spawn agentId (your own first).",
    parameters: toolParameters(AgentsListParams),
    async execute(_args, ctx): Promise<AgentsListResult> {
      return allowedSpawnTargets(config, ctx.agentId);
    },
  };
}
