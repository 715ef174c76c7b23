/**
 * What an agent tool is, seen from the runtime: a JSON-schema function (numbers as `number`, no
 * top-level anyOf — some providers reject both) and an executor that returns a JSON payload.
 */
import type { DeliveryContext } from "../sessions/entry.js";
import type { AbortLike } from "../util/run-abort.js";

export interface ToolContext {
  /** Canonical key of the calling session. */
  sessionKey: string;
  agentId: string;
  runId: string;
  /** Where the calling conversation's replies go (captured for sub-agent announces). */
  origin?: DeliveryContext;
  /** The run's: aborted by /stop, its time limit or shutdown. */
  signal: AbortLike;
  /**
   * Awaits `wait` — another run's answer — with the calling run's concurrency slot given back, and
   * takes a slot again before returning (at once, without one, when the run was aborted meanwhile).
   * The session's lane stays held: the session still runs one turn at a time.
   */
  park<T>(wait: Promise<T>): Promise<T>;
}

export interface AgentTool {
  name: string;
  description: string;
  parameters: Record<string, unknown>;
  execute(args: unknown, ctx: ToolContext): Promise<unknown>;
}

/** The session a run's tool set is built for. */
export interface ToolScope {
  sessionKey: string;
  agentId: string;
}

/** The tools a run in `sessionKey` may use. */
export type ToolSource = (scope: ToolScope) => AgentTool[];

/** Drops tools across every source for a scope (sub-agent restrictions, R34). */
export type ToolFilter = (scope: ToolScope, tool: AgentTool) => boolean;
