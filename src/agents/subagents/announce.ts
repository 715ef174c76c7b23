/**
 * The sub-agent announce text (R39, R41): whatever the child's announce step wrote is normalised
 * to exactly three sections — `Status` taken from the run's outcome, never from the model's
 * words, then `Result` and `Notes` — followed by a stats line. Pure.
 */
export type SubagentStatus = "ok" | "error" | "timeout";

export interface AnnounceInput {
  /** The announce step's reply (may already use the sections, or be free text). */
  reply: string;
  status: SubagentStatus;
  /** The run's error for error/timeout outcomes. */
  error?: string;
  /** Used when the reply has no result: the child's final reply. */
  fallbackResult?: string;
}

const HEADER = /^[\s>#*_-]*(status|result|notes?)[*_\s]*:[*_]*\s?(.*)$/i;

/** Splits `Status:` / `Result:` / `Notes:` sections (markdown emphasis tolerated); free text → undefined. */
export function parseSections(reply: string): { result?: string; notes?: string } | undefined {
  const sections: Record<string, string[]> = {};
  let current: string | undefined;
  let found = false;
  for (const line of reply.split(/\r?\n/)) {
    const m = HEADER.exec(line);
    if (m) {
      found = true;
      current = m[1].toLowerCase().startsWith("note") ? "notes" : m[1].toLowerCase();
      sections[current] = [m[2]];
    } else if (current) sections[current].push(line);
  }
  if (!found) return undefined;
  const text = (name: string) => sections[name]?.join("\n").trim() || undefined;
  return { result: text("result"), notes: text("notes") };
}

export function normalizeAnnounce(input: AnnounceInput): string {
  const reply = input.reply.trim();
  const sections = parseSections(reply) ?? { result: reply || undefined };
  const result = sections.result || input.fallbackResult?.trim() || "(no output)";
  // "none" from the model is no note, so an error does not read "HTTP 500; none".
  let notes = sections.notes && !/^(none|n\/a|-|nothing)\.?$/i.test(sections.notes) ? sections.notes : undefined;
  if (input.status !== "ok" && input.error && !notes?.includes(input.error)) notes = notes ? `${input.error}; ${notes}` : input.error;
  return [`Status: ${input.status}`, `Result: ${result}`, `Notes: ${notes || "none"}`].join("\n");
}

export interface SubagentStats {
  runtimeMs?: number;
  inputTokens?: number;
  outputTokens?: number;
  /** Prices per million tokens (models.providers[].models[].cost). */
  cost?: { input: number; output: number };
  sessionKey: string;
  sessionId: string;
  transcriptPath: string;
}

/** `Stats: runtime 2m31s • tokens 1.2k (in 1k / out 200) • est $0.01 • sessionKey … • sessionId … • transcript …` */
export function formatStatsLine(s: SubagentStats): string {
  const parts = [`runtime ${s.runtimeMs === undefined ? "n/a" : formatDuration(s.runtimeMs)}`];
  const hasTokens = s.inputTokens !== undefined || s.outputTokens !== undefined;
  const input = s.inputTokens ?? 0;
  const output = s.outputTokens ?? 0;
  parts.push(hasTokens ? `tokens ${formatTokenCount(input + output)} (in ${formatTokenCount(input)} / out ${formatTokenCount(output)})` : "tokens n/a");
  if (s.cost && hasTokens) parts.push(`est $${formatCost(estimateCost(input, output, s.cost))}`);
  parts.push(`sessionKey ${s.sessionKey}`, `sessionId ${s.sessionId}`, `transcript ${s.transcriptPath}`);
  return `Stats: ${parts.join(" \u2022 ")}`;
}

/** 850ms, 45s, 2m31s, 1h5m, 2d3h */
export function formatDuration(ms: number): string {
  if (ms < 1000) return `${Math.max(0, Math.round(ms))}ms`;
  const s = Math.round(ms / 1000);
  if (s < 60) return `${s}s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m${s % 60}s`;
  const h = Math.floor(m / 60);
  if (h < 24) return `${h}h${m % 60}m`;
  return `${Math.floor(h / 24)}d${h % 24}h`;
}

/** 950, 1.2k, 3.4m */
export function formatTokenCount(n: number): string {
  if (n < 1000) return String(Math.round(n));
  const [value, unit] = n < 1_000_000 ? [n / 1000, "k"] : [n / 1_000_000, "m"];
  return `${value.toFixed(1).replace(/\.0$/, "")}${unit}`;
}

/** Dollars for a token count at per-million prices. */
export function estimateCost(inputTokens: number, outputTokens: number, cost: { input: number; output: number }): number {
  return (inputTokens * cost.input + outputTokens * cost.output) / 1_000_000;
}

/** Two decimals from one cent up, four below, so small runs don't all read "$0.00". */
export function formatCost(dollars: number): string {
  return dollars >= 0.01 ? dollars.toFixed(2) : dollars.toFixed(4);
}
