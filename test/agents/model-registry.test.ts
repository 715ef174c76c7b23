/** Model references (src/agents/models/registry.ts): which model an agent uses, and which references are refused. */
import { describe, expect, it } from "vitest";
import { ModelRegistry } from "../../src/agents/models/registry.js";
import { parseConfig } from "../../src/config/load.js";

const registry = () =>
  new ModelRegistry(
    parseConfig(
      {
        models: { providers: { fake: { baseUrl: "http://127.0.0.1:9/v1", models: [{ id: "m" }, { id: "big" }] } } },
        agents: { defaults: { model: "fake/m" }, list: [{ id: "main", default: true }, { id: "heavy", model: "fake/big" }] },
      },
      "<test>",
      {},
    ),
    {},
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
});
