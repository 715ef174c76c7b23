/**
 * What follows a successful sessions_send (R21, R22, R17): the reply-back loop, alternating
 * requester and target (turn 1 on the requester, its input the target's reply), then the
 * announce step on the target, whose reply — unless ANNOUNCE_SKIP — goes to the target
 * session's chat through the outbox, so the send policy decides (R17, D2).
 *
 * It runs in the background after the tool returned; every step is an ordinary run in the
 * "nested" lane, queued behind whatever the session is doing.
 */
import type pino from "pino";
import type { App } from "../app.js";
import type { RunRequest } from "../agents/runtime.js";
import { displayKey } from "../sessions/keys.js";
import type { InputProvenance } from "../sessions/transcript.js";
import { ANNOUNCE_SKIP, ANNOUNCE_STEP_MESSAGE, announceStepPrompt, isSkip, REPLY_SKIP, replyStepPrompt, type A2AParties } from "./a2a-prompts.js";
import { deliveryContextOf, outboundTargetOf } from "./delivery-route.js";

/** One step may take this long before the flow gives up on it (the run itself is aborted). */
export const A2A_STEP_TIMEOUT_MS = 120_000;

export interface A2AFlowInput extends A2AParties {
  /** runId of the primary run; step runIds and the announce's outbox id derive from it. */
  runId: string;
  requesterAgentId: string;
  targetAgentId: string;
  request: string;
  roundOneReply: string;
}

export type A2AFlowResult =
  | { announce: "delivered-to-outbox"; outboxId: string; turns: number }
  | { announce: "skipped" | "no-route" | "step-failed" | "session-deleted"; turns: number };

export async function runAgentToAgentFlow(app: App, input: A2AFlowInput, log: pino.Logger): Promise<A2AFlowResult> {
  const maxTurns = app.config.session.agentToAgent.maxPingPongTurns;
  // Prompts show keys as callers see them (R6: never "global").
  const shown = { ...input, requesterKey: displayKey(input.requesterKey), targetKey: displayKey(input.targetKey) };
  // A side deleted (sessions.delete) ends the exchange: a step's run would create its session anew.
  const deleted = () => !app.sessions.get(input.requesterKey) || !app.sessions.get(input.targetKey);
  let latest = input.roundOneReply;
  let turns = 0;
  for (let turn = 1; turn <= maxTurns; turn++) {
    if (deleted()) return { announce: "session-deleted", turns };
    const current = turn % 2 === 1 ? "requester" : "target";
    const other = current === "requester" ? "target" : "requester";
    const reply = await step(app, {
      sessionKey: current === "requester" ? input.requesterKey : input.targetKey,
      agentId: current === "requester" ? input.requesterAgentId : input.targetAgentId,
      message: latest,
      runId: `${input.runId}:reply:${turn}`,
      extraSystemPrompt: replyStepPrompt({ ...shown, turn, maxTurns, current }),
      provenance: provenanceFrom(other === "requester" ? input.requesterKey : input.targetKey, other === "requester" ? input.requesterChannel : input.targetChannel),
    });
    turns = turn;
    if (isSkip(reply, REPLY_SKIP)) break;
    latest = (reply as string).trim();
  }

  if (deleted()) return { announce: "session-deleted", turns };
  const announce = await step(app, {
    sessionKey: input.targetKey,
    agentId: input.targetAgentId,
    message: ANNOUNCE_STEP_MESSAGE,
    runId: `${input.runId}:announce`,
    extraSystemPrompt: announceStepPrompt({ ...shown, latestReply: latest }),
    provenance: provenanceFrom(input.requesterKey, input.requesterChannel),
  });
  if (announce === undefined) return { announce: "step-failed", turns };
  if (isSkip(announce, ANNOUNCE_SKIP)) return { announce: "skipped", turns };
  const route = deliveryContextOf(app.sessions.get(input.targetKey));
  if (!route) {
    log.info({ sessionKey: input.targetKey, runId: input.runId }, "agent-to-agent announce not posted: the target session has no chat route");
    return { announce: "no-route", turns };
  }
  const outboxId = `a2a-announce:${input.runId}`;
  await app.outbox.enqueue({ id: outboxId, sessionKey: input.targetKey, target: outboundTargetOf(route), text: announce.trim(), kind: "announce" });
  return { announce: "delivered-to-outbox", outboxId, turns };
}

function provenanceFrom(sourceSessionKey: string, sourceChannel: string): InputProvenance {
  return { kind: "inter_session", sourceSessionKey, sourceChannel, sourceTool: "sessions_send" };
}

/** Runs one step and returns its reply, or undefined when the run did not finish ok. */
async function step(app: App, req: Omit<RunRequest, "lane" | "timeoutMs">): Promise<string | undefined> {
  const { done } = app.runtime.start({ ...req, lane: "nested", timeoutMs: A2A_STEP_TIMEOUT_MS });
  const outcome = await done;
  return outcome.status === "ok" ? outcome.reply : undefined;
}
