/**
 * The daemon as a child process (`node src/bin.js start --config <file>`), the way operators run
 * it: used by the crash-safety tests (SIGKILL/restart) and by the benchmarks (cold start, memory).
 */
import { spawn, type ChildProcess } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

export const REPO_ROOT = fileURLToPath(new URL("../..", import.meta.url));

/**
 * The node flags `npm start` runs the daemon with, read from package.json's start script
 * (`node <flags> src/bin.js start`): the tests and benchmarks run the daemon the same way.
 */
export const DAEMON_NODE_FLAGS: readonly string[] = (() => {
  const start = (JSON.parse(readFileSync(path.join(REPO_ROOT, "package.json"), "utf8")) as { scripts: { start: string } }).scripts.start;
  const m = /^node((?: --\S+)*) src\/bin\.js start$/.exec(start);
  if (!m) throw new Error(`package.json's start script is not "node [--flag…] src/bin.js start": ${start}`);
  return m[1].split(" ").filter(Boolean);
})();

export interface DaemonProcess {
  child: ChildProcess;
  pid: number;
  /** Resolves once the "switchboard listening" log line appeared: the gateway port and ms since spawn. */
  listening: Promise<{ port: number; ms: number }>;
  /** Resolves with the exit code (null when killed by a signal) and the signal. */
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** Everything the process wrote to stdout and stderr so far. */
  output(): string;
  /** Resolves once the output contains `text`, or once the process has exited (check `exited`). */
  logged(text: string): Promise<void>;
  /** Resident set size in bytes (Linux /proc), or undefined once gone. */
  rssBytes(): number | undefined;
  kill(signal?: NodeJS.Signals): void;
}

/** Writes a JSON config (JSON is valid JSON5) and returns its path. */
export function writeConfig(dir: string, config: unknown, name = "config.json5"): string {
  const file = path.join(dir, name);
  writeFileSync(file, JSON.stringify(config, null, 2));
  return file;
}

export function spawnDaemon(configFile: string, opts: { env?: NodeJS.ProcessEnv; execArgv?: string[]; args?: string[] } = {}): DaemonProcess {
  const t0 = performance.now();
  const child = spawn(process.execPath, [...DAEMON_NODE_FLAGS, ...(opts.execArgv ?? []), "src/bin.js", "start", "--config", configFile, ...(opts.args ?? [])], {
    cwd: REPO_ROOT,
    env: { ...process.env, NODE_ENV: "production", ...opts.env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "";
  const waiters = new Set<{ text: string; resolve: () => void }>();
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => child.once("exit", (code, signal) => resolve({ code, signal })));
  const listening = new Promise<{ port: number; ms: number }>((resolve, reject) => {
    let done = false;
    const onData = (d: Buffer) => {
      out += d.toString();
      for (const w of waiters) if (out.includes(w.text)) (waiters.delete(w), w.resolve());
      if (done) return;
      const line = out.split("\n").find((l) => l.includes("switchboard listening"));
      if (!line) return;
      const m = /:\/\/[^"\s]*:(\d+)\//.exec(line);
      if (!m) return;
      done = true;
      resolve({ port: Number(m[1]), ms: performance.now() - t0 });
    };
    child.stdout?.on("data", onData);
    child.stderr?.on("data", onData);
    void exited.then(({ code, signal }) => {
      for (const w of waiters) w.resolve();
      waiters.clear();
      if (!done) reject(new Error(`daemon exited before listening (code ${code}, signal ${signal}):\n${out}`));
    });
  });
  // A caller that only awaits `exited` must not see an unhandled rejection.
  listening.catch(() => undefined);
  return {
    child,
    pid: child.pid as number,
    listening,
    exited,
    output: () => out,
    logged(text) {
      if (out.includes(text) || child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
      return new Promise((resolve) => waiters.add({ text, resolve }));
    },
    rssBytes() {
      try {
        const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${child.pid}/status`, "utf8"));
        return m ? Number(m[1]) * 1024 : undefined;
      } catch {
        return undefined;
      }
    },
    kill(signal: NodeJS.Signals = "SIGTERM") {
      if (child.exitCode === null && child.signalCode === null) child.kill(signal);
    },
  };
}
