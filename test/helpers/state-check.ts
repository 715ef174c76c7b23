/**
 * Reads a daemon's state directory after the fact (the daemon stopped) and checks that it is
 * intact: every session entry in the SQLite store has a valid shape, and every transcript line
 * is a parseable JSON line of a known type.
 */
import { readdirSync, readFileSync } from "node:fs";
import path from "node:path";
import { z } from "zod";
import type { SessionEntry } from "../../src/sessions/entry.js";
import type { TranscriptLine } from "../../src/sessions/transcript.js";
import { openKvStore } from "../../src/store/kv.js";

const Channel = z.enum(["webchat", "telegram", "discord", "whatsapp"]);
const DeliveryContext = z.strictObject({ channel: Channel, to: z.string().min(1), accountId: z.string().min(1).optional(), threadId: z.string().min(1).optional() });

/**
 * A label names a session for people and for lookups (sessions.resolve, sessions_send by label):
 * a blank one names nothing and could never be asked for, and no way in (the gateway's
 * sessions.patch and agent params, the session tools' schemas) takes one over 64 characters —
 * code points, as zod counts them there: "🦄" is one character and two UTF-16 units.
 */
const LABEL_MAX = 64;
const Label = z
  .string()
  .refine((l) => l.trim().length > 0, "label is blank")
  .refine((l) => [...l].length <= LABEL_MAX, `label longer than ${LABEL_MAX} characters`);

/** Every field SessionEntry declares, strictly: an unknown or mistyped field is corruption. */
export const SessionEntrySchema = z.strictObject({
  key: z.string().min(1),
  sessionId: z.string().min(1),
  agentId: z.string().min(1),
  createdAt: z.number().int().positive(),
  updatedAt: z.number().int().positive(),
  chatType: z.enum(["direct", "group", "channel"]).optional(),
  channel: Channel.optional(),
  displayName: z.string().optional(),
  label: Label.optional(),
  model: z.string().optional(),
  lastModel: z.string().optional(),
  contextTokens: z.number().nonnegative().optional(),
  inputTokens: z.number().nonnegative().optional(),
  outputTokens: z.number().nonnegative().optional(),
  totalTokens: z.number().nonnegative().optional(),
  thinkingLevel: z.string().optional(),
  verboseLevel: z.string().optional(),
  systemSent: z.boolean().optional(),
  abortedLastRun: z.boolean().optional(),
  sendPolicy: z.enum(["allow", "deny"]).optional(),
  lastChannel: Channel.optional(),
  lastTo: z.string().optional(),
  lastAccountId: z.string().optional(),
  lastThreadId: z.string().optional(),
  deliveryContext: DeliveryContext.optional(),
  spawnedBy: z.string().optional(),
  archivedAt: z.number().optional(),
});

const LINE_TYPES = new Set(["session", "message", "delivery"]);

export interface StateReport {
  entries: SessionEntry[];
  /** Problems found (empty when intact). */
  problems: string[];
  /** Parsed transcript lines per file name. */
  transcripts: Map<string, TranscriptLine[]>;
  /** Raw records of a store space, when asked for. */
  spaces: Map<string, Array<[string, unknown]>>;
}

/**
 * `killed`: the directory of a process killed mid-write, where a transcript may also be empty
 * (created, killed before its first write; the next start writes its header). Elsewhere an empty
 * transcript is a defect.
 */
export async function checkState(stateDir: string, opts: { spaces?: string[]; killed?: boolean } = {}): Promise<StateReport> {
  const problems: string[] = [];
  const kv = await openKvStore(`sqlite://${path.join(stateDir, "switchboard.sqlite")}`, stateDir);
  const spaces = new Map<string, Array<[string, unknown]>>();
  let entries: SessionEntry[] = [];
  try {
    const rows = await kv.space<unknown>("sessions").entries();
    for (const [key, value] of rows) {
      const parsed = SessionEntrySchema.safeParse(value);
      // Hostile keys run to thousands of characters: enough of one to find it.
      const shown = key.length > 120 ? `${key.slice(0, 120)}…` : key;
      if (!parsed.success) problems.push(`session entry ${shown}: ${parsed.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`).join("; ")}`);
      else if (parsed.data.key !== key) problems.push(`session entry ${shown} holds key ${parsed.data.key}`);
      else entries.push(parsed.data as SessionEntry);
    }
    for (const name of opts.spaces ?? []) spaces.set(name, await kv.space<unknown>(name).entries());
  } finally {
    await kv.close();
  }
  entries = entries.sort((a, b) => a.updatedAt - b.updatedAt);
  const transcripts = new Map<string, TranscriptLine[]>();
  const root = path.join(stateDir, "agents");
  let agents: string[] = [];
  try {
    agents = readdirSync(root);
  } catch {
    /* no transcripts yet */
  }
  for (const agent of agents) {
    const dir = path.join(root, agent, "sessions");
    for (const file of readdirSync(dir).filter((f) => f.endsWith(".jsonl"))) {
      const text = readFileSync(path.join(dir, file), "utf8");
      if (text.length && !text.endsWith("\n")) problems.push(`${file}: last line not terminated`);
      const lines: TranscriptLine[] = [];
      text
        .split("\n")
        .filter((l) => l.length)
        .forEach((line, i) => {
          try {
            const parsed = JSON.parse(line) as TranscriptLine;
            if (!LINE_TYPES.has(parsed?.type)) problems.push(`${file}:${i + 1}: unknown line type ${JSON.stringify(parsed?.type)}`);
            else lines.push(parsed);
          } catch {
            problems.push(`${file}:${i + 1}: not JSON: ${line.slice(0, 80)}`);
          }
        });
      if ((text.length || !opts.killed) && lines[0]?.type !== "session") problems.push(`${file}: first line is not the session header`);
      transcripts.set(file, lines);
    }
  }
  return { entries, problems, transcripts, spaces };
}
