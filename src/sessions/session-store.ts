/**
 * Session entries: persisted through keyv, served from an in-memory index.
 *
 * The index is a Map kept in updatedAt order (an entry is re-inserted whenever it is touched), so
 * `list` walks it newest-first and stops at `limit` without sorting 100,000 rows per call.
 * Writes for one key are chained so the store always ends with the newest version.
 */
import { randomUUID } from "node:crypto";
import path from "node:path";
import type { KvSpace } from "../store/kv.js";
import { classifySessionKind, isValidAgentId, normalizeAgentId, type SessionKind } from "./keys.js";
import type { SessionEntry, SessionPatch } from "./entry.js";

export interface ListFilter {
  limit?: number;
  activeMinutes?: number;
  kinds?: readonly SessionKind[];
  spawnedBy?: string;
  label?: string;
  agentId?: string;
  search?: string;
  includeGlobal?: boolean;
  includeUnknown?: boolean;
  /** Archived sub-agent sessions (R40) are hidden unless asked for. */
  includeArchived?: boolean;
  /** Extra predicate applied before the limit (visibility rules). */
  where?: (entry: SessionEntry) => boolean;
}

export class SessionNotFoundError extends Error {
  constructor(readonly ref: string, kind: "key" | "sessionId" | "label" = "key") {
    super(kind === "key" ? `session not found: ${ref}` : `no session found with ${kind}: ${ref}`);
    this.name = "SessionNotFoundError";
  }
}

export class SessionStore {
  private readonly byKey = new Map<string, SessionEntry>();
  private readonly bySessionId = new Map<string, string>();
  private readonly writes = new Map<string, Promise<void>>();
  private lastStamp = 0;

  constructor(
    private readonly space: KvSpace<SessionEntry>,
    private readonly stateDir: string,
    private readonly now: () => number = Date.now,
  ) {}

  async load(): Promise<void> {
    const rows = await this.space.entries();
    rows.sort((a, b) => a[1].updatedAt - b[1].updatedAt);
    for (const [, entry] of rows) this.index(entry);
  }

  get size(): number {
    return this.byKey.size;
  }

  get(key: string): SessionEntry | undefined {
    return this.byKey.get(key);
  }

  require(key: string): SessionEntry {
    const entry = this.byKey.get(key);
    if (!entry) throw new SessionNotFoundError(key);
    return entry;
  }

  keyForSessionId(sessionId: string): string | undefined {
    return this.bySessionId.get(sessionId.trim());
  }

  /** Create the entry if missing, then merge `patch`; `null` values clear fields. */
  async upsert(key: string, agentId: string, patch: { [K in keyof SessionPatch]?: SessionPatch[K] | null } = {}): Promise<SessionEntry> {
    const { entry, written } = this.stage(key, agentId, patch);
    await written;
    return entry;
  }

  /**
   * upsert() whose new entry is visible (get, list) at once, with its store write still running:
   * a caller with other work to do meanwhile (the inbound router appending the transcript) awaits
   * `written` later instead of paying one commit on its critical path (bench/).
   */
  stage(key: string, agentId: string, patch: { [K in keyof SessionPatch]?: SessionPatch[K] | null } = {}): { entry: SessionEntry; written: Promise<void> } {
    // Every entry point checks its keys; this is the last line before a keyless entry is stored.
    if (!key.trim()) throw new Error(`session key must not be blank (agent ${agentId})`);
    const prev = this.byKey.get(key);
    const now = this.stamp(prev?.updatedAt);
    const next: SessionEntry = prev ? { ...prev } : { key, sessionId: randomUUID(), agentId, createdAt: now, updatedAt: now };
    for (const [field, value] of Object.entries(patch)) {
      if (value === null || value === undefined) {
        if (value === null) delete (next as unknown as Record<string, unknown>)[field];
      } else (next as unknown as Record<string, unknown>)[field] = value;
    }
    next.updatedAt = Math.max(now, typeof patch.updatedAt === "number" ? patch.updatedAt : 0);
    return { entry: next, written: this.commit(next, prev) };
  }

