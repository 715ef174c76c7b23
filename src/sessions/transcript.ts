/**
 * Append-only JSONL transcripts, one file per session
 * (`<stateDir>/agents/<agentId>/sessions/<sessionId>.jsonl`, reference §2.5 format).
 *
 * Line 1 is a `session` header; then `message` lines (user / assistant / toolResult) and
 * `delivery` lines (what the outbox did with a reply: sent or suppressed by policy).
 * A torn last line (process killed mid-write) is skipped by readers and fenced off by a newline
 * before the next append, so one bad write never corrupts later lines.
 *
 * Hot path (measured in bench/): every run reads the session's last messages and every message
 * appends up to three lines, so recently used files keep an open append handle (LRU) and their
 * last messages in memory (LRU), and appends go straight to the page cache (see doWrite). Files
 * are only ever appended through this store while their session is live, which is what keeps the
 * in-memory tail equal to the file's.
 */
import { randomUUID } from "node:crypto";
import { promises as fs, writeSync } from "node:fs";
import path from "node:path";
import type pino from "pino";
import { deepFreeze } from "../util/freeze.js";
import { BoundedMap } from "../util/bounded-map.js";

/**
 * Messages kept in memory per transcript: the runtime's history window (60) and a few more.
 * Every cached message is live heap that each full collection walks (bench/); longer reads
 * (sessions_history, chat.history) go to the file.
 */
const TAIL_MESSAGES = 64;
/** Transcripts whose tails stay cached (least recently used dropped first). */
const MAX_TAILS = 2000;
/** A synchronous append slower than this is a slow one (a slow or remote disk blocks the event loop). */
const SLOW_SYNC_WRITE_MS = 20;
/** Appends whose times are remembered (one bit each). */
const RECENT_WRITES = 16;
/**
 * Appends turn asynchronous for good once this many of the last RECENT_WRITES were slow. One
 * slow write is not a slow disk: on a busy host the process is now and then descheduled
 * mid-write, and a single 22 ms write under load (bench/, a loaded 2-vCPU host) used to send
 * every later append of the process through the thread pool, behind SQLite.
 */
const SLOW_WRITES_TO_SWITCH = 4;
/** Append handles kept open (least recently used closed first). */
const MAX_OPEN_FILES = 1024;
/**
 * Files whose FileState is kept (least recently appended forgotten first). Every session, `/new`,
 * hook and sub-agent writes a file of its own: kept for every file ever written, the state of a
 * daemon that runs for months grew without end (~0.5 KB a file).
 */
export const MAX_KNOWN_FILES = 4096;

/**
 * What the store knows of a file it appended to: that its header is written (or its torn tail
 * fenced off), so appends go straight in, and its last message line, the next one's parent. A
 * file forgotten (MAX_KNOWN_FILES) is prepared again at its next append, which reads both back.
 */
interface FileState {
  lastId: string | null;
  /** The store's append count at the file's latest append (tells a read that raced an append). */
  appendedAt: number;
}

