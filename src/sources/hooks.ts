/**
 * `POST /hooks/agent` (R4, R25): an authenticated webhook that runs a message in a `hook:<uuid>`
 * session (or the session it names) and answers 202 `{runId, sessionKey}` — or, with
 * `wait: true`, 200 with the outcome. A reply is delivered only when asked (`deliver`), through
 * the outbox, so the send policy applies.
 *
 * Answers: 404 when hooks are disabled, 401 for a missing or wrong token (Authorization: Bearer
 * or x-switchboard-token), 400 naming the problem for a bad body, 413 for an oversized one.
 *
 * Senders retry a delivery they got no answer for (a `wait` can take two minutes, longer than
 * many senders wait), so a hook may name itself: `idempotencyKey` in the body or an
 * `Idempotency-Key` header. A repeat is answered from the first run and runs nothing, delivers
 * nothing; across a restart, the reply's outbox id still keeps it from being delivered twice.
 */
import { randomUUID } from "node:crypto";
import { tokenMatches } from "../util/token-matches.js";
import type http from "node:http";
import type pino from "pino";
import { z } from "zod";
import type { App } from "../app.js";
import { describeZodError } from "../gateway/protocol.js";
import type { Gateway } from "../gateway/server.js";
import { replyText } from "../inbound/router.js";
import { normalizeDeliveryContext } from "../sessions/entry.js";
import { agentIdFromKey, displayKey, hookSessionKey, normalizeAgentId, parseAgentKey, RESERVED_KEYS } from "../sessions/keys.js";
import { deliveryContextOf, outboundTargetOf } from "../tools/delivery-route.js";
import { safeParse } from "../util/safe-parse.js";

export const HOOKS_PATH = "/hooks/agent";
export const MAX_BODY_BYTES = 256 * 1024;
/** `wait: true` answers within this, with status "timeout" if the run is still going. */
const HOOK_WAIT_MS = 120_000;
const MAX_IDEMPOTENCY_KEY_CHARS = 200;

const HookBody = z.strictObject({
  message: z.string({ error: "message required" }).trim().min(1, "message required"),
  sessionKey: z.string().trim().min(1).optional(),
  agentId: z.string().trim().min(1).optional(),
  deliver: z.boolean().optional(),
  channel: z.enum(["webchat", "telegram", "discord", "whatsapp"]).optional(),
  to: z.string().trim().min(1).optional(),
  accountId: z.string().trim().min(1).optional(),
  wait: z.boolean().optional(),
  idempotencyKey: z.string().trim().min(1).max(MAX_IDEMPOTENCY_KEY_CHARS).optional(),
});

class HttpProblem extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

export function registerHooksRoute(gateway: Gateway, app: App, log: pino.Logger): void {
  if (app.config.hooks.enabled && !app.config.hooks.token) log.warn("hooks.enabled without hooks.token: every hook request is refused (401)");
  gateway.route("POST", HOOKS_PATH, async (req, res) => {
    try {
      const answer = await handle(app, req, log);
      json(res, answer.status, answer.body);
    } catch (err) {
      if (!(err instanceof HttpProblem)) throw err;
      json(res, err.status, { error: err.message });
    }
  });
}

