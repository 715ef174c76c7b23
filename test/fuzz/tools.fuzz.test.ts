/**
 * Hostile tool arguments: the session tools (sessions_list/history/send/spawn, agents_list) get
 * thousands of generated argument objects — mostly shaped like their own parameters with
 * plausible or hostile values, sometimes anything — from a plain and from a sandboxed session;
 * and, through real runs, the model "calls" tools with random argument text (bad JSON included).
 * Each call answers within a bound with a JSON result — an error is a `{status: "error" |
 * "forbidden", error}` result (the shape of spec R15/R16), never a throw: the runtime would turn
 * a throw into such a result, which hides it from the runs — whose message is the tool's own
 * words, not a JavaScript engine's; a missing or blank required string, a timeoutSeconds outside
 * 0..3600, or a value of the wrong type for any parameter is an error naming that field; runs
 * end; the store and the transcripts stay well-formed. Fixed cases and a property over every
 * declared parameter pin the parameter rules too.
 */
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { AgentTool } from "../../src/tools/types.js";
import { startHarness, type Harness } from "../helpers/harness.js";
import { FUZZ_SEED, hostileString, hostileValue, mostly, shapedLike } from "../helpers/hostile.js";
import { RecordingAdapter } from "../helpers/recording-adapter.js";
import { checkState } from "../helpers/state-check.js";
import { afterTool, features, outsideRun, settle, stepOf } from "../helpers/tool-driver.js";

const DIRECT_CASES = 1600;
const RUN_CASES = 120;
const WRONG_TYPE_CASES = 600;
const CASE_BOUND_MS = 10_000;
/** With sandbox mode "non-main", the main session is not sandboxed and a group session is. */
const MAIN = "agent:main:main";
const PLAIN = "agent:main:telegram:group:-100700";
const CHILD = "agent:main:subagent:11111111-2222-3333-4444-555555555555";

let h: Harness;
let runArgs = "{}";
let runTool = "sessions_list";
beforeAll(async () => {
  h = await startHarness({
    config: { agents: { defaults: { sandbox: { mode: "non-main", sessionToolsVisibility: "spawned" }, runTimeoutSeconds: 5, maxConcurrent: 8 } } },
    adapters: [new RecordingAdapter("telegram"), new RecordingAdapter("discord")],
    responder: (req) => {
      const step = stepOf(req);
      if (step === "a2a-reply") return { content: "REPLY_SKIP" };
      if (step === "a2a-announce" || step === "subagent-announce") return { content: "ANNOUNCE_SKIP" };
      if (afterTool(req)) return { content: "done" };
      const last = [...req.messages].reverse().find((m) => m.role === "user");
      if (String(last?.content ?? "").includes("FUZZ-CALL")) return { toolCalls: [{ name: runTool, arguments: runArgs }] };
      return { content: "ok" };
    },
  });
  const { sessions } = h.app;
  await sessions.upsert(PLAIN, "main", { chatType: "group", channel: "telegram", displayName: "Plain", label: "plain", deliveryContext: { channel: "telegram", to: "-100700", accountId: "default" } });
  await sessions.upsert("agent:main:telegram:group:-100701", "main", { chatType: "group", channel: "telegram", label: "other" });
  await sessions.upsert("agent:main:discord:channel:9001", "main", { chatType: "channel", channel: "discord" });
  await sessions.upsert(MAIN, "main", { chatType: "direct", lastChannel: "telegram", deliveryContext: { channel: "telegram", to: "1001", accountId: "default" } });
  await sessions.upsert(CHILD, "main", { spawnedBy: PLAIN, label: "child" });
  await sessions.upsert("agent:main:subagent:99999999-2222-3333-4444-555555555555", "main", { spawnedBy: CHILD, label: "grandchild" });
});
afterAll(async () => {
  await h?.stop();
});

