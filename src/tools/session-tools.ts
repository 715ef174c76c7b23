/**
 * The session tools of one run's scope: what the requester may see is decided once per run from
 * its session key (sandboxed or not, R9/R42), and sub-agent sessions lose the session tools
 * across every tool source (R34) through the app's tool filter.
 */
import type pino from "pino";
import type { App } from "../app.js";
import type { SubagentRegistry } from "../agents/subagents/registry.js";
import { subagentToolAllowed } from "../agents/subagents/tool-policy.js";
import { isSubagentKey } from "../sessions/keys.js";
import { createAgentsListTool } from "./agents-list.js";
import type { BackgroundTasks } from "./background.js";
import type { SendWaits } from "./send-waits.js";
import { createSessionsHistoryTool } from "./sessions-history.js";
import { createSessionsListTool } from "./sessions-list.js";
import { createSessionsSendTool } from "./sessions-send.js";
import { createSessionsSpawnTool } from "./sessions-spawn.js";
import type { AgentTool, ToolFilter, ToolScope } from "./types.js";
import { sessionViewOf } from "./visibility.js";

export interface SessionToolsDeps {
  app: App;
  subagents: SubagentRegistry;
  background: BackgroundTasks;
  waits: SendWaits;
  log: pino.Logger;
}

export function sessionTools(deps: SessionToolsDeps, scope: ToolScope): AgentTool[] {
  const view = sessionViewOf(deps.app.config, scope.sessionKey, scope.agentId);
  return [
    createSessionsListTool(deps.app, view),
    createSessionsHistoryTool(deps.app, view),
    createSessionsSendTool(deps, view),
    createSessionsSpawnTool(deps.app, deps.subagents),
    createAgentsListTool(deps.app.config),
  ];
}

/** R34: sub-agent sessions get every tool except the session tools (tools.subagents.tools adjusts). */
export function subagentToolFilter(app: App): ToolFilter {
  return (scope, tool) => !isSubagentKey(scope.sessionKey) || subagentToolAllowed(tool.name, app.config.tools.subagents.tools);
}
