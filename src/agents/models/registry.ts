/**
 * Resolves "provider/model" references against `models.providers` (and the environment
 * variables OPENAI_BASE_URL / OPENAI_API_KEY / SWITCHBOARD_MODEL when no provider is configured).
 */
import type { Config } from "../../config/schema.js";
import { agentConfigOf } from "../../inbound/route.js";
import { createOpenAiChatProvider } from "./openai-chat.js";
import type { ModelProvider } from "./provider.js";

export interface ResolvedModel {
  ref: string;
  provider: ModelProvider;
  model: string;
  cost?: { input: number; output: number };
  /** Tokens the model takes in one request (`models[].contextWindow`), when declared. */
  contextWindow?: number;
}

export const NO_MODEL_MESSAGE =
  "No model configured — see README (\"Connect a model\"): set OPENAI_BASE_URL and SWITCHBOARD_MODEL, or models.providers and agents.defaults.model in the config.";

export class ModelRegistry {
  private readonly providers = new Map<string, ModelProvider>();

  constructor(
    private readonly config: Config,
    private readonly env: NodeJS.ProcessEnv = process.env,
    providerOverride?: (id: string) => ModelProvider | undefined,
  ) {
    for (const [id, p] of Object.entries(config.models.providers)) {
      this.providers.set(id, providerOverride?.(id) ?? createOpenAiChatProvider({ id, baseUrl: p.baseUrl, apiKey: p.apiKey, timeoutMs: p.timeoutMs }));
    }
    const envBaseUrl = envModelServer(env);
    if (this.providers.size === 0 && envBaseUrl) {
      this.providers.set("env", createOpenAiChatProvider({ id: "env", baseUrl: envBaseUrl, apiKey: env.OPENAI_API_KEY, timeoutMs: 120_000 }));
    }
  }

  /** The model an agent uses by default: agent → defaults → env → the only configured model. */
  defaultRef(agentId: string): string | undefined {
    const agent = agentConfigOf(this.config, agentId);
    if (agent?.model) return agent.model;
    if (this.config.agents.defaults.model) return this.config.agents.defaults.model;
    if (this.env.SWITCHBOARD_MODEL) {
      const m = this.env.SWITCHBOARD_MODEL;
      // "<provider>/<model>" when it starts with a provider's id ("env/…" included); else, with
      // the OPENAI_BASE_URL server, one of that server's models, whose ids often hold a slash
      // themselves (vLLM's "Qwen/Qwen2.5-7B-Instruct", OpenRouter's "openai/gpt-4o-mini").
      const slash = m.indexOf("/");
      if (slash > 0 && this.providers.has(m.slice(0, slash))) return m;
      return this.providers.has("env") ? `env/${m}` : m;
    }
    const [firstId, first] = Object.entries(this.config.models.providers)[0] ?? [];
    if (firstId && first?.models[0]) return `${firstId}/${first.models[0].id}`;
    return undefined;
  }

  /** Throws a message naming the problem for an unknown provider or model. */
  resolve(ref: string): ResolvedModel {
    const slash = ref.indexOf("/");
    const providerId = slash > 0 ? ref.slice(0, slash) : this.providers.size === 1 ? [...this.providers.keys()][0] : "";
    const model = slash > 0 ? ref.slice(slash + 1) : ref;
    const provider = this.providers.get(providerId);
    if (!provider || !model) {
      const known = [...this.providers.keys()].join(", ") || "none";
      throw new Error(`invalid model "${ref}": use "<provider>/<model>" with a configured provider (configured: ${known})`);
    }
    const declared = this.config.models.providers[providerId]?.models;
    if (declared?.length && !declared.some((m) => m.id === model)) {
      throw new Error(`invalid model "${ref}": provider "${providerId}" lists ${declared.map((m) => m.id).join(", ")}`);
    }
    const { cost, contextWindow } = declared?.find((m) => m.id === model) ?? {};
    return { ref: `${providerId}/${model}`, provider, model, ...(cost ? { cost } : {}), ...(contextWindow ? { contextWindow } : {}) };
  }

  /**
   * Why an agent has no model to run, in words for the start-up warning ("" for none configured
   * at all); undefined when it has one. Half an environment set-up is the usual first mistake.
   */
  missingModel(agentId: string): string | undefined {
    if (!this.configured) {
      return this.env.SWITCHBOARD_MODEL ? `SWITCHBOARD_MODEL is set but OPENAI_BASE_URL is not: set it to the server's address (or OPENAI_API_KEY, for OpenAI's ${OPENAI_API_BASE})` : "";
    }
    if (this.defaultRef(agentId)) return undefined;
    return this.providers.has("env") && Object.keys(this.config.models.providers).length === 0
      ? "OPENAI_BASE_URL is set but SWITCHBOARD_MODEL is not: set it to one of the server's models"
      : "no model chosen: set agents.defaults.model (or SWITCHBOARD_MODEL)";
  }

  get configured(): boolean {
    return this.providers.size > 0;
  }
}

/** Where the OpenAI SDK and most tools send requests when only a key is given. */
export const OPENAI_API_BASE = "https://api.openai.com/v1";

/**
 * The model server the environment names: OPENAI_BASE_URL, or OpenAI's own for an OPENAI_API_KEY
 * together with a SWITCHBOARD_MODEL — what users of the OPENAI_* variables expect. A key alone
 * (set in the shell for other tools) does not make the daemon call OpenAI.
 */
function envModelServer(env: NodeJS.ProcessEnv): string | undefined {
  if (env.OPENAI_BASE_URL) return env.OPENAI_BASE_URL;
  return env.OPENAI_API_KEY && env.SWITCHBOARD_MODEL ? OPENAI_API_BASE : undefined;
}
