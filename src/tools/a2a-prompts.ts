/**
 * The extra system prompts of the agent-to-agent steps (R19, R21, R22). Each starts with a fixed
 * first line (interfaces §4) so operators can recognise the step in transcripts and logs. Pure.
 */
import { isSkipToken } from "../util/skip-token.js";
export const REPLY_SKIP = "REPLY_SKIP";
export const ANNOUNCE_SKIP = "ANNOUNCE_SKIP";
export const ANNOUNCE_STEP_MESSAGE = "Agent-to-agent announce step.";

export interface A2AParties {
  requesterKey: string;
  requesterChannel: string;
  targetKey: string;
  targetChannel: string;
}

export function messageContextPrompt(p: Omit<A2AParties, "targetChannel">): string {
  return [
    "Agent-to-agent message context:",
    `Agent 1 (requester) session: ${p.requesterKey}.`,
    `Agent 1 (requester) channel: ${p.requesterChannel}.`,
    `Agent 2 (target) session: ${p.targetKey}.`,
    "This message was sent by another agent session (sessions_send), not by a user of this chat. Your reply goes back to that agent.",
  ].join("\n");
}

export function replyStepPrompt(p: A2AParties & { turn: number; maxTurns: number; current: "requester" | "target" }): string {
  return [
    "Agent-to-agent reply step:",
    `Current agent: ${p.current === "requester" ? "Agent 1 (requester)" : "Agent 2 (target)"}.`,
    `Turn ${p.turn} of ${p.maxTurns}.`,
    `Agent 1 (requester) session: ${p.requesterKey}.`,
    `Agent 1 (requester) channel: ${p.requesterChannel}.`,
    `Agent 2 (target) session: ${p.targetKey}.`,
    `Agent 2 (target) channel: ${p.targetChannel}.`,
    "The user message is the other agent's latest reply; answer it.",
    `If you want to stop the ping-pong, reply exactly "${REPLY_SKIP}".`,
  ].join("\n");
}

export function announceStepPrompt(p: A2AParties & { request: string; roundOneReply: string; latestReply: string }): string {
  return [
    "Agent-to-agent announce step:",
    `Agent 1 (requester) session: ${p.requesterKey}.`,
    `Agent 1 (requester) channel: ${p.requesterChannel}.`,
    `Agent 2 (target) session: ${p.targetKey}.`,
    `Agent 2 (target) channel: ${p.targetChannel}.`,
    `Original request: ${p.request}`,
    `Round 1 reply: ${p.roundOneReply || "(not available)."}`,
    `Latest reply: ${p.latestReply || "(not available)."}`,
    `If you want to remain silent, reply exactly "${ANNOUNCE_SKIP}".`,
    "Any other reply will be posted to the target channel.",
    "After this reply, the agent-to-agent conversation is over.",
  ].join("\n");
}

/** A step's reply ends the exchange when it is empty or the skip token alone (see isSkipToken). */
export function isSkip(reply: string | undefined, token: string): boolean {
  const text = reply?.trim() ?? "";
  return text === "" || isSkipToken(text, token);
}
