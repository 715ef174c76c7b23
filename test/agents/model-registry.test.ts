/** Model references (src/agents/models/registry.ts): which model an agent uses, and which references are refused. */
import { describe, expect, it } from "vitest";
import { ModelRegistry } from "../../src/agents/models/registry.js";
import { parseConfig } from "../../src/config/load.js";
import { FakeModelServer } from "../fakes/model-server.js";

const registry = (env: NodeJS.ProcessEnv = {}, defaults: { model?: string } = { model: "fake/m" }) =>
  new ModelRegistry(
    parseConfig(
      {
        models: { providers: { fake: { baseUrl: "http://127.0.0.1:9/v1", models: [{ id: "m" }, { id: "big", cost: { input: 3, output: 15 } }] } } },
        agents: { defaults, list: [{ id: "main", default: true }, { id: "heavy", model: "fake/big" }] },
      },
      "<test>",
      {},
    ),
    env,
  );

describe("model registry", () => {
  it("an agent's own model wins over agents.defaults.model", () => {
    const models = registry();
    expect(models.defaultRef("heavy")).toBe("fake/big");
    expect(models.defaultRef("main")).toBe("fake/m");
  });

  it("a reference without a model name or with an unknown provider is refused, naming the configured providers", () => {
    const models = registry();
    expect(() => models.resolve("fake/")).toThrow('invalid model "fake/": use "<provider>/<model>" with a configured provider (configured: fake)');
    expect(() => models.resolve("other/m")).toThrow("(configured: fake)");
    expect(models.resolve("fake/big")).toMatchObject({ ref: "fake/big", model: "big" });
  });

  it("without agents.defaults.model an agent uses the first model of the first configured provider", () => {
    expect(registry({}, {}).defaultRef("main")).toBe("fake/m");
  });

  it("a resolved model carries its declared price, which sub-agent announces estimate their cost from", () => {
    expect(registry().resolve("fake/big").cost).toEqual({ input: 3, output: 15 });
    expect(registry().resolve("fake/m").cost).toBeUndefined();
  });

  it("a bare model name resolves against the only configured provider", () => {
    expect(registry().resolve("big")).toMatchObject({ ref: "fake/big", model: "big" });
  });

  it("OPENAI_BASE_URL adds no provider beside configured ones: the config's providers are the only ones", () => {
    const models = registry({ OPENAI_BASE_URL: "http://127.0.0.1:9/v1", OPENAI_API_KEY: "sk-env-key-123456" });
    expect(() => models.resolve("env/gpt")).toThrow("(configured: fake)");
    expect(models.resolve("big")).toMatchObject({ ref: "fake/big" });
  });
});

describe("model registry from the environment", () => {
  const fromEnv = (env: NodeJS.ProcessEnv) => new ModelRegistry(parseConfig({}, "<test>", {}), env);

  it("SWITCHBOARD_MODEL names a model of the OPENAI_BASE_URL server, also when the model id holds a slash (vLLM's Qwen/Qwen2.5-7B-Instruct, OpenRouter's openai/gpt-4o-mini)", () => {
    for (const id of ["Qwen/Qwen2.5-7B-Instruct", "openai/gpt-4o-mini", "hf.co/bartowski/Llama-3.2-1B-Instruct-GGUF"]) {
      const models = fromEnv({ OPENAI_BASE_URL: "http://127.0.0.1:9/v1", SWITCHBOARD_MODEL: id });
      const ref = models.defaultRef("main")!;
      expect(models.resolve(ref)).toMatchObject({ ref: `env/${id}`, model: id });
    }
  });

  it("OPENAI_API_KEY with SWITCHBOARD_MODEL and no OPENAI_BASE_URL is OpenAI itself; a key alone configures nothing", () => {
    const openai = fromEnv({ OPENAI_API_KEY: "sk-env-key-123456", SWITCHBOARD_MODEL: "gpt-4o-mini" });
    expect(openai.missingModel("main")).toBeUndefined();
    expect(openai.resolve(openai.defaultRef("main")!)).toMatchObject({ ref: "env/gpt-4o-mini", model: "gpt-4o-mini" });
    expect(fromEnv({ OPENAI_API_KEY: "sk-env-key-123456" }).configured).toBe(false);
  });

  it("OPENAI_BASE_URL wins over OpenAI itself when OPENAI_API_KEY and SWITCHBOARD_MODEL are set too (a key for OpenRouter or a local server): requests go to OPENAI_BASE_URL", async () => {
    const server = new FakeModelServer();
    try {
      const models = fromEnv({ OPENAI_BASE_URL: await server.start(), OPENAI_API_KEY: "sk-env-key-123456", SWITCHBOARD_MODEL: "llama3.1" });
      const { provider, model } = models.resolve(models.defaultRef("main")!);
      const result = await provider.complete({ model, messages: [{ role: "user", content: "where am I?" }], tools: [] });
      expect(result.content).toBe("echo: where am I?");
      expect(server.requests).toMatchObject([{ model: "llama3.1" }]);
    } finally {
      await server.stop();
    }
  });

  it("SWITCHBOARD_MODEL may name the env provider itself (env/llama3.1) or not (llama3.1)", () => {
    for (const id of ["llama3.1", "env/llama3.1"]) {
      const models = fromEnv({ OPENAI_BASE_URL: "http://127.0.0.1:9/v1", SWITCHBOARD_MODEL: id });
      expect(models.resolve(models.defaultRef("main")!)).toMatchObject({ ref: "env/llama3.1", model: "llama3.1" });
    }
  });
});
