/**
 * Append-only JSONL transcripts, one file per session
 * (`<stateDir>/agents/<agentId>/sessions/<sessionId>.jsonl`, reference §2.5 format).
 *
 * Line 1 is a `session` header; then `message` lines (user / assistant / toolResult) and
 * `delivery` lines (what the outbox did with a reply: sent or suppressed by policy).
 * A torn last line (process killed mid-write) is skipped by readers and fenced off by a newline
 * before the next append, so one bad write never corrupts later lines.
 */
import { randomUUID } from "node:crypto";
import { promises as fs } from "node:fs";
import path from "node:path";

export interface TextBlock {
  type: "text";
  text: string;
}
export interface ToolCallBlock {
  type: "toolCall";
  id: string;
  name: string;
  arguments: unknown;
}

export interface InputProvenance {
  kind: "external_user" | "inter_session" | "internal_system";
  sourceSessionKey?: string;
  sourceChannel?: string;
  sourceTool?: string;
}

export interface Usage {
  input: number;
  output: number;
  totalTokens: number;
}

export type TranscriptMessage =
  | { role: "user"; content: string; timestamp: number; provenance?: InputProvenance; sender?: { id: string; name?: string; channel?: string } }
  | {
      role: "assistant";
      content: Array<TextBlock | ToolCallBlock>;
      timestamp: number;
      model?: string;
      provider?: string;
      usage?: Usage;
      stopReason?: "stop" | "toolUse" | "error" | "aborted" | "length";
      errorMessage?: string;
    }
  | { role: "toolResult"; toolCallId: string; toolName: string; content: TextBlock[]; isError: boolean; timestamp: number };

export interface DeliveryRecord {
  status: "sent" | "suppressed" | "failed" | "unknown_after_send";
  outboxId: string;
  channel: string;
  to: string;
  reason?: string;
  text?: string;
}

export type TranscriptLine =
  | { type: "session"; version: 1; id: string; key: string; timestamp: string }
  | { type: "message"; id: string; parentId: string | null; timestamp: string; message: TranscriptMessage }
  | ({ type: "delivery"; id: string; timestamp: string } & DeliveryRecord);

export interface TranscriptRef {
  path: string;
  sessionId: string;
  key: string;
}

export class TranscriptStore {
  private readonly lastIds = new Map<string, string>();
  private readonly chains = new Map<string, Promise<unknown>>();
  private readonly checked = new Set<string>();

  async appendMessage(ref: TranscriptRef, message: TranscriptMessage): Promise<string> {
    const id = randomUUID().slice(0, 8);
    const line: TranscriptLine = { type: "message", id, parentId: this.lastIds.get(ref.path) ?? null, timestamp: new Date(message.timestamp).toISOString(), message };
    this.lastIds.set(ref.path, id);
    await this.write(ref, line);
    return id;
  }

  async appendDelivery(ref: TranscriptRef, record: DeliveryRecord): Promise<void> {
    await this.write(ref, { type: "delivery", id: randomUUID().slice(0, 8), timestamp: new Date().toISOString(), ...record });
  }

  /** The last `limit` messages (all message lines when limit is undefined). */
  async readMessages(file: string, limit?: number): Promise<TranscriptMessage[]> {
    await this.chains.get(file);
    const lines = limit === undefined ? await readAllLines(file) : await readLastLines(file, limit, isMessageLine);
    const out: TranscriptMessage[] = [];
    for (const line of lines) {
      const parsed = parseLine(line);
      if (parsed?.type === "message") out.push(parsed.message);
    }
    return limit === undefined ? out : out.slice(-limit);
  }

  /** Every parsed line (header, messages, deliveries); torn lines skipped. */
  async readLines(file: string): Promise<TranscriptLine[]> {
    await this.chains.get(file);
    return (await readAllLines(file)).map(parseLine).filter((l): l is TranscriptLine => l !== undefined);
  }

  async flush(): Promise<void> {
    await Promise.all(this.chains.values());
  }

  private write(ref: TranscriptRef, line: TranscriptLine): Promise<void> {
    const prev = this.chains.get(ref.path) ?? Promise.resolve();
    const run = prev.then(() => this.doWrite(ref, line));
    const tracked = run.catch(() => undefined).finally(() => {
      if (this.chains.get(ref.path) === tracked) this.chains.delete(ref.path);
    });
    this.chains.set(ref.path, tracked);
    return run;
  }

  private async doWrite(ref: TranscriptRef, line: TranscriptLine): Promise<void> {
    let prefix = "";
    if (!this.checked.has(ref.path)) {
      prefix = await this.prepare(ref);
      this.checked.add(ref.path);
    }
    await fs.appendFile(ref.path, `${prefix}${JSON.stringify(line)}\n`);
  }

  /** First write to a file in this process: create it with a header, or fence off a torn tail. */
  private async prepare(ref: TranscriptRef): Promise<string> {
    const handle = await fs.open(ref.path, "r").catch(() => undefined);
    if (!handle) {
      await fs.mkdir(path.dirname(ref.path), { recursive: true });
      const header: TranscriptLine = { type: "session", version: 1, id: ref.sessionId, key: ref.key, timestamp: new Date().toISOString() };
      return `${JSON.stringify(header)}\n`;
    }
    try {
      const { size } = await handle.stat();
      if (size === 0) return "";
      const buf = Buffer.alloc(1);
      await handle.read(buf, 0, 1, size - 1);
      return buf[0] === 0x0a ? "" : "\n";
    } finally {
      await handle.close();
    }
  }
}

function isMessageLine(line: string): boolean {
  return line.startsWith('{"type":"message"');
}

function parseLine(line: string): TranscriptLine | undefined {
  if (!line) return undefined;
  try {
    const value = JSON.parse(line) as TranscriptLine;
    return value && typeof value === "object" && typeof value.type === "string" ? value : undefined;
  } catch {
    return undefined;
  }
}

async function readAllLines(file: string): Promise<string[]> {
  const text = await fs.readFile(file, "utf8").catch((err: NodeJS.ErrnoException) => {
    if (err.code === "ENOENT") return "";
    throw err;
  });
  return text.split("\n");
}

/**
 * Reads backwards in 64 KiB blocks until `count` matching lines are found, so the cost of
 * `chat.history {limit}` depends on the limit, not on the transcript's length.
 */
async function readLastLines(file: string, count: number, match: (line: string) => boolean): Promise<string[]> {
  if (count <= 0) return [];
  const handle = await fs.open(file, "r").catch((err: NodeJS.ErrnoException) => {
    if (err.code === "ENOENT") return undefined;
    throw err;
  });
  if (!handle) return [];
  try {
    const { size } = await handle.stat();
    const block = 64 * 1024;
    let pos = size;
    let carry = Buffer.alloc(0);
    const found: string[] = [];
    while (pos > 0 && found.length < count) {
      const len = Math.min(block, pos);
      pos -= len;
      const buf = Buffer.alloc(len);
      await handle.read(buf, 0, len, pos);
      const chunk = Buffer.concat([buf, carry]);
      let end = chunk.length;
      for (let i = chunk.length - 1; i >= 0; i--) {
        if (chunk[i] !== 0x0a) continue;
        const line = chunk.subarray(i + 1, end).toString("utf8");
        end = i;
        if (line && match(line)) {
          found.push(line);
          if (found.length >= count) break;
        }
      }
      carry = chunk.subarray(0, end);
    }
    if (pos === 0 && found.length < count && carry.length) {
      const line = carry.toString("utf8");
      if (match(line)) found.push(line);
    }
    return found.reverse();
  } finally {
    await handle.close();
  }
}