interface Tail {
  messages: TranscriptMessage[];
  /** The cached messages are all the file's messages. */
  complete: boolean;
}

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
  /** Least recently appended first. */
  private readonly files = new Map<string, FileState>();
  private readonly chains = new Map<string, Promise<unknown>>();
  private readonly tails = new BoundedMap<string, Tail>(MAX_TAILS);
  private readonly handles = new Map<string, Promise<fs.FileHandle>>();
  /** The handles of `handles` that have opened, for synchronous appends. */
  private readonly open = new Map<string, fs.FileHandle>();
  /** Appends are written synchronously until SLOW_WRITES_TO_SWITCH of the last RECENT_WRITES were slow. */
  syncWrites = true;
  /** One bit per recent synchronous append, newest lowest: set for a slow one. */
  private recentSlow = 0;
  /** Lines appended in this process, to any file. */
  private appends = 0;
  private readonly now: () => number;

  constructor(private readonly opts: { log?: pino.Logger; /** Times appends (tests). */ now?: () => number } = {}) {
    this.now = opts.now ?? (() => performance.now());
  }

  /** Files whose state is kept (tests, metrics). */
  get knownFiles(): number {
    return this.files.size;
  }

  async appendMessage(ref: TranscriptRef, message: TranscriptMessage): Promise<string> {
    const id = randomUUID().slice(0, 8);
    // Its parent is set as it is written (see encode): the line written before it in the file.
    await this.write(ref, { type: "message", id, parentId: null, timestamp: new Date(message.timestamp).toISOString(), message });
    return id;
  }

  async appendDelivery(ref: TranscriptRef, record: DeliveryRecord): Promise<void> {
    await this.write(ref, { type: "delivery", id: randomUUID().slice(0, 8), timestamp: new Date().toISOString(), ...record });
  }

  /**
   * The newest `limit` messages other than tool results (R8): reads further back until filtering
   * leaves `limit` (or the whole file was read), since a run of tool rounds can hold any number.
   */
  async readMessagesWithoutToolResults(file: string, limit: number): Promise<TranscriptMessage[]> {
    for (let want = limit * 4; ; want *= 2) {
      const read = await this.readMessages(file, want);
      const selected = read.filter((m) => m.role !== "toolResult");
      if (selected.length >= limit || read.length < want) return selected.slice(-limit);
    }
  }

  /** The last `limit` messages (all message lines when limit is undefined). */
  async readMessages(file: string, limit?: number): Promise<TranscriptMessage[]> {
    await this.chains.get(file);
    if (limit !== undefined && limit <= 0) return [];
    const cached = this.tails.get(file);
    if (cached && (cached.complete || (limit !== undefined && cached.messages.length >= limit))) {
      return limit === undefined ? cached.messages.slice() : cached.messages.slice(-limit);
    }
    const version = this.files.get(file)?.appendedAt ?? 0;
    const out = limit === undefined ? (await readAllLines(file)).flatMap((line) => messageOf(line) ?? []) : await readLastLines(file, limit, messageOf);
    // Fewer messages than asked for means the whole file was read. A line appended while reading
    // could be missing from what was read, so the tail is cached only if none was.
    if ((this.files.get(file)?.appendedAt ?? 0) === version && !this.chains.has(file)) {
      const complete = (limit === undefined || out.length < limit) && out.length <= TAIL_MESSAGES;
      this.tails.set(file, { messages: out.slice(-TAIL_MESSAGES).map(deepFreeze), complete });
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

  /** Flush, then close the append handles (the store stays usable; handles reopen on demand). */
  async close(): Promise<void> {
    await this.flush();
    const handles = [...this.handles.values()];
    this.handles.clear();
    this.open.clear();
    await Promise.all(handles.map((h) => h.then((fh) => fh.close()).catch(() => undefined)));
  }

  private write(ref: TranscriptRef, line: TranscriptLine): Promise<void> {
    // The common case — a known file, its handle open, nothing queued before this line — is
    // written synchronously, without the promise chain (three appends a message, bench/).
    const state = this.syncWrites && !this.chains.has(ref.path) ? this.files.get(ref.path) : undefined;
    const open = state && this.open.get(ref.path);
    if (open) {
      try {
        this.touchHandle(ref.path);
        this.append(ref.path, state, open, line, "");
        return Promise.resolve();
      } catch (err) {
        return Promise.reject(err);
      }
    }
    const prev = this.chains.get(ref.path) ?? Promise.resolve();
    const run = prev.then(() => this.doWrite(ref, line));
    const tracked = run.catch(() => undefined).finally(() => {
      if (this.chains.get(ref.path) === tracked) this.chains.delete(ref.path);
    });
    this.chains.set(ref.path, tracked);
    return run;
  }

  private async doWrite(ref: TranscriptRef, line: TranscriptLine): Promise<void> {
    // Kept only once the header (or the fence) is in the file (afterAppend): a first write that
    // failed leaves the file to be prepared again, or its header would be lost for good.
    let state = this.files.get(ref.path);
    let prefix = "";
    if (!state) {
      const prepared = await this.prepare(ref);
      prefix = prepared.prefix;
      if (prepared.created) this.tails.set(ref.path, { messages: [], complete: true });
      state = { lastId: prepared.lastId, appendedAt: 0 };
    }
    const handle = await this.handleFor(ref.path);
    if (this.syncWrites) {
      this.append(ref.path, state, handle, line, prefix);
    } else {
      const { json, bytes } = encode(line, prefix, state);
      try {
        for (let off = 0; off < bytes.length; ) off += (await handle.write(bytes, off, bytes.length - off, null)).bytesWritten;
      } catch (err) {
        this.forgetAfterFailedWrite(ref.path);
        throw err;
      }
      this.afterAppend(ref.path, state, line, json);
    }
  }

  /**
   * One write(2) of a few hundred bytes into the page cache: cheaper on the event loop than a
   * thread-pool round trip that queues behind SQLite (+25% inbound throughput, bench/). A disk
   * slow enough to make that visible switches this store to asynchronous writes.
   */
  private append(file: string, state: FileState, handle: fs.FileHandle, line: TranscriptLine, prefix: string): void {
    const { json, bytes } = encode(line, prefix, state);
    const started = this.now();
    try {
      for (let off = 0; off < bytes.length; ) off += writeSync(handle.fd, bytes, off, bytes.length - off, null);
    } catch (err) {
      this.forgetAfterFailedWrite(file);
      throw err;
    }
    this.noteWriteTime(this.now() - started);
    this.afterAppend(file, state, line, json);
  }

  /**
   * A write that failed may have put part of its line in the file (a disk that fills up mid-write
   * takes what fits, then refuses the rest). Appended straight after it, the next line was glued to
   * that fragment and lost with it; forgotten, the file is prepared again at its next append, which
   * fences the fragment off and finds the last whole message line, the next one's parent.
   */
  private forgetAfterFailedWrite(file: string): void {
    this.files.delete(file);
  }

  private noteWriteTime(ms: number): void {
    const slow = ms > SLOW_SYNC_WRITE_MS;
    this.recentSlow = ((this.recentSlow << 1) | (slow ? 1 : 0)) & ((1 << RECENT_WRITES) - 1);
    if (!slow || bitCount(this.recentSlow) < SLOW_WRITES_TO_SWITCH) return;
    this.syncWrites = false;
    this.opts.log?.warn(
      { slowWrites: SLOW_WRITES_TO_SWITCH, ofLast: RECENT_WRITES, lastMs: Math.round(ms) },
      `transcript appends are slow (over ${SLOW_SYNC_WRITE_MS} ms): writing them through the thread pool from now on, so they no longer block the event loop`,
    );
  }

  /** A line is in the file: note it in the file's state, now the most recently used, and extend the cached tail. */
  private afterAppend(file: string, state: FileState, line: TranscriptLine, json: string): void {
    state.appendedAt = ++this.appends;
    // A line that never reached the file is no one's parent.
    if (line.type === "message") state.lastId = line.id;
    this.files.delete(file);
    this.files.set(file, state);
    if (this.files.size > MAX_KNOWN_FILES) this.forgetOne();
    const tail = line.type === "message" ? this.tails.get(file) : undefined;
    if (tail) {
      // A copy as read from disk would be: callers' objects are neither kept nor shared.
      tail.messages.push(deepFreeze((JSON.parse(json) as { message: TranscriptMessage }).message));
      if (tail.messages.length > TAIL_MESSAGES) {
        tail.messages.shift();
        tail.complete = false;
      }
    }
  }

  /**
   * Drops the state of the least recently appended file with no append queued (one whose append
   * is under way keeps it: the state is what that append links to and counts in).
   */
  private forgetOne(): void {
    for (const file of this.files.keys()) {
      if (this.chains.has(file)) continue;
      this.files.delete(file);
      return;
    }
  }

  /** Marks `file`'s handle most recently used; returns it if there is one. */
  private touchHandle(file: string): Promise<fs.FileHandle> | undefined {
    const handle = this.handles.get(file);
    if (handle) {
      this.handles.delete(file);
      this.handles.set(file, handle);
    }
    return handle;
  }

  /** An append handle for `file` (LRU); an evicted handle is closed once its pending writes ended. */
  private handleFor(file: string): Promise<fs.FileHandle> {
    const existing = this.touchHandle(file);
    if (existing) return existing;
    const handle = fs.open(file, "a");
    this.handles.set(file, handle);
    handle.then(
      (fh) => {
        if (this.handles.get(file) === handle) this.open.set(file, fh);
      },
      () => {
        if (this.handles.get(file) === handle) this.handles.delete(file);
      },
    );
    if (this.handles.size > MAX_OPEN_FILES) {
      const [oldest, old] = this.handles.entries().next().value as [string, Promise<fs.FileHandle>];
      this.handles.delete(oldest);
      this.open.delete(oldest);
      void Promise.resolve(this.chains.get(oldest))
        .then(() => old)
        .then((fh) => fh.close())
        .catch(() => undefined);
    }
    return handle;
  }

  /**
   * First write to a file in this process (or since the store forgot it): create it with a header,
   * or fence off a torn tail and find the message line the next one follows.
   */
  private async prepare(ref: TranscriptRef): Promise<{ prefix: string; created: boolean; lastId: string | null }> {
    const header = (): string => `${JSON.stringify({ type: "session", version: 1, id: ref.sessionId, key: ref.key, timestamp: new Date().toISOString() } satisfies TranscriptLine)}\n`;
    const handle = await fs.open(ref.path, "r").catch(() => undefined);
    if (!handle) {
      await fs.mkdir(path.dirname(ref.path), { recursive: true });
      return { prefix: header(), created: true, lastId: null };
    }
    let prefix: string;
    try {
      const { size } = await handle.stat();
      // Created, then killed before its first write (the append handle opens the file a thread-pool
      // round trip before the header goes in with the first line): it still needs its header.
      if (size === 0) return { prefix: header(), created: true, lastId: null };
      const buf = Buffer.alloc(1);
      await handle.read(buf, 0, 1, size - 1);
      prefix = buf[0] === 0x0a ? "" : "\n";
    } finally {
      await handle.close();
    }
    const [lastId = null] = await readLastLines(ref.path, 1, messageIdOf);
    return { prefix, created: false, lastId };
  }
}

/** The message of a message line; a torn one (a crash mid-append) is no message, and does not count toward a limit. */
function messageOf(line: string): TranscriptMessage | undefined {
  if (!line.startsWith('{"type":"message"')) return undefined;
  const parsed = parseLine(line);
  return parsed?.type === "message" ? parsed.message : undefined;
}

function messageIdOf(line: string): string | undefined {
  if (!line.startsWith('{"type":"message"')) return undefined;
  const parsed = parseLine(line);
  return parsed?.type === "message" ? parsed.id : undefined;
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
 * Reads backwards in 64 KiB blocks until `count` lines have given a value (`pick`), so the cost
 * of `chat.history {limit}` depends on the limit, not on the transcript's length.
 */
async function readLastLines<T>(file: string, count: number, pick: (line: string) => T | undefined): Promise<T[]> {
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
    const found: T[] = [];
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
        const value = line ? pick(line) : undefined;
        if (value !== undefined) {
          found.push(value);
          if (found.length >= count) break;
        }
      }
      carry = chunk.subarray(0, end);
    }
    if (pos === 0 && found.length < count && carry.length) {
      const value = pick(carry.toString("utf8"));
      if (value !== undefined) found.push(value);
    }
    return found.reverse();
  } finally {
    await handle.close();
  }
}

/**
 * A transcript line as written: its JSON (the tail's copy is parsed from it) and the bytes. A
 * message line's parent is set here, as the file's appends are serialised: the one before it.
 */
function encode(line: TranscriptLine, prefix: string, file: FileState): { json: string; bytes: Buffer } {
  if (line.type === "message") line.parentId = file.lastId;
  const json = JSON.stringify(line);
  return { json, bytes: Buffer.from(`${prefix}${json}\n`, "utf8") };
}

function bitCount(bits: number): number {
  let n = 0;
  for (let b = bits; b; b &= b - 1) n++;
  return n;
}