const keys = fc.oneof(
  fc.constantFrom("main", MAIN, PLAIN, CHILD, "agent:main:telegram:group:-100701", "agent:main:discord:channel:9001", "agent:main:subagent:99999999-2222-3333-4444-555555555555", "agent:main:subagent:", "agent:main:sub", "agent:other:main"),
  hostileString,
);
/** Text, sometimes blank (whitespace only): a required string must still count as missing. */
const text = fc.oneof({ weight: 8, arbitrary: fc.string({ minLength: 1, maxLength: 40 }) }, { weight: 1, arbitrary: fc.constantFrom("", " ", "   ", "\t\n", "\u00a0", "\u3000 ") });
const plausibleArgs: Record<string, fc.Arbitrary<Record<string, unknown>>> = {
  sessions_list: fc.record({ kinds: mostly(fc.subarray(["main", "group", "cron", "hook", "node", "other"])), limit: mostly(fc.integer({ min: 1, max: 500 })), activeMinutes: mostly(fc.integer({ min: 1, max: 600 })), messageLimit: mostly(fc.integer({ min: 0, max: 30 })) }, { requiredKeys: [] }),
  sessions_history: fc.record({ sessionKey: mostly(keys), limit: mostly(fc.integer({ min: 1, max: 2000 })), includeTools: mostly(fc.boolean()) }, { requiredKeys: ["sessionKey"] }),
  sessions_send: fc.record({ sessionKey: mostly(keys), label: mostly(fc.constantFrom("plain", "other", "child", "grandchild", "none")), message: mostly(text), timeoutSeconds: mostly(fc.constantFrom(0, 0.01, 1, 5)) }, { requiredKeys: [] }),
  sessions_spawn: fc.record({ task: mostly(text), label: mostly(fc.string({ minLength: 1, maxLength: 64 })), agentId: mostly(fc.constantFrom("main", "other", "MAIN", "")), model: mostly(fc.constantFrom("fake/m", "nope/x")), runTimeoutSeconds: mostly(fc.integer({ min: 0, max: 5 })), cleanup: mostly(fc.constantFrom("keep", "delete")) }, { requiredKeys: ["task"] }),
  agents_list: fc.constant({}),
};

function argsFor(tool: AgentTool): fc.Arbitrary<unknown> {
  const props = Object.keys((tool.parameters as { properties?: Record<string, unknown> }).properties ?? {});
  return fc.oneof({ weight: 4, arbitrary: plausibleArgs[tool.name] ?? shapedLike(props) }, { weight: 2, arbitrary: shapedLike(props) }, { weight: 1, arbitrary: hostileValue }, { weight: 1, arbitrary: fc.anything() });
}

/**
 * Required strings per tool (spec "Parameters": sessions_history sessionKey, sessions_send message,
 * sessions_spawn task): missing, or blank once trimmed, is an error naming the field. Stated here,
 * independently of the schemas in src/tools/schemas.ts.
 */
const REQUIRED: Record<string, string[]> = { sessions_history: ["sessionKey"], sessions_send: ["message"], sessions_spawn: ["task"] };
/** sessions_send's timeoutSeconds: 0 or more (R13 R14), at most the 3600 s its JSON schema advertises. */
const MAX_TIMEOUT_SECONDS = 3600;

/** A parameter's type, as far as a wrong-typed value can be told from a right one. */
type ParamType = { type: "string" | "number" | "boolean" } | { type: "enum"; values: readonly string[] } | { type: "array"; items: ParamType };
const STRING: ParamType = { type: "string" };
const NUMBER: ParamType = { type: "number" };
const BOOLEAN: ParamType = { type: "boolean" };
/**
 * Every parameter's type as the spec's "Parameters" lists give it (sessions_send's label, which
 * the spec does not list, as the tool describes it). Stated here, not read from the schemas: a
 * schema loosened to z.any() loses its type from the JSON schema too, and the loosening is what
 * the property below must catch. A parameter added later and missing here is held to the type
 * its JSON schema declares, so it is covered without editing this table.
 */
