/**
 * Hostile gateway traffic: thousands of generated frames — not JSON, JSON of the wrong shape,
 * request frames with unknown or known methods and arbitrary, half-valid or hostile params,
 * strings holding lone surrogates, binary and oversized frames — on one authenticated
 * connection, and random first frames on fresh connections. Every frame gets a well-formed
 * response (ok, or an error with a known code and a message) within a bound, never UNAVAILABLE
 * (in this harness that code can only mean an exception escaped a handler); the response carries
 * the frame's own id, and a frame without a usable id gets INVALID_REQUEST; a frame with a lone
 * surrogate in its id, method or params gets INVALID_REQUEST; no error escapes the daemon to the
 * process (it runs in this process); the connection and the daemon stay up; afterwards the store
 * holds only well-formed session entries.
 */
import fc from "fast-check";
import { inspect } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Params } from "../../src/gateway/protocol.js";
import { startHarness, type Harness } from "../helpers/harness.js";
import { FUZZ_SEED, hostileString, hostileValue, mostly, shapedLike } from "../helpers/hostile.js";
import { RawGateway, type ResponseFrame } from "../helpers/raw-gateway.js";
import { RecordingAdapter } from "../helpers/recording-adapter.js";
import { checkState } from "../helpers/state-check.js";

const TOKEN = "fuzz-gateway-token-1234567890";
const MAX_PAYLOAD = 64 * 1024;
const FRAME_CASES = 3000;
const HANDSHAKE_CASES = 300;
const CASE_BOUND_MS = 5000;
const ERROR_CODES = new Set(["INVALID_REQUEST", "UNAUTHORIZED", "FORBIDDEN", "NOT_FOUND", "UNAVAILABLE", "AGENT_TIMEOUT"]);
const METHODS = Object.keys(Params);

/**
 * Errors that escaped the daemon to the process. The harness runs the daemon in this process, so
 * a throw from a timer or an unawaited promise lands here; in production it would kill the daemon
 * (uncaughtException) or be logged and forgotten (unhandledRejection) — a crash either way, which
 * the answers alone do not show: the frame that caused it may still have been answered.
 */
const escaped: string[] = [];
const onUncaught = (err: unknown) => void escaped.push(`uncaughtException: ${inspect(err).slice(0, 600)}`);
const onRejection = (reason: unknown) => void escaped.push(`unhandledRejection: ${inspect(reason).slice(0, 600)}`);

/** Reported once, by the test during which they escaped. */
function assertNothingEscaped(after: string): void {
  const found = escaped.splice(0);
  if (found.length) throw new Error(`${found.length} error(s) escaped the daemon to the process (a crash), noticed after ${after}; the first: ${found[0]}`);
}

let h: Harness;
beforeAll(async () => {
  process.on("uncaughtException", onUncaught);
  process.on("unhandledRejection", onRejection);
  h = await startHarness({
    config: { gateway: { auth: { token: TOKEN }, maxPayload: MAX_PAYLOAD }, agents: { defaults: { runTimeoutSeconds: 5 } } },
    adapters: [new RecordingAdapter("telegram"), new RecordingAdapter("discord"), new RecordingAdapter("whatsapp")],
  });
});
afterAll(async () => {
  try {
    await h?.stop();
    assertNothingEscaped("the daemon stopped");
  } finally {
    process.off("uncaughtException", onUncaught);
    process.off("unhandledRejection", onRejection);
  }
});

const sessionKey = fc.oneof(hostileString, fc.constantFrom("main", "agent:main:main", "agent:main:telegram:group:-100123", "agent:main:discord:channel:42", "agent:main:webchat:direct:op"), fc.stringMatching(/^agent:main:(telegram|discord|whatsapp):(group|channel|direct):[a-z0-9-]{1,12}$/));
const text = fc.oneof(fc.string({ minLength: 1, maxLength: 60 }), hostileString);
const key = fc.string({ minLength: 1, maxLength: 12 }).map((s) => `k-${s}`);