async function handle(app: App, req: http.IncomingMessage, log: pino.Logger): Promise<{ status: number; body: unknown }> {
  const { hooks } = app.config;
  if (!hooks.enabled) throw new HttpProblem(404, `hooks are disabled (set hooks.enabled and hooks.token to use ${HOOKS_PATH})`);
  if (!hooks.token || !tokenMatches(hooks.token, tokenOf(req))) {
    log.warn({ remote: req.socket.remoteAddress }, "hook request refused: bad or missing token");
    throw new HttpProblem(401, "invalid or missing hook token (Authorization: Bearer <hooks.token> or x-switchboard-token)");
  }
  let raw: unknown;
  try {
    raw = JSON.parse(await readBody(req));
  } catch (err) {
    if (err instanceof HttpProblem) throw err;
    throw new HttpProblem(400, `invalid JSON body: ${(err as Error).message}`);
  }
  const parsed = safeParse(HookBody, raw);
  if (!parsed.success) throw new HttpProblem(400, `invalid hook body: ${describeZodError(parsed.error)}`);
  const p = parsed.data;

  const idempotencyKey = p.idempotencyKey ?? idempotencyHeader(req);
  const runId = idempotencyKey ? `hook-key:${idempotencyKey}` : `hook-${randomUUID()}`;
  const first = app.runtime.get(runId);
  if (first) return answer(app, first.runId, first.sessionKey, p.wait === true, true);

  const askedAgent = hookAgent(app, p);
  const agentId = askedAgent ?? app.defaultAgentId;
  const sessionKey = p.sessionKey ? app.canonicalKey(p.sessionKey, agentId) : hookSessionKey(randomUUID());
  if (RESERVED_KEYS.has(sessionKey)) throw new HttpProblem(400, `sessionKey "${p.sessionKey}" is reserved`);
  if (p.channel && !p.to) throw new HttpProblem(400, "to is required with channel");
  const existing = app.sessions.get(sessionKey);
  const target = p.channel && p.to ? normalizeDeliveryContext({ channel: p.channel, to: p.to, accountId: p.accountId }) : deliveryContextOf(existing);
  if (p.deliver && !target) throw new HttpProblem(400, "deliver needs channel and to (the session has no chat route)");
  // A session keeps its agent (its transcript lives under it): running another is refused, not swapped.
  if (existing && askedAgent !== undefined && existing.agentId !== askedAgent) {
    throw new HttpProblem(409, `session "${displayKey(sessionKey)}" belongs to agent "${existing.agentId}", not "${askedAgent}"`);
  }

  // Checked before anything is stored: a refused hook leaves no session behind.
  if (!app.runtime.accepting) throw new HttpProblem(503, "the daemon is shutting down: hook not accepted, send it again once it is back");
  const runAgent = agentIdFromKey(sessionKey, existing?.agentId ?? agentId);
  if (!existing) await app.sessions.upsert(sessionKey, runAgent);
  // A concurrent repeat may have started the run meanwhile: start() then hands that one back.
  // A delivering hook's chat is the run's chat: what it spawns is announced there too (R37).
  const origin = p.deliver ? target : undefined;
  const { done, info } = app.runtime.start({ sessionKey, agentId: runAgent, message: p.message, runId, provenance: { kind: "external_user" }, sender: { id: "hook" }, ...(origin ? { origin } : {}) });
  if (p.deliver && target) {
    void done.then(async (outcome) => {
      const text = replyText(outcome);
      if (text) await app.outbox.enqueue({ id: `hook:${runId}`, sessionKey, target: outboundTargetOf(target), text, kind: "reply" });
    }).catch((err: unknown) => log.error({ err, runId }, "hook reply delivery failed"));
  }
  return answer(app, runId, info.sessionKey, p.wait === true, false);
}

/** 202 `{runId, sessionKey}`, or with `wait` 200 with the outcome; `repeat` marks a retried hook. */
async function answer(app: App, runId: string, sessionKey: string, wait: boolean, repeat: boolean): Promise<{ status: number; body: unknown }> {
  const shown = { runId, sessionKey: displayKey(sessionKey), ...(repeat ? { repeat: true } : {}) };
  if (!wait) return { status: 202, body: shown };
  const waited = await app.runtime.wait(runId, HOOK_WAIT_MS);
  const info = app.runtime.get(runId);
  return { status: 200, body: { ...shown, status: waited.status, ...(info?.reply !== undefined ? { reply: info.reply } : {}), ...(waited.error ? { error: waited.error } : {}) } };
}

function idempotencyHeader(req: http.IncomingMessage): string | undefined {
  const value = req.headers["idempotency-key"];
  const key = (Array.isArray(value) ? value[0] : value)?.trim();
  if (key && key.length > MAX_IDEMPOTENCY_KEY_CHARS) throw new HttpProblem(400, `Idempotency-Key longer than ${MAX_IDEMPOTENCY_KEY_CHARS} characters`);
  return key || undefined;
}

/**
 * The agent a hook asks for: `agentId`, else the agent its `sessionKey` names (undefined: neither).
 * Canonicalising drops the prefix of an internal key (`agent:ops:hook:x` is stored as `hook:x`),
 * so without this such a hook would run as the default agent.
 */
function hookAgent(app: App, p: z.infer<typeof HookBody>): string | undefined {
  const keyAgent = p.sessionKey ? parseAgentKey(p.sessionKey.toLowerCase())?.agentId : undefined;
  const requested = p.agentId ?? keyAgent;
  if (requested === undefined) return undefined;
  const agentId = normalizeAgentId(requested);
  if (keyAgent !== undefined && agentId !== normalizeAgentId(keyAgent)) throw new HttpProblem(400, `agentId "${p.agentId}" conflicts with sessionKey "${p.sessionKey}"`);
  if (!app.config.agents.list.some((a) => normalizeAgentId(a.id) === agentId)) throw new HttpProblem(400, `unknown agent id "${requested}"`);
  return agentId;
}

function tokenOf(req: http.IncomingMessage): string | undefined {
  const auth = req.headers.authorization;
  if (auth?.toLowerCase().startsWith("bearer ")) return auth.slice(7).trim();
  const header = req.headers["x-switchboard-token"];
  return Array.isArray(header) ? header[0] : header;
}

async function readBody(req: http.IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > MAX_BODY_BYTES) throw new HttpProblem(413, `body too large (max ${MAX_BODY_BYTES} bytes)`);
    chunks.push(chunk as Buffer);
  }
  return Buffer.concat(chunks).toString("utf8");
}

function json(res: http.ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { "content-type": "application/json; charset=utf-8" }).end(JSON.stringify(body));
}
