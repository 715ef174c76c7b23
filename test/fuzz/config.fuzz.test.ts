/**
 * Hostile configuration: arbitrary values, the annotated example config with one value at a
 * random path replaced by something hostile, random files for the JSON5 loader, and hostile
 * environment values behind "${ENV}" references. Every case ends in a valid, frozen Config or
 * a ConfigError naming each problem with its path — never another exception, never a hang.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import fc from "fast-check";
import JSON5 from "json5";
import { afterAll, describe, expect, it } from "vitest";
import { ConfigError, loadConfigFile, parseConfig } from "../../src/config/load.js";
import { assertSafeBind } from "../../src/daemon.js";
import { FUZZ_SEED, hostileString, hostileValue } from "../helpers/hostile.js";

const example = JSON5.parse(readFileSync(new URL("../../config/example.json5", import.meta.url), "utf8")) as Record<string, unknown>;
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

let lastProblems: string[] = [];

/** The outcome must be a valid Config or a ConfigError listing problems with paths. */
function checkOutcome(run: () => unknown): "ok" | "error" {
  let config: unknown;
  try {
    config = run();
  } catch (err) {
    if (!(err instanceof ConfigError)) throw new Error(`not a ConfigError: ${err instanceof Error ? `${err.name}: ${err.message}` : String(err)}`);
    if (!err.problems.length || err.problems.some((p) => typeof p !== "string" || !/.: ./s.test(p))) throw new Error(`unclear problems: ${JSON.stringify(err.problems)}`);
    lastProblems = err.problems;
    return "error";
  }
  if (!config || typeof config !== "object" || !Object.isFrozen(config)) throw new Error("config is not a frozen object");
  const c = config as { stateDir: unknown; gateway: { port: unknown; bind: unknown }; agents: { list: unknown[] } };
  if (typeof c.stateDir !== "string" || typeof c.gateway.port !== "number" || typeof c.gateway.bind !== "string" || !c.agents.list.length) throw new Error("a parsed config misses defaults");
  // What start() checks next must also be a clear error, not a crash.
  try {
    assertSafeBind(config as never);
  } catch (err) {
    if (!(err instanceof Error) || !/refusing to bind/.test(err.message)) throw err;
  }
  return "ok";
}

describe("config parsing under hostile input", () => {
  it("fuzz: 1000 arbitrary values given as a config give a Config or a ConfigError with paths", () => {
    const seen = { ok: 0, error: 0 };
    fc.assert(
      fc.property(fc.oneof(hostileValue, fc.anything(), fc.object()), (raw) => {
        seen[checkOutcome(() => parseConfig(raw, "<fuzz>", {}))]++;
      }),
      { numRuns: 1000, seed: FUZZ_SEED + 3 },
    );
    expect(seen.error).toBeGreaterThan(0);
  });

  it("fuzz: 1500 mutations of the example config (one value replaced at a random path) give a Config or a ConfigError naming that path", () => {
    const seen = { ok: 0, error: 0 };
    fc.assert(
      fc.property(fc.constantFrom(...PATHS), fc.oneof(hostileValue, fc.anything()), (at, value) => {
        const mutated = withValueAt(example, at, value);
        try {
          const outcome = checkOutcome(() => parseConfig(mutated, "<fuzz>", {}));
          seen[outcome]++;
          if (outcome === "error" && !lastProblems.some((p) => p.startsWith(`${at[0]}`))) throw new Error(`problems do not name ${at[0]}: ${JSON.stringify(lastProblems)}`);
        } catch (err) {
          throw new Error(`at ${at.join(".")} = ${JSON.stringify(value)?.slice(0, 100)}: ${(err as Error).message}`);
        }
      }),
      { numRuns: 1500, seed: FUZZ_SEED + 4 },
    );
    expect(seen.ok).toBeGreaterThan(0);
    expect(seen.error).toBeGreaterThan(0);
  });

  it("fuzz: 300 random files and 200 hostile environment values through the JSON5 loader give a Config or a ConfigError", () => {
    const file = path.join(dir, "fuzz.json5");
    fc.assert(
      fc.property(
        fc.oneof(
          fc.string({ maxLength: 300 }),
          fc.string({ unit: "binary", maxLength: 300 }),
          hostileValue.map((v) => JSON.stringify(v) ?? ""),
          fc.constantFrom("", "{", "{stateDir: }", "// only a comment", "{gateway: {port: 99999}}", "{channels: {telegram: {enabled: true, botTokn: 'x'}}}", "\ufeff{}", "{a: 1, a: 2}"),
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
    expect(checkOutcome(() => loadConfigFile(path.join(dir, "does-not-exist.json5"), {}))).toBe("error");
  });
});
