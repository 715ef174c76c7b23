import { readdirSync, readFileSync, statSync } from "node:fs";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { DAEMON_NODE_FLAGS } from "./helpers/daemon-process.js";

const SDKS = ["discord.js", "telegraf", "@whiskeysockets/baileys"];
const COMPOSITION_ROOT = new Set(["src/daemon.ts"]);

function files(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const p = path.join(dir, name);
    return statSync(p).isDirectory() ? files(p) : p.endsWith(".ts") ? [p] : [];
  });
}

function imports(file: string): string[] {
  const text = readFileSync(file, "utf8");
  return [...text.matchAll(/(?:from\s+|import\s*\(\s*)["']([^"']+)["']/g)].map((m) => m[1]);
}

describe("architecture (DESIGN: the core imports no platform SDK)", () => {
  it("src/** never imports discord.js, telegraf, Baileys or adapters/** — except the composition root", () => {
    const offenders = files("src").flatMap((f) =>
      COMPOSITION_ROOT.has(f) ? [] : imports(f).filter((i) => SDKS.some((s) => i === s || i.startsWith(`${s}/`)) || i.includes("adapters/")).map((i) => `${f} → ${i}`),
    );
    expect(offenders).toEqual([]);
  });

  it("each adapter imports only its own SDK", () => {
    const own: Record<string, string> = { telegram: "telegraf", discord: "discord.js", whatsapp: "@whiskeysockets/baileys" };
    const offenders = Object.entries(own).flatMap(([name, sdk]) =>
      files(path.join("adapters", name)).flatMap((f) => imports(f).filter((i) => SDKS.some((s) => s !== sdk && (i === s || i.startsWith(`${s}/`)))).map((i) => `${f} → ${i}`)),
    );
    expect(offenders).toEqual([]);
  });

  it("only the outbox calls adapter.send", () => {
    const callers = files("src").filter((f) => /\badapter\.send\(/.test(readFileSync(f, "utf8")));
    expect(callers).toEqual(["src/delivery/outbox.ts"]);
  });
});

describe("the daemon's node flags (package.json's start script)", () => {
  it("the switchboard command (src/bin.js's shebang) and `npm run switchboard` pass node the same flags as `npm start`", () => {
    const scripts = (JSON.parse(readFileSync("package.json", "utf8")) as { scripts: Record<string, string> }).scripts;
    expect(DAEMON_NODE_FLAGS).toContain("--max-semi-space-size=64");
    expect(readFileSync("src/bin.js", "utf8").split("\n")[0]).toBe(`#!/usr/bin/env -S node ${DAEMON_NODE_FLAGS.join(" ")}`);
    expect(scripts.switchboard).toBe(`node ${DAEMON_NODE_FLAGS.join(" ")} src/bin.js`);
  });
});
