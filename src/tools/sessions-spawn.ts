/**
 * sessions_spawn (R31–R36): start a sub-agent run in a fresh `agent:<id>:subagent:<uuid>`
 * session and return at once. The run delivers nothing itself (deliver false); when it ends,
 * the sub-agent registry runs the announce step and posts the result to the chat the requester
 * was in at spawn time.
 */
import { randomUUID } from "node:crypto";
import type { App } from "../app.js";
import type { SubagentRegistry } from "../agents/subagents/registry.js";
import { subagentContextPrompt } from "../agents/subagents/prompts.js";
import { deriveRowChannel, displayKey, isSubagentKey, normalizeAgentId, subagentSessionKey } from "../sessions/keys.js";
import { spawnAllowlist } from "./agents-list.js";
import { deliveryContextOf } from "./delivery-route.js";
import { defineTool, SessionsSpawnParams } from "./schemas.js";
import type { AgentTool } from "./types.js";

export type SessionsSpawnResult =
  | { status: "accepted"; runId: string; childSessionKey: string; model?: string }
  | { status: "forbidden"; error: string }
  | { status: "error"; error: string; childSessionKey?: string };

export function createSessionsSpawnTool(app: App, subagents: SubagentRegistry): AgentTool {
  return defineTool({
    name: "sessions_spawn",
    description:
      "Spawn a sub-agent that works on a task in its own session, in the background. Returns at once; when it finishes, its result is posted to this chat (Status / Result / Notes).",
    params: SessionsSpawnParams,
    invalid: (error): SessionsSpawnResult => ({ status: "error", error }),
    async run(p, ctx): Promise<SessionsSpawnResult> {
      // R35: a hard check, independent of the tool filter, so no config can enable nesting.
      if (isSubagentKey(ctx.sessionKey)) return { status: "forbidden", error: "sessions_spawn is not allowed from sub-agent sessions" };

      const requesterAgentId = ctx.agentId;
      const targetAgentId = p.agentId ? normalizeAgentId(p.agentId) : requesterAgentId;
      if (targetAgentId !== requesterAgentId) {
        const allow = spawnAllowlist(app.config, requesterAgentId);
        if (!allow.includes("*") && !allow.includes(targetAgentId)) {
          return { status: "forbidden", error: `agentId is not allowed for sessions_spawn (allowed: ${allow.length ? allow.join(", ") : "none"})` };
        }
      }

      const targetAgent = app.config.agents.list.find((a) => normalizeAgentId(a.id) === targetAgentId);
      const modelRef = p.model ?? targetAgent?.subagents.model ?? app.config.agents.defaults.subagents.model;
      let model: string | undefined;
      if (modelRef) {
        try {
          model = app.models.resolve(modelRef).ref;
        } catch (err) {
          return { status: "error", error: (err as Error).message };
        }
      }

      const requester = app.sessions.get(ctx.sessionKey);
      const requesterOrigin = ctx.origin ?? deliveryContextOf(requester);
      const requesterChannel = requesterOrigin?.channel ?? (requester ? deriveRowChannel(ctx.sessionKey, requester) : "unknown");
      const childSessionKey = subagentSessionKey(targetAgentId, randomUUID());
      const runId = randomUUID();
      const labelFree = p.label !== undefined && app.sessions.list({ label: p.label, limit: 1, includeArchived: true }).length === 0;
      await app.sessions.upsert(childSessionKey, targetAgentId, {
        spawnedBy: ctx.sessionKey,
        ...(p.label ? (labelFree ? { label: p.label } : { displayName: p.label }) : {}),
        ...(model ? { model } : {}),
      });
      await subagents.register({
        runId,
        childSessionKey,
        childAgentId: targetAgentId,
        requesterSessionKey: ctx.sessionKey,
        requesterChannel,
        ...(requesterOrigin ? { requesterOrigin } : {}),
        task: p.task,
        ...(p.label ? { label: p.label } : {}),
        ...(model ? { model } : {}),
        cleanup: p.cleanup ?? "keep",
        createdAt: Date.now(),
      });
      try {
        app.runtime.start({
          sessionKey: childSessionKey,
          agentId: targetAgentId,
          message: p.task,
          runId,
          lane: "subagent",
          extraSystemPrompt: subagentContextPrompt({ task: p.task, label: p.label, requesterKey: displayKey(ctx.sessionKey), requesterChannel, childKey: childSessionKey }),
          provenance: { kind: "inter_session", sourceSessionKey: ctx.sessionKey, sourceChannel: requesterChannel, sourceTool: "sessions_spawn" },
          // At least 1 ms: to the runtime 0 means no limit at all, which a tiny limit is not.
          ...(p.runTimeoutSeconds ? { timeoutMs: Math.max(1, Math.round(p.runTimeoutSeconds * 1000)) } : {}),
          ...(model ? { model } : {}),
        });
      } catch (err) {
        // Nothing will run in the child, announce it or archive it (R40): it is not left listed.
        await subagents.discard(runId);
        await app.sessions.delete(childSessionKey);
        return { status: "error", error: (err as Error).message, childSessionKey };
      }
      return { status: "accepted", runId, childSessionKey, ...(model ? { model } : {}) };
    },
  });
}
