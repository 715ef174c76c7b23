/**
 * Hostile configuration: arbitrary values, the annotated example config with one value at a
 * random path replaced by something hostile, the example and default configs with an unknown key
 * inserted into one of their objects, random files for the JSON5 loader, and hostile environment
 * values behind "${ENV}" references. Every case ends in a valid, frozen Config or a ConfigError
 * naming each problem with its path — never another exception, never a hang — and where the
 * outcome is known (an unknown key, a port out of range) it is the ConfigError naming that path.
 * A Config is whole: it passes the schema again unchanged, every section there. A Config made
 * from a mutated example holds the mutated value as given (or the schema's default when it was
 * left out) and everything else as the example gives it; a ConfigError for it names only the
 * mutated path or paths under it.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import fc from "fast-check";
import JSON5 from "json5";
import { afterAll, describe, expect, it } from "vitest";
import { z } from "zod";
import { ConfigError, formatIssues, loadConfigFile, parseConfig } from "../../src/config/load.js";
import { ConfigSchema, type Config } from "../../src/config/schema.js";
import { assertSafeBind } from "../../src/daemon.js";
import { FUZZ_SEED, hostileString, hostileValue } from "../helpers/hostile.js";

const readConfig = (name: string) => JSON5.parse(readFileSync(new URL(`../../config/${name}`, import.meta.url), "utf8")) as Record<string, unknown>;
const example = readConfig("example.json5");
const BASES = { "example.json5": example, "default.json5": readConfig("default.json5") };
const dir = mkdtempSync(path.join(os.tmpdir(), "sb-config-fuzz-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** Every path to a leaf or a container in the example config. */
function pathsOf(value: unknown, prefix: string[] = []): string[][] {
  if (value === null || typeof value !== "object") return [prefix];
  const children = Object.entries(value as Record<string, unknown>).flatMap(([k, v]) => pathsOf(v, [...prefix, k]));
  return [prefix, ...children];
}
const PATHS = pathsOf(example).filter((p) => p.length > 0);

function withValueAt(root: unknown, at: string[], value: unknown): unknown {
  const copy = structuredClone(root) as Record<string, unknown>;
  let node = copy;
  for (const key of at.slice(0, -1)) node = node[key] as Record<string, unknown>;
  node[at[at.length - 1]] = value;
  return copy;
}

/** Paths (in the example or default config) of every object that is not an array, the root included. */
function objectPathsOf(value: unknown, prefix: string[] = []): string[][] {
  if (value === null || typeof value !== "object") return [];
  const children = Object.entries(value as Record<string, unknown>).flatMap(([k, v]) => objectPathsOf(v, [...prefix, k]));
  return Array.isArray(value) ? children : [prefix, ...children];
}

/**
 * Objects whose keys are names the user chooses (provider names, Telegram group ids): a new key
 * there is a new entry, not an unknown key. Checked below to be records indeed, so this list
 * cannot hide a strictness gap.
 */
const RECORDS = ["models.providers", "channels.telegram.groups"];
const where = (at: string[]) => (at.length ? at.join(".") : "(root)");
const STRICT_OBJECTS = Object.entries(BASES).flatMap(([file, base]) => objectPathsOf(base).filter((at) => !RECORDS.includes(at.join("."))).map((at) => ({ file, at })));

/** Every option name the schema knows, at any depth: a generated "unknown" key is none of them. */
const KNOWN_NAMES = (() => {
  const names = new Set<string>();
  const walk = (v: unknown): void => {
    if (v === null || typeof v !== "object") return;
    const props = (v as { properties?: unknown }).properties;
    if (props && typeof props === "object") for (const k of Object.keys(props)) names.add(k);
    Object.values(v).forEach(walk);
  };
  walk(z.toJSONSchema(ConfigSchema, { io: "input" }));
  return names;
})();

