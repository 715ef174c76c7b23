/**
 * The fake OpenAI-compatible model server in its own process, so that it does not share an event
 * loop with an in-process daemon under measurement. It answers at once, echoing the last user
 * message ("echo: <text>").
 */
import { fork, type ChildProcess } from "node:child_process";
import { fileURLToPath } from "node:url";

export interface ModelProcess {
  baseUrl: string;
  pid: number;
  stop(): Promise<void>;
}

export async function startModelProcess(opts: { skipAgentToAgent?: boolean } = {}): Promise<ModelProcess> {
  const child: ChildProcess = fork(fileURLToPath(new URL("./model-child.ts", import.meta.url)), {
    execArgv: ["--import", "tsx"],
    stdio: ["ignore", "inherit", "inherit", "ipc"],
    env: { ...process.env, ...(opts.skipAgentToAgent ? { SB_MODEL_SKIP_A2A: "1" } : {}) },
  });
  const baseUrl = await new Promise<string>((resolve, reject) => {
    child.once("message", (m) => resolve((m as { baseUrl: string }).baseUrl));
    child.once("exit", (code) => reject(new Error(`model server process exited (${code})`)));
  });
  return {
    baseUrl,
    pid: child.pid as number,
    async stop() {
      if (child.exitCode !== null) return;
      const gone = new Promise((r) => child.once("exit", r));
      child.kill("SIGTERM");
      await gone;
    },
  };
}
