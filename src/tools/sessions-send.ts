/**
 * sessions_send (R13–R22): run a message in another session as an inter-session message and,
 * unless told not to wait, return that session's reply. The wait is the runtime's server-side
 * wait — the one `agent.wait` answers from (R18) — so the run and its completion outlive any
 * caller. After a successful primary run, the agent-to-agent flow continues in the background.
 *
 * The send policy is not checked here: it gates deliveries, and the primary run delivers
 * nothing; the announce that may follow goes through the outbox, which applies it (R17, D2).
 */
import { randomUUID } from "node:crypto";
import type pino from "pino";
import type { App } from "../app.js";
import { deriveRowChannel, displayKey } from "../sessions/keys.js";
import { runAgentToAgentFlow } from "./a2a-flow.js";
import { messageContextPrompt } from "./a2a-prompts.js";
import type { BackgroundTasks } from "./background.js";
import type { SendWaits } from "./send-waits.js";
import { defineTool, SessionsSendParams } from "./schemas.js";
import { resolveTarget } from "./target.js";
import type { AgentTool, ToolContext } from "./types.js";
import type { SessionView } from "./visibility.js";

export const SEND_TIMEOUT_DEFAULT_SECONDS = 30;

export type SessionsSendResult =
  | { runId: string; status: "accepted"; sessionKey: string }
  | { runId: string; status: "ok"; reply: string; sessionKey: string }
  | { runId: string; status: "timeout"; error: string; sessionKey: string }
  | { runId: string; status: "error"; error: string; sessionKey?: string }
  | { status: "forbidden"; error: string };

export interface SendToolDeps {
  app: App;
  background: BackgroundTasks;
  /** Shared by every session's tool, so that a wait that would close a cycle is seen. */
  waits: SendWaits;
  log: pino.Logger;
}

export function createSessionsSendTool(deps: SendToolDeps, view: SessionView): AgentTool {
  const { app } = deps;
  return defineTool({
    name: "sessions_send",
    description:
      "Send a message to another session and (by default) wait for its reply. timeoutSeconds 0 returns at once with status accepted. After the reply, the two agents may exchange a few more turns and the target may announce the outcome in its own chat.",
    params: SessionsSendParams,
    invalid: (error): SessionsSendResult => ({ runId: randomUUID(), status: "error", error }),
    async run(p, ctx): Promise<SessionsSendResult> {
      if (!p.sessionKey && !p.label) return { runId: randomUUID(), status: "error", error: "sessionKey required (or label)" };
      const target = resolveTarget(app, view, { sessionKey: p.sessionKey, label: p.label }, "messaging");
      if (!target.ok) return target.status === "forbidden" ? { status: "forbidden", error: target.error } : { runId: randomUUID(), status: "error", error: target.error };
      const shownKey = displayKey(target.key);
      if (target.key === ctx.sessionKey) {
        return { runId: randomUUID(), status: "error", error: `sessions_send cannot target the calling session (${shownKey}): its run would wait for itself`, sessionKey: shownKey };
      }
      const timeoutSeconds = p.timeoutSeconds ?? SEND_TIMEOUT_DEFAULT_SECONDS;
      if (timeoutSeconds > 0 && deps.waits.closesCycle(ctx.sessionKey, target.key)) {
        return {
          runId: randomUUID(),
          status: "error",
          error: `${shownKey} is waiting for this session's reply, so its run cannot answer before yours ends: put the question in your reply, or send it with timeoutSeconds 0`,
          sessionKey: shownKey,
        };
      }

      const requesterChannel = ctx.origin?.channel ?? channelOf(app, ctx.sessionKey);
      const targetAgentId = target.entry.agentId;
      const runId = randomUUID();
      let done: ReturnType<App["runtime"]["start"]>["done"];
      try {
        ({ done } = app.runtime.start({
          sessionKey: target.key,
          agentId: targetAgentId,
          message: p.message,
          runId,
          lane: "nested",
          extraSystemPrompt: messageContextPrompt({ requesterKey: displayKey(ctx.sessionKey), requesterChannel, targetKey: shownKey }),
          provenance: { kind: "inter_session", sourceSessionKey: ctx.sessionKey, sourceChannel: requesterChannel, sourceTool: "sessions_send" },
        }));
      } catch (err) {
        return { runId, status: "error", error: (err as Error).message, sessionKey: shownKey };
      }

      // Fire-and-forget or not, the flow waits in the background for the round-1 reply; a run
      // that did not end ok, or ended without a reply, has nothing to talk about or announce.
      const startFlow = (roundOne: Promise<string | undefined>) =>
        deps.background.run("agent-to-agent flow", { runId, sessionKey: target.key }, async () => {
          const roundOneReply = (await roundOne)?.trim();
          if (!roundOneReply) return;
          const result = await runAgentToAgentFlow(
            app,
            { runId, requesterKey: ctx.sessionKey, requesterAgentId: ctx.agentId, requesterChannel, targetKey: target.key, targetAgentId, targetChannel: channelOf(app, target.key), request: p.message, roundOneReply },
            deps.log,
          );
          deps.log.debug({ runId, sessionKey: target.key, ...result }, "agent-to-agent flow finished");
        });

      if (timeoutSeconds === 0) {
        startFlow(done.then((outcome) => (outcome.status === "ok" ? outcome.reply : undefined)));
        return { runId, status: "accepted", sessionKey: shownKey };
      }

      // Parked: the target's run may need the very slot this run would otherwise hold while it waits.
      const waited = await ctx.park(deps.waits.during(ctx.sessionKey, target.key, waitUnlessAborted(app.runtime.wait(runId, Math.round(timeoutSeconds * 1000)), ctx)));
      // A run that ended cut short (its own time limit, /stop) reports "timeout" too, but it did
      // not continue: R15's "the run continues" is only true when our wait ran out.
      if (waited?.status === "timeout" && waited.endedAt !== undefined) {
        return { runId, status: "error", error: waited.error ?? "run ended without a reply", sessionKey: shownKey };
      }
      if (!waited || waited.status === "timeout") {
        return { runId, status: "timeout", error: `no reply within ${timeoutSeconds} s; the run continues — read the reply later with sessions_history`, sessionKey: shownKey };
      }
      if (waited.status === "error") return { runId, status: "error", error: waited.error ?? "agent error", sessionKey: shownKey };
      const reply = app.runtime.get(runId)?.reply ?? "";
      startFlow(Promise.resolve(reply));
      return { runId, status: "ok", reply, sessionKey: shownKey };
    },
  });
}

function channelOf(app: App, key: string): string {
  const entry = app.sessions.get(key);
  return entry ? deriveRowChannel(key, entry) : "unknown";
}

/** The requester's own run being aborted ends the wait (undefined); the target run goes on. */
function waitUnlessAborted<T>(wait: Promise<T>, ctx: ToolContext): Promise<T | undefined> {
  if (ctx.signal.aborted) return Promise.resolve(undefined);
  return new Promise((resolve) => {
    const onAbort = () => resolve(undefined);
    ctx.signal.addEventListener("abort", onAbort, { once: true });
    void wait.then((value) => {
      ctx.signal.removeEventListener("abort", onAbort);
      resolve(value);
    });
  });
}