/** A key nobody declared: a typo of a sibling key (the usual way one is born), a prototype name, or anything. */
function unknownKeyFor(siblings: string[]): fc.Arbitrary<string> {
  const typo = fc.tuple(fc.constantFrom(...(siblings.length ? siblings : ["enabled"])), fc.nat(), fc.constantFrom("drop", "double", "case", "plural", "swap")).map(([k, i, how]) => {
    const j = i % Math.max(k.length, 1);
    if (how === "drop") return k.slice(0, j) + k.slice(j + 1);
    if (how === "double") return k.slice(0, j + 1) + k.slice(j);
    if (how === "case") return k.slice(0, j) + (k[j] === k[j]?.toUpperCase() ? k[j]?.toLowerCase() : k[j]?.toUpperCase()) + k.slice(j + 1);
    if (how === "plural") return `${k}s`;
    return j + 1 < k.length ? k.slice(0, j) + k[j + 1] + k[j] + k.slice(j + 2) : `${k}_`;
  });
  return fc
    .oneof({ weight: 4, arbitrary: typo }, { weight: 1, arbitrary: fc.constantFrom("__proto__", "constructor", "toString", "hasOwnProperty", "") }, { weight: 1, arbitrary: hostileString })
    .filter((k) => !KNOWN_NAMES.has(k) && !siblings.includes(k));
}

function nodeAt(root: unknown, at: string[]): Record<string, unknown> {
  let node = root as Record<string, unknown>;
  for (const key of at) node = node[key] as Record<string, unknown>;
  return node;
}

/** The problems of a config that must not parse (fails the test with what it got otherwise). */
function problemsOf(what: string, run: () => unknown): string[] {
  try {
    run();
  } catch (err) {
    if (err instanceof ConfigError) return err.problems;
    throw new Error(`${what}: not a ConfigError: ${err instanceof Error ? `${err.name}: ${err.message}` : String(err)}`);
  }
  throw new Error(`${what}: accepted, expected a ConfigError`);
}

const SECTIONS = Object.keys(ConfigSchema.shape);
const isRecord = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === "object" && !Array.isArray(v);
const own = (o: Record<string, unknown>, k: string) => (Object.hasOwn(o, k) ? o[k] : undefined);
const shown = (v: unknown) => (v === undefined ? "undefined" : (JSON.stringify(v)?.slice(0, 120) ?? String(v)));

/**
 * The first place where `got` differs from `want`, or undefined. A key holding undefined counts as
 * absent, as it does for the schema. `partial`: only what `want` holds is compared, since the
 * schema fills defaults in beside what was given.
 */
function firstDifference(want: unknown, got: unknown, at: string[], partial: boolean): string | undefined {
  if (Array.isArray(want) && Array.isArray(got)) {
    if (want.length !== got.length) return `${where(at)}: expected ${want.length} items, got ${got.length}`;
    for (let i = 0; i < want.length; i++) {
      const d = firstDifference(want[i], got[i], [...at, String(i)], partial);
      if (d) return d;
    }
    return undefined;
  }
  if (isRecord(want) && isRecord(got)) {
    for (const k of new Set([...Object.keys(want), ...(partial ? [] : Object.keys(got))])) {
      if (partial && own(want, k) === undefined) continue;
      const d = firstDifference(own(want, k), own(got, k), [...at, k], partial);
      if (d) return d;
    }
    return undefined;
  }
  return Object.is(want, got) ? undefined : `${where(at)}: expected ${shown(want)}, got ${shown(got)}`;
}

type Outcome = { kind: "ok"; config: Config } | { kind: "error"; problems: string[] };

/** The outcome must be a valid Config or a ConfigError listing problems with paths. */
function checkOutcome(run: () => unknown): Outcome {
  let config: unknown;
  try {
    config = run();
  } catch (err) {
    if (!(err instanceof ConfigError)) throw new Error(`not a ConfigError: ${err instanceof Error ? `${err.name}: ${err.message}` : String(err)}`);
    if (!err.problems.length || err.problems.some((p) => typeof p !== "string" || !/.: ./s.test(p))) throw new Error(`unclear problems: ${JSON.stringify(err.problems)}`);
    return { kind: "error", problems: err.problems };
  }
  if (!isRecord(config) || !Object.isFrozen(config)) throw new Error("config is not a frozen object");
  // interfaces §2: one zod schema is the source of truth — what the loader hands the daemon is
  // what that schema makes of it, every section there with its defaults, nothing dropped.
  const missing = SECTIONS.filter((k) => own(config, k) === undefined);
  if (missing.length) throw new Error(`the Config lacks the section(s) ${missing.join(", ")}`);
  const again = ConfigSchema.safeParse(config);
  if (!again.success) throw new Error(`the Config does not pass the schema: ${formatIssues(again.error).join("; ")}`);
  const refilled = firstDifference(again.data, config, [], false);
  if (refilled) throw new Error(`the Config is not what the schema makes of it (parsing it again changes ${refilled})`);
  // What start() checks next must also be a clear error, not a crash.
  try {
    assertSafeBind(config as never);
  } catch (err) {
    if (!(err instanceof Error) || !/refusing to bind/.test(err.message)) throw err;
  }
  return { kind: "ok", config: config as Config };
}

