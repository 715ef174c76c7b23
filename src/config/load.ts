/**
 * Loads a JSON5 config: `${ENV}` substitution in strings, one zod validation reporting every
 * issue with its path, defaults from the schema, and a deep-frozen result.
 */
import { readFileSync } from "node:fs";
import JSON5 from "json5";
import { z } from "zod";
import { ConfigSchema, type Config } from "./schema.js";
import { deepFreeze } from "../util/freeze.js";
import { safeParse } from "../util/safe-parse.js";

export class ConfigError extends Error {
  constructor(
    readonly file: string,
    readonly problems: string[],
  ) {
    super(`invalid config ${file}:\n${problems.map((p) => `  - ${p}`).join("\n")}`);
    this.name = "ConfigError";
  }
}

export function loadConfigFile(file: string, env: NodeJS.ProcessEnv = process.env): Config {
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch (err) {
    throw new ConfigError(file, [`cannot read file: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`]);
  }
  let raw: unknown;
  try {
    raw = JSON5.parse(text);
  } catch (err) {
    throw new ConfigError(file, [`not valid JSON5: ${(err as Error).message}`]);
  }
  return parseConfig(raw, file, env);
}

/** A `${NAME}` placeholder whose variable was not set (taken as ""), and where it is. */
export interface UnsetReference {
  path: string;
  variable: string;
}

/** The unset references of each loaded config (warnings for `start` and `config check`). */
const unsetByConfig = new WeakMap<Config, UnsetReference[]>();

/**
 * Placeholders of `config` whose variable was not set, where the value is used: under an enabled
 * channel, enabled hooks, or a model provider. (The example config's placeholders for disabled
 * channels are not worth a warning.)
 */
export function unsetReferences(config: Config): UnsetReference[] {
  const channels = config.channels as Record<string, { enabled?: boolean } | undefined>;
  return (unsetByConfig.get(config) ?? []).filter(({ path }) => {
    const [section, name] = path.split(".");
    if (section === "channels") return channels[name]?.enabled === true;
    if (section === "hooks") return config.hooks.enabled;
    return section === "models";
  });
}

/** What to tell the operator of one unset reference. */
export function describeUnset({ path, variable }: UnsetReference): string {
  return `environment variable ${variable} is not set; ${path} is empty`;
}

export function parseConfig(raw: unknown, file = "<config>", env: NodeJS.ProcessEnv = process.env): Config {
  const unset: UnsetReference[] = [];
  const parsed = safeParse(ConfigSchema, substituteEnv(raw, env, [], unset));
  if (!parsed.success) throw new ConfigError(file, formatIssues(parsed.error));
  const config = deepFreeze(applyEnvDefaults(parsed.data as Config, env));
  unsetByConfig.set(config, unset);
  return config;
}

/** `path: message` per issue; enums list their permitted values. */
export function formatIssues(error: z.ZodError): string[] {
  return error.issues.map((issue) => {
    const where = issue.path.length ? issue.path.join(".") : "(root)";
    if (issue.code === "unrecognized_keys") return `${where}: unknown key(s) ${issue.keys.map((k) => `"${k}"`).join(", ")}`;
    if (issue.code === "invalid_value" && "values" in issue) return `${where}: expected ${(issue.values as unknown[]).map((v) => JSON.stringify(v)).join(" | ")}`;
    return `${where}: ${issue.message}`;
  });
}

const ENV_REF = /\$\{([A-Z_][A-Z0-9_]*)\}/g;

function substituteEnv(value: unknown, env: NodeJS.ProcessEnv, at: string[], unset: UnsetReference[]): unknown {
  // An unset variable becomes "" so a disabled channel's token placeholder is harmless; it is
  // noted, so that where it matters the operator is told which variable is missing.
  if (typeof value === "string") {
    return value.replace(ENV_REF, (_m, name: string) => {
      if (env[name] === undefined) unset.push({ path: at.join("."), variable: name });
      return env[name] ?? "";
    });
  }
  if (Array.isArray(value)) return value.map((v, i) => substituteEnv(v, env, [...at, String(i)], unset));
  if (value && typeof value === "object") return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, substituteEnv(v, env, [...at, k], unset)]));
  return value;
}

/** Environment overrides that operators expect without editing the file (interfaces §1). */
function applyEnvDefaults(config: Config, env: NodeJS.ProcessEnv): Config {
  // A blank token (a whitespace-only env value) is no secret — any web page could present it —
  // so it counts as none: the bind check and the browser check then apply as without one.
  const token = nonBlank(config.gateway.auth.token) ?? nonBlank(env.SWITCHBOARD_GATEWAY_TOKEN);
  const stateDir = env.SWITCHBOARD_STATE_DIR || config.stateDir;
  return { ...config, stateDir, gateway: { ...config.gateway, auth: { ...config.gateway.auth, token } } };
}

function nonBlank(value: string | undefined): string | undefined {
  return value?.trim() ? value : undefined;
}