/** Params that mostly pass validation, so the handlers themselves meet hostile values. */
const plausible: Record<string, fc.Arbitrary<Record<string, unknown>>> = {
  "sessions.list": fc.record({ limit: mostly(fc.integer({ min: 1, max: 300 })), activeMinutes: mostly(fc.integer({ min: 1, max: 1000 })), kinds: mostly(fc.subarray(["main", "group", "cron", "hook", "node", "other"])), search: mostly(text), label: mostly(text), spawnedBy: mostly(sessionKey), messageLimit: mostly(fc.integer({ min: 0, max: 50 })) }, { requiredKeys: [] }),
  "sessions.resolve": fc.record({ key: mostly(sessionKey), sessionId: mostly(text), label: mostly(text) }, { requiredKeys: [] }),
  "sessions.patch": fc.record({ key: mostly(sessionKey), sendPolicy: mostly(fc.constantFrom("allow", "deny", null)), label: mostly(fc.option(fc.string({ minLength: 1, maxLength: 64 }))), model: mostly(fc.constantFrom("fake/m", "nope/x", "m", null)), thinkingLevel: mostly(fc.constantFrom("low", "high", null)) }, { requiredKeys: ["key"] }),
  "sessions.reset": fc.record({ key: mostly(sessionKey) }),
  "sessions.delete": fc.record({ key: mostly(sessionKey), deleteTranscript: mostly(fc.boolean()) }, { requiredKeys: ["key"] }),
  "chat.history": fc.record({ sessionKey: mostly(sessionKey), limit: mostly(fc.integer({ min: 1, max: 1000 })) }, { requiredKeys: ["sessionKey"] }),
  "chat.send": fc.record({ sessionKey: mostly(sessionKey), message: mostly(text), idempotencyKey: mostly(key) }),
  agent: fc.record({ message: mostly(text), idempotencyKey: mostly(key), sessionKey: mostly(sessionKey), deliver: mostly(fc.boolean()), channel: mostly(fc.constantFrom("telegram", "discord", "webchat", "last")), to: mostly(text), label: mostly(fc.string({ minLength: 1, maxLength: 64 })) }, { requiredKeys: ["message", "idempotencyKey"] }),
  "agent.wait": fc.record({ runId: mostly(key), timeoutMs: fc.integer({ min: 0, max: 200 }) }),
  send: fc.record({ to: mostly(text), message: mostly(text), channel: mostly(fc.constantFrom("telegram", "discord", "whatsapp", "webchat")), idempotencyKey: mostly(key), sessionKey: mostly(sessionKey) }, { requiredKeys: ["to", "message", "channel", "idempotencyKey"] }),
  health: fc.constant({}),
};

/** Params shaped like the method's own (plausible, or some keys with hostile values), or anything at all. */
function paramsFor(method: string): fc.Arbitrary<unknown> {
  const schema = Object.hasOwn(Params, method) ? (Params as Record<string, { shape?: Record<string, unknown> }>)[method] : undefined;
  const keys = schema?.shape ? Object.keys(schema.shape) : [];
  return fc.oneof(
    { weight: 6, arbitrary: Object.hasOwn(plausible, method) ? plausible[method] : shapedLike(keys) },
    { weight: 2, arbitrary: shapedLike(keys) },
    { weight: 1, arbitrary: hostileValue },
    { weight: 1, arbitrary: fc.constant(undefined) },
  );
}

type Frame = { kind: "text"; data: string } | { kind: "binary"; data: Buffer };

let seq = 0;

/** A request frame's text, under a fresh id or else `badId`. */
function textFrame(method: string, params: unknown, extra?: unknown, badId?: string): Frame {
  const id = `f${++seq}`;
  // agent.wait legitimately waits as long as asked (30 s by default) for a run that may come;
  // keep each case bounded by asking for at most 200 ms.
  if (method === "agent.wait" && params && typeof params === "object" && !Array.isArray(params)) {
    const p = params as { timeoutMs?: unknown };
    if (p.timeoutMs === undefined) p.timeoutMs = 200;
    else if (typeof p.timeoutMs === "number") p.timeoutMs = Math.min(Math.abs(p.timeoutMs), 200);
  }
  const frame: Record<string, unknown> = { type: "req", id: badId ?? id, method, ...(params === undefined ? {} : { params }) };
  if (extra !== undefined) frame.extra = extra;
  // JSON.stringify writes a lone surrogate as a \uXXXX escape, so it survives the UTF-8 wire.
  return { kind: "text", data: JSON.stringify(frame) };
}

