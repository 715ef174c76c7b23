/**
 * The list row of a session (spec "Row shape"), shared by `sessions.list` and `sessions_list`.
 */
import type { SessionEntry } from "./entry.js";
import { classifySessionKind, deriveRowChannel, displayKey, type RowChannel, type SessionKind } from "./keys.js";

export interface SessionRow {
  key: string;
  kind: SessionKind;
  channel: RowChannel;
  displayName?: string;
  label?: string;
  updatedAt: number;
  sessionId: string;
  model?: string;
  contextTokens?: number;
  totalTokens?: number;
  thinkingLevel?: string;
  verboseLevel?: string;
  systemSent?: boolean;
  abortedLastRun?: boolean;
  sendPolicy?: "allow" | "deny";
  lastChannel?: string;
  lastTo?: string;
  lastAccountId?: string;
  deliveryContext?: { channel: string; to: string; accountId?: string };
  spawnedBy?: string;
  transcriptPath: string;
  messages?: unknown[];
}

export function toSessionRow(entry: SessionEntry, transcriptPath: string, defaultModel?: string): SessionRow {
  const dc = entry.deliveryContext;
  const lastChannel = dc?.channel ?? entry.lastChannel;
  const lastTo = dc?.to ?? entry.lastTo;
  const row: SessionRow = {
    key: displayKey(entry.key),
    kind: classifySessionKind(entry.key),
    channel: deriveRowChannel(entry.key, entry),
    updatedAt: entry.updatedAt,
    sessionId: entry.sessionId,
    transcriptPath,
  };
  const optional: Partial<SessionRow> = {
    displayName: entry.displayName ?? entry.label,
    label: entry.label,
    model: entry.model ?? entry.lastModel ?? defaultModel,
    contextTokens: entry.contextTokens,
    totalTokens: entry.totalTokens,
    thinkingLevel: entry.thinkingLevel,
    verboseLevel: entry.verboseLevel,
    systemSent: entry.systemSent,
    abortedLastRun: entry.abortedLastRun,
    sendPolicy: entry.sendPolicy,
    lastChannel,
    lastTo: lastTo === undefined ? undefined : shownTo(lastChannel, lastTo),
    lastAccountId: dc?.accountId ?? entry.lastAccountId,
    deliveryContext: dc ? { channel: dc.channel, to: shownTo(dc.channel, dc.to), ...(dc.accountId ? { accountId: dc.accountId } : {}) } : undefined,
    spawnedBy: entry.spawnedBy === undefined ? undefined : displayKey(entry.spawnedBy),
  };
  for (const [k, v] of Object.entries(optional)) if (v !== undefined) (row as unknown as Record<string, unknown>)[k] = v;
  return row;
}

/** Web chat addresses a chat by its session key: shown as callers see keys, never `global` (R6). */
function shownTo(channel: string | undefined, to: string): string {
  return channel === "webchat" ? displayKey(to) : to;
}
