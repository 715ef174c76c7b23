/** Shared bench fixtures: temp dirs and daemon configs pointing at the fakes. */
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";

export function tempDir(prefix = "sb-bench-"): { dir: string; remove(): void } {
  const dir = mkdtempSync(path.join(os.tmpdir(), prefix));
  return { dir, remove: () => rmSync(dir, { recursive: true, force: true }) };
}

/** A daemon config for the benches: SQLite state under `stateDir`, the fake model, gateway on an ephemeral port. */
export function benchConfig(o: { stateDir: string; modelBaseUrl: string; token?: string; extra?: Record<string, unknown>; telegram?: Record<string, unknown>; maxConcurrent?: number }): Record<string, unknown> {
  return {
    stateDir: o.stateDir,
    log: { level: "info" },
    gateway: { port: 0, ...(o.token ? { auth: { token: o.token } } : {}) },
    models: { providers: { fake: { baseUrl: o.modelBaseUrl, models: [{ id: "m" }] } } },
    agents: { defaults: { model: "fake/m", ...(o.maxConcurrent ? { maxConcurrent: o.maxConcurrent } : {}) } },
    session: { dmScope: "per-channel-peer" },
    channels: { webchat: { enabled: true }, ...(o.telegram ? { telegram: o.telegram } : {}) },
    ...o.extra,
  };
}
