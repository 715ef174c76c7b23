import pino from "pino";
import { describe, expect, it } from "vitest";
import { App } from "../src/app.js";
import { parseConfig } from "../src/config/load.js";
import { RecordingAdapter } from "./helpers/recording-adapter.js";

describe("App.adapter", () => {
  it("an unknown account falls back to the channel's only adapter, never to one of several (another bot would answer)", () => {
    const app = new App({ config: parseConfig({}, "<test>", {}), log: pino({ level: "silent" }), env: {} });
    const work = new RecordingAdapter("telegram", "work");
    app.registerAdapter(work);
    expect(app.adapter("telegram", "default")).toBe(work);
    const home = new RecordingAdapter("telegram", "home");
    app.registerAdapter(home);
    expect(app.adapter("telegram", "home")).toBe(home);
    expect(app.adapter("telegram", "work")).toBe(work);
    expect(app.adapter("telegram", "default")).toBeUndefined();
    expect(app.adapter("discord", "default")).toBeUndefined();
  });
});