const PARAM_TYPES: Record<string, Record<string, ParamType>> = {
  sessions_list: { kinds: { type: "array", items: STRING }, limit: NUMBER, activeMinutes: NUMBER, messageLimit: NUMBER },
  sessions_history: { sessionKey: STRING, limit: NUMBER, includeTools: BOOLEAN },
  sessions_send: { sessionKey: STRING, label: STRING, message: STRING, timeoutSeconds: NUMBER },
  sessions_spawn: { task: STRING, label: STRING, agentId: STRING, model: STRING, runTimeoutSeconds: NUMBER, cleanup: { type: "enum", values: ["delete", "keep"] } },
};

type JsonProp = { type?: unknown; enum?: unknown; items?: unknown };
function typeFromJsonSchema(prop: JsonProp | undefined): ParamType | undefined {
  if (!prop || typeof prop !== "object") return undefined;
  if (Array.isArray(prop.enum) && prop.enum.every((v) => typeof v === "string")) return { type: "enum", values: prop.enum as string[] };
  if (prop.type === "string" || prop.type === "boolean") return { type: prop.type };
  if (prop.type === "number" || prop.type === "integer") return NUMBER;
  if (prop.type === "array") {
    const items = typeFromJsonSchema(prop.items as JsonProp | undefined);
    return items && { type: "array", items };
  }
  return undefined;
}

/** The parameters a tool declares (its JSON schema's properties), each with the type it must hold. */
function declaredParams(tool: AgentTool): Array<{ param: string; type: ParamType | undefined }> {
  const props = ((tool.parameters as { properties?: Record<string, JsonProp> }).properties ?? {}) as Record<string, JsonProp>;
  return Object.keys(props).map((param) => ({ param, type: PARAM_TYPES[tool.name]?.[param] ?? typeFromJsonSchema(props[param]) }));
}

/**
 * Whether `v` is certainly not a value of type `t`. An enum value is compared trimmed and
 * lower-cased: whether " Keep" is accepted is the tool's choice, whether "nope" is is not.
 */
function violates(t: ParamType, v: unknown): boolean {
  switch (t.type) {
    case "enum":
      return typeof v !== "string" || !t.values.includes(v.trim().toLowerCase());
    case "array":
      return !Array.isArray(v) || v.some((item) => violates(t.items, item));
    default:
      return typeof v !== t.type;
  }
}

/**
 * Words of which one must appear in a clear error for a value that is not of type `t`: the type,
 * or the allowed values. Naming the parameter alone is not enough — a wrong-typed label let
 * through to the lookup is still answered with an error naming label, just not the right one.
 */
function typeWords(t: ParamType): string[] {
  if (t.type === "enum") return [...t.values];
  if (t.type === "array") return ["array", ...typeWords(t.items)];
  return [t.type];
}

/**
 * A JavaScript engine's wording in a tool's error: a value of an unexpected type reached code that
 * assumed its type (a model parameter that let 42 through answered "ref.indexOf is not a
 * function"). The model cannot act on that; the tool's own words name what to fix.
 */
const ENGINE_MESSAGE =
  /is not a function|is not iterable|is not defined|is not a constructor|is not an object|Cannot read propert|Cannot set propert|Cannot create property|Cannot convert|Cannot destructure|undefined is not|null is not|of undefined|of null|Maximum call stack|Invalid array length|\b(?:Type|Reference|Range|Syntax|Internal)Error\b|\[object Object\]/;

/** The field errors a well-behaved tool must report for `args` (independent of the tools' zod schemas). */
function mustName(tool: AgentTool, args: unknown): string[] {
  const { name } = tool;
  if (args === null || args === undefined) return REQUIRED[name] ?? [];
  if (typeof args !== "object" || Array.isArray(args)) return [];
  const a = args as Record<string, unknown>;
  const fields = (REQUIRED[name] ?? []).filter((f) => !Object.hasOwn(a, f) || a[f] === undefined || (typeof a[f] === "string" && a[f].trim() === ""));
  const t = Object.hasOwn(a, "timeoutSeconds") ? a.timeoutSeconds : undefined;
  if (name === "sessions_send" && typeof t === "number" && !(t >= 0 && t <= MAX_TIMEOUT_SECONDS)) fields.push("timeoutSeconds");
  for (const { param, type } of declaredParams(tool)) {
    if (type && Object.hasOwn(a, param) && a[param] !== undefined && violates(type, a[param])) fields.push(param);
  }
  return [...new Set(fields)];
}

