/**
 * Extra system prompts of a sub-agent's run and of its announce step; each starts with the fixed
 * first line of interfaces §4. Pure.
 */
import type { SubagentStatus } from "./announce.js";

export const SUBAGENT_ANNOUNCE_SKIP = "ANNOUNCE_SKIP";
export const SUBAGENT_ANNOUNCE_MESSAGE = "Subagent announce step.";

export interface SubagentPromptInput {
  task: string;
  label?: string;
  requesterKey: string;
  requesterChannel: string;
  childKey: string;
}

export function subagentContextPrompt(p: SubagentPromptInput): string {
  return [
    "Subagent context:",
    "You are a sub-agent, spawned by another agent session to do one task in this isolated session.",
    ...(p.label ? [`Label: ${p.label}.`] : []),
    `Task: ${collapse(p.task)}`,
    `Requester session: ${p.requesterKey}.`,
    `Requester channel: ${p.requesterChannel}.`,
    `Your session: ${p.childKey}.`,
    "Work on the task only. Nobody reads your replies live: your final reply is your result, and it is announced to the requester's chat when you finish. You cannot spawn sub-agents or message other sessions.",
  ].join("\n");
}

export function subagentAnnouncePrompt(p: SubagentPromptInput & { status: SubagentStatus; error?: string; finalReply?: string }): string {
  return [
    "Subagent announce step:",
    `Your task run has ended: ${p.status === "ok" ? "completed" : p.status === "timeout" ? `timed out (${p.error ?? "no detail"})` : `failed (${p.error ?? "no detail"})`}.`,
    `Task: ${collapse(p.task)}`,
    `Your final reply: ${p.finalReply?.trim() || "(none)"}`,
    `Requester session: ${p.requesterKey}.`,
    "Write the announcement for the requester's chat as three sections:",
    "Status: (filled in by the system from the run's outcome)",
    "Result: what you found or did, briefly",
    "Notes: caveats, follow-ups, or none",
    `If nothing should be posted, reply exactly "${SUBAGENT_ANNOUNCE_SKIP}".`,
  ].join("\n");
}

function collapse(text: string): string {
  return text.replace(/\s+/g, " ").trim();
}
