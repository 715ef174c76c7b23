/**
 * Turns what a model typed (a key, a sessionId, a label) into a stored session the requester may
 * see, or the error result to hand back. A restricted (sandboxed) requester learns nothing about
 * sessions it cannot see: every failure becomes the same forbidden message.
 */
import type { App } from "../app.js";
import type { SessionEntry } from "../sessions/entry.js";
import { displayKey, RESERVED_KEYS } from "../sessions/keys.js";
import { SessionNotFoundError } from "../sessions/session-store.js";
import { agentToAgentForbidden, sandboxForbidden, visibilityOf, type SessionView } from "./visibility.js";

export type TargetResult = { ok: true; key: string; entry: SessionEntry } | { ok: false; status: "error" | "forbidden"; error: string };

export interface TargetInput {
  sessionKey?: string;
  label?: string;
}

export function resolveTarget(app: App, view: SessionView, input: TargetInput, action: "history" | "messaging"): TargetResult {
  const shown = input.sessionKey ?? input.label ?? "";
  const fail = (error: string): TargetResult => (view.restricted ? { ok: false, status: "forbidden", error: sandboxForbidden(shown) } : { ok: false, status: "error", error });
  if (input.sessionKey && input.label) return { ok: false, status: "error", error: "Provide either sessionKey or label (not both)." };
  let entry: SessionEntry | undefined;
  if (input.label !== undefined) {
    // A restricted requester searches only its own children, so a clash elsewhere leaks nothing.
    const hits = app.sessions.list({ label: input.label, limit: 2, where: (e) => addressable(app, e.key) && (!view.restricted || e.spawnedBy === view.requesterKey) });
    if (hits.length > 1) return { ok: false, status: "error", error: `Multiple sessions found with label: ${input.label} (${hits.map((h) => displayKey(h.key)).join(", ")})` };
    entry = hits[0];
    if (!entry) return fail(`No session found with label: ${input.label}`);
  } else {
    const ref = input.sessionKey?.trim() ?? "";
    if (!ref) return { ok: false, status: "error", error: "sessionKey required" };
    const lowered = ref.toLowerCase();
    // R6: reserved keys are never addressable; under scope=global "main" already means the bucket.
    if (RESERVED_KEYS.has(lowered)) return fail(`unknown session: ${ref}`);
    let key: string;
    try {
      key = app.resolveSessionRef(ref, view.requesterAgentId);
    } catch (err) {
      if (err instanceof SessionNotFoundError) return fail(`Session not found: ${ref} (use the full sessionKey from sessions_list)`);
      throw err;
    }
    entry = app.sessions.get(key);
    // Keys resolve without a lookup (they need not exist yet); a tool needs the session itself.
    if (!entry || !addressable(app, key)) return fail(`unknown session: ${ref}`);
  }
  const visibility = visibilityOf(view, entry);
  if (!visibility.visible) {
    return { ok: false, status: "forbidden", error: visibility.reason === "sandbox" ? sandboxForbidden(shown) : agentToAgentForbidden(visibility.reason, action) };
  }
  return { ok: true, key: entry.key, entry };
}

/**
 * R6: the reserved sessions are nobody's to address — by key, sessionId or label alike — except
 * `global` where it is the main bucket (scope=global), reached as "main".
 */
function addressable(app: App, key: string): boolean {
  return !RESERVED_KEYS.has(key) || (key === "global" && app.config.session.scope === "global");
}