const requestFrame = fc
  .tuple(fc.oneof({ weight: 4, arbitrary: fc.constantFrom(...METHODS) }, { weight: 1, arbitrary: hostileString }), fc.option(hostileValue, { nil: undefined }))
  .chain(([method, extra]) => paramsFor(method).map((params): Frame => textFrame(method, params, extra)));

/**
 * Request frames that would pass validation but for one string holding a lone surrogate — mostly
 * a param value (so that without the boundary check it would reach handlers and the store), or
 * a param name, the method or the id.
 */
const loneSurrogate = fc
  .tuple(fc.string({ maxLength: 6 }), fc.constantFrom("\ud800", "\udbff", "\udc00", "\udfff"), fc.string({ maxLength: 6 }))
  .map(([a, s, b]) => `${a}${s}${b}`);
const loneSurrogateFrame: fc.Arbitrary<Frame> = fc
  .tuple(fc.constantFrom(...Object.keys(plausible)), fc.constantFrom("value", "value", "value", "name", "method", "id"), loneSurrogate, fc.nat())
  .chain(([method, where, bad, pick]) =>
    plausible[method].map((plain): Frame => {
      const params: Record<string, unknown> = { ...plain };
      if (where === "name") params[bad] = "x";
      if (where === "value") {
        // A param that holds a string already (or, failing that, one the method declares).
        const keys = Object.keys(params).filter((k) => typeof params[k] === "string");
        const declared = Object.keys((Params as Record<string, { shape: Record<string, unknown> }>)[method].shape);
        const candidates = keys.length ? keys : declared.length ? declared : ["x"];
        params[candidates[pick % candidates.length]] = bad;
      }
      if (where === "method") return textFrame(`${method}${bad}`, params);
      return textFrame(method, params, undefined, where === "id" ? `id-${bad}` : undefined);
    }),
  );

const anyFrame: fc.Arbitrary<Frame> = fc.oneof(
  { weight: 12, arbitrary: requestFrame },
  { weight: 2, arbitrary: loneSurrogateFrame },
  { weight: 1, arbitrary: fc.string({ maxLength: 200 }).map((data): Frame => ({ kind: "text", data })) },
  { weight: 1, arbitrary: hostileValue.map((v): Frame => ({ kind: "text", data: JSON.stringify(v) ?? "null" })) },
  { weight: 1, arbitrary: shapedLike(["type", "id", "method", "params"]).map((v): Frame => ({ kind: "text", data: JSON.stringify(v) })) },
  { weight: 1, arbitrary: fc.uint8Array({ maxLength: 64 }).map((b): Frame => ({ kind: "binary", data: Buffer.from(b) })) },
  { weight: 1, arbitrary: fc.integer({ min: MAX_PAYLOAD + 1, max: MAX_PAYLOAD * 2 }).map((n): Frame => ({ kind: "text", data: JSON.stringify({ type: "req", id: `big${n}`, method: "health", params: { pad: "x".repeat(n) } }) })) },
);

const show = (frame: Frame) => (frame.kind === "text" ? frame.data.slice(0, 300) : `<binary ${frame.data.toString("hex").slice(0, 128)}>`);

/** The id the server can read from a frame: a string `id` in a JSON object, as it decodes the UTF-8 wire. */
type IdRule = { usable: true; id: string } | { usable: false; why: string; expected: string; allows: (id: string) => boolean };

/**
 * interfaces §3: a response carries its request's id ("id": "<same>"). A frame the server cannot
 * take an id from — binary, not JSON, no string id — is still answered, with INVALID_REQUEST
 * ("bad JSON … → an error response naming the problem"), under the empty id; for text that is not
 * JSON the server may pick the id out of the text instead (best effort), and an id holding a lone
 * surrogate, which the boundary refuses, may be echoed or left empty.
 */