/** The schema for the value at `at` (through defaults, optionals, arrays and records). */
function schemaAt(at: string[]): z.ZodType {
  let s: z.ZodType = ConfigSchema;
  for (const key of at) {
    while (s instanceof z.ZodDefault || s instanceof z.ZodOptional) s = s.unwrap() as z.ZodType;
    if (s instanceof z.ZodObject) s = s.shape[key] as z.ZodType;
    else if (s instanceof z.ZodArray) s = s.element as z.ZodType;
    else if (s instanceof z.ZodRecord) s = s.valueType as z.ZodType;
    else throw new Error(`no schema at ${at.join(".")}`);
    if (!s) throw new Error(`no schema at ${at.join(".")}`);
  }
  return s;
}

/**
 * The value given at `at` as the loader must hand it back, with the empty environment the fuzz
 * uses: "${ENV_NAME}" reads the environment (interfaces §1), so an unset name reads as ""; and an
 * empty gateway token is no token (SWITCHBOARD_GATEWAY_TOKEN may supply one).
 */
function asLoaded(value: unknown, at: string[]): unknown {
  if (typeof value === "string") {
    const s = value.replace(/\$\{[A-Z_][A-Z0-9_]*\}/g, "");
    // A blank gateway token is no token (config/load.ts): any page could present it.
    return s.trim() === "" && at.join(".") === "gateway.auth.token" ? undefined : s;
  }
  if (Array.isArray(value)) return value.map((v, i) => asLoaded(v, [...at, String(i)]));
  if (isRecord(value)) return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, asLoaded(v, [...at, k])]));
  return value;
}

function valueAt(root: unknown, at: string[]): unknown {
  let node = root;
  for (const key of at) node = isRecord(node) || Array.isArray(node) ? own(node as Record<string, unknown>, key) : undefined;
  return node;
}

/** A copy of `root` without the value at `at`. */
function withoutAt(root: unknown, at: string[]): unknown {
  const copy = structuredClone(root);
  const parent = valueAt(copy, at.slice(0, -1));
  if (isRecord(parent) || Array.isArray(parent)) delete (parent as Record<string, unknown>)[at[at.length - 1]];
  return copy;
}

