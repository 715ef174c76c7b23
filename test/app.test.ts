import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import pino from "pino";
import { afterEach, describe, expect, it } from "vitest";
import { App } from "../src/app.js";
import { parseConfig } from "../src/config/load.js";
import { lockStateDir, StateDirInUseError } from "../src/store/state-lock.js";
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

describe("App and the state lock", () => {
  const dirs: string[] = [];
  afterEach(() => {
    for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
  });
  function stateDir(): string {
    const dir = mkdtempSync(path.join(os.tmpdir(), "sb-app-lock-"));
    dirs.push(dir);
    return dir;
  }
  const app = (stateDir: string, store?: string) => new App({ config: parseConfig({ stateDir, ...(store ? { store: { url: store } } : {}) }, "<test>", {}), log: pino({ level: "silent" }), env: {} });

  it("an App on a state directory another holds is refused before it opens the store: no store file is created or read", async () => {
    const dir = stateDir();
    const held = await lockStateDir(dir);
    try {
      await expect(app(dir).open()).rejects.toBeInstanceOf(StateDirInUseError);
      expect(existsSync(path.join(dir, "switchboard.sqlite"))).toBe(false);
    } finally {
      await held.release();
    }
  });

  it("an App whose store cannot open, and one closed, leave the state directory free for the next", async () => {
    const dir = stateDir();
    const notADir = path.join(dir, "not-a-dir");
    writeFileSync(notADir, "");
    await expect(app(dir, `sqlite://${path.join(notADir, "s.sqlite")}`).open()).rejects.toThrow();
    const opened = app(dir);
    await opened.open();
    await expect(lockStateDir(dir)).rejects.toBeInstanceOf(StateDirInUseError);
    await opened.close();
    await (await lockStateDir(dir)).release();
  });
});