function idRule(frame: Frame): IdRule {
  if (frame.kind === "binary") return { usable: false, why: "a binary frame", expected: "the empty id", allows: (id) => id === "" };
  const text = Buffer.from(frame.data, "utf8").toString("utf8");
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return { usable: false, why: "text that is not JSON", expected: "the empty id or one found in the text", allows: (id) => id === "" || new RegExp(`"id"\\s*:\\s*"${id.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}"`).test(text) };
  }
  const id = value !== null && typeof value === "object" && !Array.isArray(value) ? (value as { id?: unknown }).id : undefined;
  if (typeof id !== "string") return { usable: false, why: "a frame without a string id", expected: "the empty id", allows: (got) => got === "" };
  if (isLoneSurrogateString(id)) return { usable: false, why: "an id holding a lone surrogate", expected: "the empty id or that id", allows: (got) => got === "" || got === id };
  return { usable: true, id };
}

/** What is wrong with the id (and, for a frame without a usable id, the code) of its answer. */
function answerIdProblem(frame: Frame, r: ResponseFrame): string | undefined {
  const rule = idRule(frame);
  if (rule.usable) return r.id === rule.id ? undefined : `the answer carries id ${JSON.stringify(r.id)}, not the frame's id ${JSON.stringify(rule.id)} (interfaces §3: a response carries its request's id): ${JSON.stringify(r).slice(0, 300)}`;
  if (!rule.allows(r.id)) return `the answer to ${rule.why} carries id ${JSON.stringify(r.id)}, expected ${rule.expected}: ${JSON.stringify(r).slice(0, 300)}`;
  if (r.ok || r.error?.code !== "INVALID_REQUEST") return `${rule.why} got ${JSON.stringify(r).slice(0, 300)}, not an INVALID_REQUEST error (interfaces §3: bad frames get an error response)`;
  return undefined;
}

/** The next response after index `from`; each wait bounded, so a missing answer fails with the frame rather than at the test timeout. */
async function nextAnswer(gw: RawGateway, from: number, what: string): Promise<ResponseFrame> {
  try {
    return await gw.response(null, CASE_BOUND_MS, from);
  } catch (err) {
    throw new Error(`no answer to ${what}: ${(err as Error).message}`);
  }
}

function wellFormed(r: ResponseFrame): string | undefined {
  if (r.type !== "res" || typeof r.id !== "string" || typeof r.ok !== "boolean") return `malformed response ${JSON.stringify(r).slice(0, 200)}`;
  if (r.ok) return r.payload === undefined ? `ok response without payload: ${JSON.stringify(r).slice(0, 200)}` : undefined;
  if (!r.error || !ERROR_CODES.has(r.error.code) || typeof r.error.message !== "string" || !r.error.message) return `bad error ${JSON.stringify(r.error).slice(0, 200)}`;
  // The gateway answers UNAVAILABLE deliberately only for a failed run or a failed delivery; in
  // this harness the model always answers and the adapters always deliver, so here UNAVAILABLE
  // can only be toErrorShape's fallback for an exception that escaped a handler — a bug.
  if (r.error.code === "UNAVAILABLE") return `UNAVAILABLE (an exception escaped a handler): ${JSON.stringify(r.error).slice(0, 300)}`;
  return undefined;
}

/** A string holding an unpaired UTF-16 surrogate (the test's own check, not the server's). */
function isLoneSurrogateString(s: string): boolean {
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c >= 0xd800 && c <= 0xdbff) {
      const next = s.charCodeAt(i + 1);
      if (next >= 0xdc00 && next <= 0xdfff) i++;
      else return true;
    } else if (c >= 0xdc00 && c <= 0xdfff) return true;
  }
  return false;
}

function holdsLoneSurrogate(value: unknown): boolean {
  if (typeof value === "string") return isLoneSurrogateString(value);
  if (value === null || typeof value !== "object") return false;
  return Object.entries(value).some(([k, v]) => isLoneSurrogateString(k) || holdsLoneSurrogate(v));
}

/**
 * Whether the frame, as the server decodes it (UTF-8 on the wire, so a literal lone surrogate
 * arrives as U+FFFD and only a \uD800-style JSON escape survives), holds a lone surrogate in
 * what the server reads: a request's id, method or params (unknown top-level fields are ignored),
 * or anywhere in a value that is not an object.
 */