describe("config parsing under hostile input", () => {
  it("fuzz: 1000 arbitrary values given as a config give a whole Config (interfaces §2: what the one schema makes of it) or a ConfigError with paths", () => {
    const seen = { ok: 0, error: 0 };
    fc.assert(
      fc.property(fc.oneof(hostileValue, fc.anything(), fc.object()), (raw) => {
        seen[checkOutcome(() => parseConfig(raw, "<fuzz>", {})).kind]++;
      }),
      { numRuns: 1000, seed: FUZZ_SEED + 3 },
    );
    expect(seen.error).toBeGreaterThan(0);
  });

  it("fuzz: 1500 mutations of the example config (one value replaced at a random path) give a Config holding that value as given (or its default when left out) and the rest of the example, or a ConfigError naming only that path or paths under it", () => {
    const seen = { ok: 0, error: 0 };
    const example0 = parseConfig(example, "<fuzz>", {});
    fc.assert(
      fc.property(fc.constantFrom(...PATHS), fc.oneof(hostileValue, fc.anything()), (at, value) => {
        const mutated = withValueAt(example, at, value);
        const path = at.join(".");
        try {
          const outcome = checkOutcome(() => parseConfig(mutated, "<fuzz>", {}));
          seen[outcome.kind]++;
          // A left-out value is the schema's default, or an error when the schema has none.
          const fallback = value === undefined ? schemaAt(at).safeParse(undefined) : undefined;
          if (outcome.kind === "error") {
            // A cron job names an agent of agents.list: changing an agent's id can leave a job
            // naming none, which is that job's problem (interfaces §2: the job could never run).
            const dangling = (p: string) => path.startsWith("agents.list") && /^cron\.jobs\.\d+\.agentId: no agent /.test(p);
            const elsewhere = outcome.problems.filter((p) => !p.startsWith(`${path}: `) && !p.startsWith(`${path}.`) && !dangling(p));
            if (elsewhere.length) throw new Error(`problems name other paths than ${path}: ${JSON.stringify(elsewhere)} (all: ${JSON.stringify(outcome.problems)})`);
            if (fallback?.success) throw new Error(`left out, ${path} takes its default ${shown(fallback.data)}, yet got ${JSON.stringify(outcome.problems)}`);
            return;
          }
          if (fallback && !fallback.success) throw new Error(`${path} has no default, yet leaving it out gave a Config`);
          const given = fallback ? firstDifference(fallback.data, valueAt(outcome.config, at), at, false) : firstDifference(asLoaded(value, at), valueAt(outcome.config, at), at, true);
          if (given) throw new Error(`accepted, but the Config does not hold the value given at ${path}: ${given}`);
          const rest = firstDifference(withoutAt(example0, at), withoutAt(outcome.config, at), [], false);
          if (rest) throw new Error(`accepted, but a value outside ${path} changed: ${rest}`);
        } catch (err) {
          throw new Error(`at ${at.join(".")} = ${JSON.stringify(value)?.slice(0, 100)}: ${(err as Error).message}`);
        }
      }),
      { numRuns: 1500, seed: FUZZ_SEED + 4 },
    );
    expect(seen.ok).toBeGreaterThan(0);
    expect(seen.error).toBeGreaterThan(0);
  });

  it(`fuzz: 1500 insertions of an unknown key into an object of the example or default config give a ConfigError naming that object's path and the key`, () => {
    const cases = fc
      .constantFrom(...STRICT_OBJECTS)
      .chain(({ file, at }) => fc.tuple(fc.constant(file), fc.constant(at), unknownKeyFor(Object.keys(nodeAt(BASES[file as keyof typeof BASES], at))), fc.oneof(hostileValue, fc.anything())));
    const seenPaths = new Set<string>();
    fc.assert(
      fc.property(cases, ([file, at, key, value]) => {
        const mutated = structuredClone(BASES[file as keyof typeof BASES]);
        // defineProperty, so that "__proto__" becomes an own key as JSON5.parse makes it.
        Object.defineProperty(nodeAt(mutated, at), key, { value, enumerable: true, configurable: true, writable: true });
        const what = `${file} with the unknown key ${JSON.stringify(key)} in ${where(at)}`;
        const problems = problemsOf(what, () => parseConfig(mutated, file, {}));
        if (!problems.some((p) => p.startsWith(`${where(at)}: `) && p.includes(`"${key}"`))) throw new Error(`${what}: the problems do not name it: ${JSON.stringify(problems)}`);
        seenPaths.add(`${file} ${where(at)}`);
      }),
      { numRuns: 1500, seed: FUZZ_SEED + 9 },
    );
    // Every object of both files was tried.
    expect(seenPaths.size).toBe(STRICT_OBJECTS.length);
  });

  it("the record objects left out above take a new entry as a name, not as an unknown key", () => {
    for (const at of RECORDS.map((r) => r.split("."))) {
      const mutated = structuredClone(example);
      const node = nodeAt(mutated, at);
      node[`new-entry-${at.length}`] = structuredClone(Object.values(node)[0]);
      expect(() => parseConfig(mutated, "example.json5", {}), at.join(".")).not.toThrow();
    }
  });

  /** Files whose outcome is known: null = a Config; otherwise the path a problem must start with (and the key it must quote). */
  const FILES: Array<[text: string, path: string | null, key?: string]> = [
    ["{gateway: {port: 99999}}", "gateway.port"],
    ["{gateway: {port: 65536}}", "gateway.port"],
    ["{gateway: {port: -1}}", "gateway.port"],
    ["{gateway: {port: 80.5}}", "gateway.port"],
    ["{gateway: {port: '80'}}", "gateway.port"],
    ["{gateway: {port: 0}}", null],
    ["{gateway: {port: 65535}}", null],
    // Values out of each bound (0 as maxPayload would make ws's limit unlimited yet refuse every frame).
    ["{gateway: {maxPayload: 0}}", "gateway.maxPayload"],
    ["{gateway: {maxPayload: -1}}", "gateway.maxPayload"],
    ["{gateway: {maxPayload: 1.5}}", "gateway.maxPayload"],
    ["{gateway: {tickIntervalMs: 0}}", "gateway.tickIntervalMs"],
    ["{agents: {defaults: {maxConcurrent: 0}}}", "agents.defaults.maxConcurrent"],
    ["{agents: {defaults: {maxToolRounds: 0}}}", "agents.defaults.maxToolRounds"],
    ["{agents: {defaults: {maxToolRounds: 101}}}", "agents.defaults.maxToolRounds"],
    ["{agents: {defaults: {maxToolRounds: 100}}}", null],
    ["{agents: {defaults: {runTimeoutSeconds: -1}}}", "agents.defaults.runTimeoutSeconds"],
    ["{channels: {telegram: {textChunkLimit: 4097}}}", "channels.telegram.textChunkLimit"],
    ["{channels: {telegram: {textChunkLimit: 99}}}", "channels.telegram.textChunkLimit"],
    ["{channels: {telegram: {textChunkLimit: 4096}}}", null],
    ["{channels: {telegram: {pollTimeoutSeconds: 51}}}", "channels.telegram.pollTimeoutSeconds"],
    ["{channels: {telegram: {rateLimit: {perChatPerSecond: 0}}}}", "channels.telegram.rateLimit.perChatPerSecond"],
    ["{channels: {discord: {textChunkLimit: 2001}}}", "channels.discord.textChunkLimit"],
    ["{log: {level: 'verbose'}}", "log.level"],
    ["{channels: {telegram: {enabled: true, botTokn: 'x'}}}", "channels.telegram", "botTokn"],
    ["{channels: {telegram: {enabled: true, botToken: 'x'}}}", null],
    ["{gatway: {port: 1}}", "(root)", "gatway"],
    ["{a: 1, a: 2}", "(root)", "a"],
    ["\ufeff{}", null],
    ["", "not valid JSON5"],
    ["{", "not valid JSON5"],
    ["{stateDir: }", "not valid JSON5"],
    ["// only a comment", "not valid JSON5"],
  ];

  for (const [text, at, key] of FILES) {
    it(`the file ${JSON.stringify(text)} gives ${at === null ? "a valid Config" : `a ConfigError naming ${at}${key ? ` and "${key}"` : ""}`}`, () => {
      const file = path.join(dir, "fixed.json5");
      writeFileSync(file, text);
      if (at === null) return void expect(checkOutcome(() => loadConfigFile(file, {})).kind).toBe("ok");
      const problems = problemsOf(JSON.stringify(text), () => loadConfigFile(file, {}));
      expect(problems.some((p) => p.startsWith(`${at}: `) && (key === undefined || p.includes(`"${key}"`))), JSON.stringify(problems)).toBe(true);
    });
  }

  it("fuzz: 300 random files and 200 hostile environment values through the JSON5 loader give a Config or a ConfigError", () => {
    const file = path.join(dir, "fuzz.json5");
    fc.assert(
      fc.property(
        fc.oneof(
          fc.string({ maxLength: 300 }),
          fc.string({ unit: "binary", maxLength: 300 }),
          hostileValue.map((v) => JSON.stringify(v) ?? ""),
          fc.constantFrom(...FILES.map(([text]) => text)),
        ),
        (text) => {
          writeFileSync(file, text);
          checkOutcome(() => loadConfigFile(file, {}));
        },
      ),
      { numRuns: 300, seed: FUZZ_SEED + 5 },
    );
    fc.assert(
      fc.property(hostileString, hostileString, (token, dirValue) => {
        const raw = { stateDir: "${SB_FUZZ_DIR}", gateway: { bind: "0.0.0.0", auth: { token: "${SB_FUZZ_TOKEN}" } }, channels: { telegram: { enabled: true, botToken: "${SB_FUZZ_TOKEN}" } } };
        checkOutcome(() => parseConfig(raw, "<fuzz>", { SB_FUZZ_TOKEN: token, SB_FUZZ_DIR: dirValue }));
      }),
      { numRuns: 200, seed: FUZZ_SEED + 6 },
    );
    // A missing file is a ConfigError too.
    expect(checkOutcome(() => loadConfigFile(path.join(dir, "does-not-exist.json5"), {})).kind).toBe("error");
  });
});