  /** New sessionId, token counters cleared; policy, labels and routes kept (reference §4.3). */
  async reset(key: string): Promise<SessionEntry> {
    const prev = this.require(key);
    const next: SessionEntry = { ...prev, sessionId: randomUUID(), updatedAt: this.stamp(prev.updatedAt), systemSent: false, abortedLastRun: false };
    delete next.inputTokens;
    delete next.outputTokens;
    delete next.totalTokens;
    delete next.contextTokens;
    await this.commit(next, prev);
    return next;
  }

  async delete(key: string): Promise<SessionEntry | undefined> {
    const prev = this.byKey.get(key);
    if (!prev) return undefined;
    this.byKey.delete(key);
    this.bySessionId.delete(prev.sessionId);
    await this.track(key, this.space.delete(key));
    return prev;
  }

  /** Newest first; filters applied before the limit. */
  list(filter: ListFilter = {}): SessionEntry[] {
    const limit = filter.limit ?? Number.POSITIVE_INFINITY;
    const cutoff = filter.activeMinutes ? this.now() - filter.activeMinutes * 60_000 : undefined;
    const kinds = filter.kinds?.length ? new Set(filter.kinds) : undefined;
    const search = filter.search?.trim().toLowerCase();
    const out: SessionEntry[] = [];
    const all = Array.from(this.byKey.values());
    for (let i = all.length - 1; i >= 0 && out.length < limit; i--) {
      const e = all[i];
      if (cutoff !== undefined && e.updatedAt < cutoff) break;
      if (e.key === "unknown" && !filter.includeUnknown) continue;
      if (e.key === "global" && filter.includeGlobal === false) continue;
      if (e.archivedAt !== undefined && !filter.includeArchived) continue;
      if (filter.spawnedBy !== undefined && e.spawnedBy !== filter.spawnedBy) continue;
      if (filter.label !== undefined && e.label !== filter.label) continue;
      if (filter.agentId !== undefined && e.agentId !== filter.agentId) continue;
      if (kinds && !kinds.has(classifySessionKind(e.key))) continue;
      if (search && !matchesSearch(e, search)) continue;
      if (filter.where && !filter.where(e)) continue;
      out.push(e);
    }
    return out;
  }

  transcriptPath(entry: Pick<SessionEntry, "agentId" | "sessionId">): string {
    // An entry stored before keys' agent ids were normalised may hold a path ("../../x"): its
    // files go where its normalised id's would, never outside <stateDir>/agents.
    const agentDir = isValidAgentId(entry.agentId) ? entry.agentId : normalizeAgentId(entry.agentId);
    return path.join(this.stateDir, "agents", agentDir, "sessions", `${entry.sessionId}.jsonl`);
  }

  /** Wait for every pending write (used on shutdown). */
  async flush(): Promise<void> {
    await Promise.all(this.writes.values());
  }

  private stamp(prev = 0): number {
    // Strictly increasing stamps keep the Map's insertion order equal to updatedAt order.
    const t = Math.max(this.now(), prev + 1, this.lastStamp + 1);
    this.lastStamp = t;
    return t;
  }

  private index(entry: SessionEntry): void {
    this.byKey.delete(entry.key);
    this.byKey.set(entry.key, entry);
    this.bySessionId.set(entry.sessionId, entry.key);
    if (entry.updatedAt > this.lastStamp) this.lastStamp = entry.updatedAt;
  }

  private async commit(next: SessionEntry, prev: SessionEntry | undefined): Promise<void> {
    if (prev && prev.sessionId !== next.sessionId) this.bySessionId.delete(prev.sessionId);
    this.index(next);
    await this.track(next.key, this.space.set(next.key, next));
  }

  /**
   * Writes are issued at once, in call order: the store commits in issue order (kv.ts), so a key's
   * writes land in order, and any later write — an outbox record, the inbound "done" mark — is
   * durable only after this one. Waiting for the previous write of the key first would put a whole
   * commit on the caller's path and break that cross-key order.
   */
  private track(key: string, write: Promise<void>): Promise<void> {
    const tracked = write.then(
      () => undefined,
      () => undefined,
    );
    this.writes.set(key, tracked);
    void tracked.then(() => {
      if (this.writes.get(key) === tracked) this.writes.delete(key);
    });
    return write;
  }
}

function matchesSearch(e: SessionEntry, q: string): boolean {
  return [e.key, e.sessionId, e.label, e.displayName].some((v) => v !== undefined && v.toLowerCase().includes(q));
}