function bounded<T>(p: Promise<T>, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([p, new Promise<T>((_, reject) => (timer = setTimeout(() => reject(new Error(`${what}: no answer within ${CASE_BOUND_MS} ms`)), CASE_BOUND_MS)))]).finally(() => clearTimeout(timer));
}

describe("session tools under hostile arguments", () => {
  it(`fuzz: ${DIRECT_CASES} generated argument objects get a JSON result or a clear error, from the main and from a sandboxed session`, async () => {
    const from = (key: string) => h.app.toolsFor({ sessionKey: key, agentId: "main" });
    const byName = (key: string) => new Map(from(key).map((t) => [t.name, t]));
    const tools = { plain: byName(MAIN), sandboxed: byName(PLAIN) };
    const names = [...tools.plain.keys()].filter((n) => n.startsWith("sessions_") || n === "agents_list");
    expect(names).toEqual(expect.arrayContaining(["sessions_list", "sessions_history", "sessions_send", "sessions_spawn", "agents_list"]));
    const outcomes = new Map<string, number>();
    let n = 0;
    let fieldErrors = 0;
    const cases = fc.tuple(fc.constantFrom(...names), fc.constantFrom("plain", "sandboxed" as const)).chain(([name, who]) => {
      const tool = tools[who].get(name) ?? tools.plain.get(name)!;
      return argsFor(tool).map((args) => ({ name, who, args }));
    });
    await fc.assert(
      fc.asyncProperty(cases, async ({ name, who, args }) => {
        const tool = tools[who].get(name);
        if (!tool) throw new Error(`${name} missing for the ${who} session`);
        const ctx = outsideRun({ sessionKey: who === "plain" ? MAIN : PLAIN, agentId: "main", runId: `fuzz-${++n}`, origin: { channel: "telegram", to: "-100700", accountId: "default" } });
        const call = `${name}(${JSON.stringify(args)?.slice(0, 200)}) from the ${who} session`;
        let result: unknown;
        try {
          result = await bounded(tool.execute(args, ctx), call);
        } catch (err) {
          // Tools answer errors as {status: "error", error} results; a throw is a bug.
          throw new Error(`${call} threw instead of returning {status: "error", error}: ${err instanceof Error ? err.message : String(err)}`);
        }
        const json = JSON.stringify(result);
        if (json === undefined || typeof result !== "object" || result === null) throw new Error(`${call} returned ${String(result)}`);
        const status = (result as { status?: unknown }).status;
        const error = (result as { error?: unknown }).error;
        if (status === "error" || status === "forbidden") {
          if (typeof error !== "string" || !error.trim()) throw new Error(`${call}: error without a message: ${json}`);
          if (ENGINE_MESSAGE.test(error)) throw new Error(`${call}: the error is a JavaScript engine message, not the tool's own: ${json.slice(0, 300)}`);
        }
        const fields = mustName(tool, args);
        fieldErrors += fields.length;
        for (const field of fields) {
          if (status !== "error" || typeof error !== "string" || !new RegExp(`\\b${field}\\b`).test(error)) throw new Error(`${call}: expected an error naming ${field}, got ${json.slice(0, 300)}`);
        }
        outcomes.set(String(status ?? "ok"), (outcomes.get(String(status ?? "ok")) ?? 0) + 1);
      }),
      { numRuns: DIRECT_CASES, seed: FUZZ_SEED + 7, endOnFailure: true },
    );
    console.info(`tools fuzz: ${DIRECT_CASES} calls → ${[...outcomes].map(([k, v]) => `${v} ${k}`).join(", ")}; ${fieldErrors} field errors required`);
    // The field rule above is only as strong as the share of calls it applies to.
    expect(fieldErrors).toBeGreaterThan(DIRECT_CASES / 4);
    await bounded(features(h).background.idle(), "background work");
  }, 180_000);

  it(`fuzz: ${RUN_CASES} model tool calls with random argument text end their runs with a recorded tool result`, async () => {
    const names = ["sessions_list", "sessions_history", "sessions_send", "sessions_spawn", "agents_list", "no_such_tool"];
    const argText = fc.oneof(fc.string({ maxLength: 80 }), hostileValue.map((v) => JSON.stringify(v) ?? ""), fc.constantFrom("", "{", "null", "[]", '{"sessionKey":', '{"task":"x","__proto__":{"admin":true}}', "\u0000"));
    let i = 0;
    await fc.assert(
      fc.asyncProperty(fc.constantFrom(...names), argText, async (name, args) => {
        runTool = name;
        runArgs = args;
        const { done } = h.app.runtime.start({ sessionKey: PLAIN, agentId: "main", message: `FUZZ-CALL ${++i}`, runId: `fuzz-run-${i}` });
        const outcome = await bounded(done, `run calling ${name}(${args.slice(0, 80)})`);
        if (outcome.status !== "ok" && !(outcome.status === "error" && outcome.error)) throw new Error(`run ended ${JSON.stringify(outcome)}`);
      }),
      { numRuns: RUN_CASES, seed: FUZZ_SEED + 8, endOnFailure: true },
    );
    const entry = h.app.sessions.require(PLAIN);
    const messages = await h.app.transcripts.readMessages(h.app.sessions.transcriptPath(entry));
    expect(messages.filter((m) => m.role === "toolResult").length).toBeGreaterThanOrEqual(RUN_CASES);
    await bounded(features(h).background.idle(), "background work");
  }, 120_000);

  describe("fixed cases: the parameter rules", () => {
    const ctxFrom = (sessionKey: string) => outsideRun({ sessionKey, agentId: "main", runId: `fixed-${Math.random()}`, origin: { channel: "telegram", to: "1001", accountId: "default" } });
    const call = (name: string, args: unknown) => {
      const tool = h.app.toolsFor({ sessionKey: MAIN, agentId: "main" }).find((t) => t.name === name);
      if (!tool) throw new Error(`${name} missing`);
      return bounded(tool.execute(args, ctxFrom(MAIN)) as Promise<{ status?: string; error?: string; childSessionKey?: string }>, `${name}(${JSON.stringify(args)})`);
    };
    /** Runs `check` and asserts it started no model call (settling before and after, even when it fails). */
    const startsNothing = async (check: () => Promise<void>) => {
      await settle(h);
      const requests = h.model.requests.length;
      try {
        await check();
      } finally {
        await settle(h);
      }
      expect(h.model.requests.length).toBe(requests);
    };
    const blanks: Array<[string, unknown]> = [
      ["missing", undefined],
      ["empty", ""],
      ["spaces", "   "],
      ["tabs and newlines", "\t\n \r\n"],
      ["no-break and ideographic spaces", "\u00a0\u3000\u2003"],
    ];
    // The spec lists these parameters as required but gives the rule no id (R1–R42 are behaviour).
    const required: Array<[string, string, Record<string, unknown>]> = [
      ["sessions_send", "message", { sessionKey: PLAIN, timeoutSeconds: 0 }],
      ["sessions_history", "sessionKey", {}],
      ["sessions_spawn", "task", { label: "fixed" }],
    ];
    for (const [tool, field, rest] of required) {
      it.each(blanks)(`${tool} parameters: ${field} is required — %s is {status: "error"} naming ${field}, and nothing runs`, async (_what, value) =>
        startsNothing(async () => {
          const res = await call(tool, value === undefined ? rest : { ...rest, [field]: value });
          expect(res.status).toBe("error");
          expect(res.error).toMatch(new RegExp(`\\b${field}\\b`));
        }),
      );
    }

    it(`R13 R14 sessions_send timeoutSeconds must be 0..${MAX_TIMEOUT_SECONDS} (the maximum its JSON schema advertises): 3601, 1e9, -1 and -0.001 are errors naming timeoutSeconds`, async () => {
      await startsNothing(async () => {
        for (const timeoutSeconds of [MAX_TIMEOUT_SECONDS + 1, 1e9, -1, -0.001]) {
          const res = await call("sessions_send", { sessionKey: PLAIN, message: "hello", timeoutSeconds });
          expect(res.status, `timeoutSeconds ${timeoutSeconds}`).toBe("error");
          expect(res.error, `timeoutSeconds ${timeoutSeconds}`).toMatch(/\btimeoutSeconds\b/);
        }
      });
      const tool = h.app.toolsFor({ sessionKey: MAIN, agentId: "main" }).find((t) => t.name === "sessions_send")!;
      expect((tool.parameters as { properties: Record<string, { maximum?: number; minimum?: number }> }).properties.timeoutSeconds).toMatchObject({ minimum: 0, maximum: MAX_TIMEOUT_SECONDS });
    });

    it(`R13 R14 sessions_send timeoutSeconds at the bounds: 0 answers accepted, ${MAX_TIMEOUT_SECONDS} waits and answers ok`, async () => {
      expect(await call("sessions_send", { sessionKey: PLAIN, message: "no wait", timeoutSeconds: 0 })).toMatchObject({ status: "accepted" });
      expect(await call("sessions_send", { sessionKey: PLAIN, message: "wait", timeoutSeconds: MAX_TIMEOUT_SECONDS })).toMatchObject({ status: "ok", reply: "ok" });
      await settle(h);
    });

    it("sessions_spawn and sessions_send label: blank, or longer than the 64 characters a label may have, is {status: \"error\"} naming label, and nothing runs; spaces around it are trimmed", async () => {
      await startsNothing(async () => {
        for (const label of ["", "   ", "\t\u00a0", "x".repeat(65), `${"y".repeat(64)}z`]) {
          for (const [tool, rest] of [["sessions_spawn", { task: "fixed task" }], ["sessions_send", { message: "hello", timeoutSeconds: 0 }]] as const) {
            const res = await call(tool, { ...rest, label });
            expect(res.status, `${tool} label ${JSON.stringify(label)}`).toBe("error");
            expect(res.error, `${tool} label ${JSON.stringify(label)}`).toMatch(/\blabel\b/);
          }
        }
      });
      const spawned = await call("sessions_spawn", { task: "fixed task", label: `  ${"w".repeat(64)}  ` });
      expect(spawned.status).toBe("accepted");
      expect(h.app.sessions.get(spawned.childSessionKey ?? "")?.label).toBe("w".repeat(64));
      await settle(h);
    });

    /** Valid values for each tool's required parameters, so that the one wrong value is the only problem. */
    const VALID_BASE: Record<string, Record<string, unknown>> = {
      sessions_list: {},
      sessions_history: { sessionKey: PLAIN },
      sessions_send: { sessionKey: PLAIN, message: "hello" },
      sessions_spawn: { task: "fixed task" },
    };
    /** JSON values of every type (numeric and boolean-looking strings included: "5" is not 5). */
    const anyType = fc.oneof(
      fc.string({ maxLength: 20 }),
      fc.constantFrom("5", "0", "1e3", "true", "false", "null", "[]", "{}", "main", "keep"),
      fc.integer(),
      fc.double({ noNaN: true, noDefaultInfinity: true }),
      fc.boolean(),
      fc.constant(null),
      fc.array(hostileValue, { maxLength: 3 }),
      fc.dictionary(hostileString, hostileValue, { maxKeys: 3 }),
    );
    /** A value `t` excludes; for an array, also one with a single item of the wrong type among right ones. */
    const wrongFor = (t: ParamType): fc.Arbitrary<unknown> => {
      const items =
        t.type === "array"
          ? [fc.tuple(fc.array(anyType.filter((v) => !violates(t.items, v)), { maxLength: 3 }), wrongFor(t.items), fc.nat()).map(([ok, bad, at]) => [...ok.slice(0, at % (ok.length + 1)), bad, ...ok.slice(at % (ok.length + 1))])]
          : [];
      return fc.oneof(anyType, ...items).filter((v) => violates(t, v));
    };

    it(`parameters (the spec's "Parameters" of each session tool): a value of the wrong type for any declared parameter — a string for a number, a number, object, null or array for a string… — is {status: "error"} naming that parameter and what it takes, in the tool's own words, and nothing runs`, async () => {
      const tools = h.app.toolsFor({ sessionKey: MAIN, agentId: "main" }).filter((t) => t.name.startsWith("sessions_"));
      expect(tools.map((t) => t.name)).toEqual(expect.arrayContaining(Object.keys(PARAM_TYPES)));
      const table = tools.flatMap((tool) => declaredParams(tool).map((p) => ({ tool: tool.name, ...p })));
      expect(table.filter((p) => !p.type).map((p) => `${p.tool}.${p.param}`), "parameters whose type neither PARAM_TYPES nor their JSON schema gives").toEqual([]);
      // A name in PARAM_TYPES that no tool declares is a typo, and would leave the real parameter untyped.
      const declared = new Set(table.map((p) => `${p.tool}.${p.param}`));
      expect(Object.entries(PARAM_TYPES).flatMap(([tool, params]) => Object.keys(params).map((p) => `${tool}.${p}`)).filter((p) => !declared.has(p))).toEqual([]);
      const hits = new Map([...declared].map((p) => [p, 0]));
      const cases = fc.constantFrom(...table).chain((p) => wrongFor(p.type!).map((value) => ({ tool: p.tool, param: p.param, type: p.type!, value })));
      await startsNothing(() =>
        fc.assert(
          fc.asyncProperty(cases, async ({ tool, param, type, value }) => {
            const what = `${tool}(${param}: ${JSON.stringify(value)?.slice(0, 100)})`;
            let res: Awaited<ReturnType<typeof call>>;
            try {
              res = await call(tool, { ...VALID_BASE[tool], [param]: value });
            } catch (err) {
              throw new Error(`${what} threw instead of returning {status: "error", error}: ${err instanceof Error ? err.message : String(err)}`);
            }
            const json = JSON.stringify(res)?.slice(0, 300);
            if (typeof res?.error === "string" && ENGINE_MESSAGE.test(res.error)) throw new Error(`${what}: the error is a JavaScript engine message, not the tool's own: ${json}`);
            if (res?.status !== "error" || typeof res.error !== "string" || !new RegExp(`\\b${param}\\b`).test(res.error)) throw new Error(`${what}: expected {status: "error"} naming ${param}, got ${json}`);
            const words = typeWords(type);
            if (!words.some((w) => new RegExp(`\\b${w.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}\\b`).test(res.error!))) throw new Error(`${what}: the error names ${param} but not what it takes (${words.join(" or ")}): ${json}`);
            hits.set(`${tool}.${param}`, (hits.get(`${tool}.${param}`) ?? 0) + 1);
          }),
          { numRuns: WRONG_TYPE_CASES, seed: FUZZ_SEED + 9, endOnFailure: true },
        ),
      );
      console.info(`tools fuzz: ${WRONG_TYPE_CASES} wrong-typed values over ${table.length} parameters`);
      expect([...hits].filter(([, n]) => n < 10), "parameters given fewer than 10 wrong values").toEqual([]);
    }, 60_000);
  });

  it("fuzz: afterwards every session entry and transcript line in the state directory is well-formed", async () => {
    await h.app.router.idle();
    await h.app.sessions.flush();
    await h.app.transcripts.flush();
    const { problems } = await checkState(h.stateDir);
    expect(problems).toEqual([]);
  });
});