function serverSeesLoneSurrogate(frame: Frame): boolean {
  if (frame.kind !== "text") return false;
  let value: unknown;
  try {
    value = JSON.parse(Buffer.from(frame.data, "utf8").toString("utf8"));
  } catch {
    return false;
  }
  if (value === null || typeof value !== "object" || Array.isArray(value)) return holdsLoneSurrogate(value);
  const { id, method, params } = value as Record<string, unknown>;
  return holdsLoneSurrogate([id, method, params]);
}

describe("gateway under hostile frames", () => {
  it(`fuzz: ${FRAME_CASES} generated frames on one connection each get a well-formed answer under the frame's own id (interfaces §3: "id": "<same>"; bad frames → an error response), nothing escapes to the process, the connection and daemon stay up`, async () => {
    const gw = await RawGateway.open(h.url);
    expect((await gw.handshake(TOKEN)).ok).toBe(true);
    let loneSurrogateFrames = 0;
    await fc.assert(
      fc.asyncProperty(anyFrame, async (frame) => {
        const before = gw.responses.length;
        gw.send(frame.data);
        // Frames are sent one at a time and every answer is awaited, so the next response is this
        // frame's: one under another id is a wrong answer, not someone else's.
        const first = await nextAnswer(gw, before, `frame ${show(frame)}`);
        const problem = wellFormed(first) ?? answerIdProblem(frame, first);
        if (problem) throw new Error(`${problem} for frame ${show(frame)}`);
        // No UTF-8 store can keep a lone surrogate: such a frame is refused at the boundary.
        if (serverSeesLoneSurrogate(frame)) {
          loneSurrogateFrames++;
          if (first.ok || first.error?.code !== "INVALID_REQUEST") throw new Error(`a frame with a lone surrogate got ${JSON.stringify(first).slice(0, 300)}, not INVALID_REQUEST: ${frame.kind === "text" ? frame.data.slice(0, 300) : ""}`);
        }
        // `agent` answers twice: the final answer must come too.
        if (first.ok && (first.payload as { status?: string })?.status === "accepted") {
          const final = await nextAnswer(gw, gw.responses.indexOf(first) + 1, `frame ${show(frame)} (its final answer)`);
          const p2 = wellFormed(final) ?? (final.id === first.id ? undefined : `the final answer carries id ${JSON.stringify(final.id)}, not ${JSON.stringify(first.id)} (interfaces §3: agent's second res has the same id)`);
          if (p2) throw new Error(`${p2} (final answer) for ${show(frame)}`);
        }
        if (gw.closed) throw new Error(`connection closed (${gw.closed.code} ${gw.closed.reason}) after ${show(frame)}`);
        assertNothingEscaped(`frame ${show(frame)}`);
      }),
      { numRuns: FRAME_CASES, seed: FUZZ_SEED, endOnFailure: true },
    );
    const ok = gw.responses.filter((r) => r.ok).length;
    console.info(`gateway fuzz: ${FRAME_CASES} frames → ${gw.responses.length} responses (${ok} ok, ${gw.responses.length - ok} errors: ${[...new Set(gw.responses.filter((r) => !r.ok).map((r) => r.error?.code))].join(", ")}; ${loneSurrogateFrames} with a lone surrogate)`);
    expect(ok).toBeGreaterThan(FRAME_CASES / 10);
    expect(loneSurrogateFrames).toBeGreaterThan(FRAME_CASES / 20);
    expect(gw.garbage).toEqual([]);
    const health = await (async () => {
      gw.send(JSON.stringify({ type: "req", id: "final-health", method: "health", params: {} }));
      return gw.response("final-health", CASE_BOUND_MS);
    })();
    expect(health.ok).toBe(true);
    gw.close();
    assertNothingEscaped("the closing health check");
  }, 120_000);

  it(`fuzz: ${HANDSHAKE_CASES} random first frames are refused with an error under their own id, then the socket closes (interfaces §3 handshake), or accepted only with the right token; nothing escapes to the process`, async () => {
    const firstFrame = fc.oneof(
      requestFrame,
      shapedLike(["minProtocol", "maxProtocol", "client", "role", "scopes", "auth", "nodeId"]).map((params): Frame => ({ kind: "text", data: JSON.stringify({ type: "req", id: "c", method: "connect", params }) })),
      fc.record({ token: mostly(fc.constantFrom(TOKEN, `${TOKEN}x`, TOKEN.slice(1), "", TOKEN.toUpperCase())) }).map(
        ({ token }): Frame => ({ kind: "text", data: JSON.stringify({ type: "req", id: "c", method: "connect", params: { minProtocol: 3, maxProtocol: 4, client: { id: "x", version: "1", platform: "p", mode: "m" }, auth: { token } } }) }),
      ),
      fc.string({ maxLength: 100 }).map((data): Frame => ({ kind: "text", data })),
    );
    await fc.assert(
      fc.asyncProperty(firstFrame, async (frame) => {
        const gw = await RawGateway.open(h.url);
        try {
          const before = gw.responses.length;
          gw.send(frame.data);
          const r = await nextAnswer(gw, before, `first frame ${show(frame)}`);
          const problem = wellFormed(r) ?? answerIdProblem(frame, r);
          if (problem) throw new Error(`${problem} for first frame ${show(frame)}`);
          const params = (() => {
            try {
              return JSON.parse(frame.kind === "text" ? frame.data : "{}") as { method?: string; params?: { auth?: { token?: unknown } } };
            } catch {
              return {};
            }
          })();
          if (r.ok) {
            // Only a connect carrying the exact token may succeed.
            expect(params.method).toBe("connect");
            expect(params.params?.auth?.token).toBe(TOKEN);
          } else {
            // Before the wait for the close: an error thrown while closing is the likelier cause of a socket left open.
            assertNothingEscaped(`first frame ${show(frame)}`);
            await gw.until(() => gw.closed !== undefined, CASE_BOUND_MS).catch((err: Error) => {
              throw new Error(`the socket stayed open after the refused first frame (interfaces §3: an error response, then the socket closes): ${err.message}; frame ${show(frame)}`);
            });
          }
          assertNothingEscaped(`first frame ${show(frame)}`);
        } finally {
          gw.close();
        }
      }),
      { numRuns: HANDSHAKE_CASES, seed: FUZZ_SEED + 1, endOnFailure: true },
    );
  }, 120_000);

  it("a value zod's own check throws on (a `length` that cannot become a number) is an INVALID_REQUEST naming why, in a frame's params, a connect's params and the frame itself; the connection stays up", async () => {
    const hostile = { length: { valueOf: 1, toString: 1 } };
    const gw = await RawGateway.open(h.url);
    gw.send(JSON.stringify({ type: "req", id: "c", method: "connect", params: { minProtocol: 3, maxProtocol: 4, client: { id: hostile, version: "1", platform: "p", mode: "m" } } }));
    expect(await gw.response("c", 5000)).toMatchObject({ ok: false, error: { code: "INVALID_REQUEST", message: expect.stringMatching(/could not be checked/) } });
    const ready = await RawGateway.open(h.url);
    expect((await ready.handshake(TOKEN)).ok).toBe(true);
    ready.send(JSON.stringify({ type: "req", id: "p", method: "sessions.patch", params: { key: hostile } }));
    expect(await ready.response("p", 5000)).toMatchObject({ ok: false, error: { code: "INVALID_REQUEST", message: expect.stringMatching(/could not be checked/) } });
    ready.send(JSON.stringify({ type: "req", id: hostile, method: "health", params: {} }));
    expect(await ready.response(null, 5000)).toMatchObject({ ok: false, error: { code: "INVALID_REQUEST" } });
    ready.send(JSON.stringify({ type: "req", id: "h", method: "health", params: {} }));
    expect((await ready.response("h", 5000)).ok).toBe(true);
    ready.close();
  });

  it("fuzz: after the hostile traffic every session entry in the store is well-formed (labels included: not blank, at most 64 characters)", async () => {
    await h.app.router.idle();
    await h.app.sessions.flush();
    await h.app.transcripts.flush();
    const { problems } = await checkState(h.stateDir);
    expect(problems).toEqual([]);
    assertNothingEscaped("the hostile traffic settled");
  });
});
