/**
 * Owner chat commands (interfaces §5): `/send on|off|inherit` (R28), `/status`, `/sid`,
 * `/new` | `/reset`, `/stop`, `/help`. The caller has already checked ownership.
 */
import type { ChannelId } from "../channels/types.js";
import type { Config } from "../config/schema.js";
import type { AgentRuntime } from "../agents/runtime.js";
import type { Outbox } from "../delivery/outbox.js";
import type { SessionStore } from "../sessions/session-store.js";
import { classifySessionKind, deriveRowChannel, displayKey } from "../sessions/keys.js";
import { COMMAND_HELP, type ParsedCommand } from "./command-parse.js";

export interface CommandScope {
  sessionKey: string;
  agentId: string;
  channel: ChannelId;
}

export interface CommandDeps {
  config: Config;
  sessions: SessionStore;
  runtime: AgentRuntime;
  outbox: Outbox;
  /** Stops sub-agent runs spawned by a session (wired by the session tools); returns their runIds. */
  stopSubagents?: (sessionKey: string) => string[];
}

export interface CommandResult {
  reply: string;
  /** `/new <text>`: the text to run as a message in the fresh session. */
  continueWith?: string;
}

const MODE_TO_POLICY = { on: "allow", off: "deny", inherit: null } as const;

export async function executeCommand(cmd: ParsedCommand, scope: CommandScope, deps: CommandDeps): Promise<CommandResult> {
  const { sessions } = deps;
  switch (cmd.name) {
    case "send": {
      if (!cmd.mode) return { reply: "⚙️ Usage: /send on|off|inherit" };
      await sessions.upsert(scope.sessionKey, scope.agentId, { sendPolicy: MODE_TO_POLICY[cmd.mode] });
      return { reply: `⚙️ Send policy set to ${cmd.mode}.` };
    }
    case "sid": {
      const entry = sessions.get(scope.sessionKey);
      const verdict = deps.outbox.evaluate(scope.sessionKey, scope.channel);
      return {
        reply: [
          `key: ${displayKey(scope.sessionKey)}`,
          `kind: ${classifySessionKind(scope.sessionKey)}`,
          `channel: ${entry ? deriveRowChannel(scope.sessionKey, entry) : scope.channel}`,
          `send policy: ${verdict.decision} (${verdict.reason})`,
          `sessionId: ${entry?.sessionId ?? "(new)"}`,
        ].join("\n"),
      };
    }
    case "status": {
      const entry = sessions.get(scope.sessionKey);
      const runs = deps.runtime.activeRuns().filter((r) => r.sessionKey === scope.sessionKey);
      const verdict = deps.outbox.evaluate(scope.sessionKey, scope.channel);
      return {
        reply: [
          `📊 ${displayKey(scope.sessionKey)}`,
          `model: ${entry?.model ?? entry?.lastModel ?? "(agent default)"}`,
          `tokens: ${entry?.totalTokens ?? 0} (in ${entry?.inputTokens ?? 0} / out ${entry?.outputTokens ?? 0})`,
          `send policy: ${verdict.decision} (${verdict.reason})`,
          `runs: ${runs.filter((r) => r.status === "running").length} running, ${runs.filter((r) => r.status === "queued").length} queued`,
          `outbox: ${deps.outbox.pending} pending`,
        ].join("\n"),
      };
    }
    case "new":
    case "reset": {
      const entry = sessions.get(scope.sessionKey) ?? (await sessions.upsert(scope.sessionKey, scope.agentId));
      const fresh = await sessions.reset(entry.key);
      return { reply: `⚙️ New session started (sessionId ${fresh.sessionId}).`, ...(cmd.rest ? { continueWith: cmd.rest } : {}) };
    }
    case "stop": {
      const aborted = deps.runtime.abortSession(scope.sessionKey);
      const children = deps.stopSubagents?.(scope.sessionKey) ?? [];
      if (aborted.length) await sessions.upsert(scope.sessionKey, scope.agentId, { abortedLastRun: true });
      return { reply: `⚙️ Stopped ${aborted.length} run(s)${children.length ? ` and ${children.length} sub-agent run(s)` : ""}.` };
    }
    case "help":
      return { reply: COMMAND_HELP };
  }
}
