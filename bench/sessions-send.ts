/**
 * sessions_send overhead (wait mode, instant model): the real tool of a real daemon (SQLite
 * state, the OpenAI-compatible client against the fake model server in its own process) sends
 * from one session to another and waits for the reply. Overhead = the tool call's wall time
 * minus the time the target run spent inside model calls (timed around the provider), i.e.
 * what the daemon adds: resolution, run start, lane, transcript writes, the server-side wait.
 * The fake model ends the agent-to-agent follow-up steps at once (REPLY_SKIP/ANNOUNCE_SKIP), and
 * each call waits for that background flow before the next one starts.
 *
 * Also measured, for comparison: the gateway path an outside client would use (`agent` on the
 * target session, then `agent.wait`), minus its model time.
 */
import pino from "pino";
import { parseConfig } from "../src/config/load.js";
import { createOpenAiChatProvider } from "../src/agents/models/openai-chat.js";
import type { ModelProvider } from "../src/agents/models/provider.js";
import { createFullDaemon } from "../src/full-daemon.js";
import { GatewayClient } from "../src/gateway/client.js";
import { tempDir } from "./lib/fixtures.js";
import { startModelProcess } from "./lib/model-process.js";
import { nowMs, percentile, spread, type Spread } from "./lib/stats.js";

export interface SendFigures {
  toolOverhead: { p50: Spread; p99: Spread };
  gatewayOverhead: { p50: Spread; p99: Spread };
  modelMs: Spread;
}

export async function benchSessionsSend(o: { runs: number; calls: number }): Promise<SendFigures> {
  const tmp = tempDir();
  const model = await startModelProcess({ skipAgentToAgent: true });
  let modelTime = 0;
  const timed = (inner: ModelProvider): ModelProvider => ({
    id: inner.id,
    async complete(req) {
      const t = nowMs();
      try {
        return await inner.complete(req);
      } finally {
        modelTime += nowMs() - t;
      }
    },
  });
  const config = parseConfig(
    { stateDir: `${tmp.dir}/data`, gateway: { port: 0 }, models: { providers: { fake: { baseUrl: model.baseUrl, models: [{ id: "m" }] } } }, agents: { defaults: { model: "fake/m" } } },
    "<bench>",
    {},
  );
  const daemon = createFullDaemon({
    config,
    log: pino({ level: "warn" }, pino.destination("/dev/null")),
    env: {},
    modelProvider: (id) => timed(createOpenAiChatProvider({ id, baseUrl: model.baseUrl, timeoutMs: 30_000 })),
  });
  const { port } = await daemon.start();
  const client = new GatewayClient({ url: `ws://127.0.0.1:${port}/` });
  try {
    const { app } = daemon;
    const requester = "agent:main:telegram:group:-100777";
    const target = "agent:main:telegram:group:-100888";
    await app.sessions.upsert(requester, "main", { chatType: "group", channel: "telegram", displayName: "Requesters" });
    await app.sessions.upsert(target, "main", { chatType: "group", channel: "telegram", displayName: "Targets" });
    const tool = app.toolsFor({ sessionKey: requester, agentId: "main" }).find((t) => t.name === "sessions_send");
    if (!tool) throw new Error("sessions_send tool is not registered");
    const background = daemon.features?.background;

    const toolP50: number[] = [];
    const toolP99: number[] = [];
    const modelMs: number[] = [];
    for (let r = -1; r < o.runs; r++) {
      const overheads: number[] = [];
      for (let i = 0; i < o.calls; i++) {
        modelTime = 0;
        const t = nowMs();
        const res = (await tool.execute({ sessionKey: target, message: `ping ${r}-${i}`, timeoutSeconds: 30 }, { sessionKey: requester, agentId: "main", runId: `bench-${r}-${i}`, signal: new AbortController().signal, park: (wait) => wait })) as { status: string; reply?: string };
        const wall = nowMs() - t;
        const m = modelTime;
        if (res.status !== "ok" || !res.reply?.endsWith(`ping ${r}-${i}`)) throw new Error(`sessions_send answered ${JSON.stringify(res)}`);
        overheads.push(wall - m);
        modelMs.push(m);
        await background?.idle(10_000);
      }
      if (r < 0) continue; // warm-up
      toolP50.push(percentile(overheads, 50));
      toolP99.push(percentile(overheads, 99));
    }

    await client.connect();
    const gwP50: number[] = [];
    const gwP99: number[] = [];
    for (let r = -1; r < o.runs; r++) {
      const overheads: number[] = [];
      for (let i = 0; i < o.calls; i++) {
        modelTime = 0;
        const t = nowMs();
        const idem = `gw-${r}-${i}`;
        const accepted = client.request("agent", { sessionKey: target, message: `gw ${r}-${i}`, idempotencyKey: idem });
        await accepted;
        const waited = await client.request("agent.wait", { runId: idem, timeoutMs: 30_000 });
        const wall = nowMs() - t;
        if (waited.status !== "ok") throw new Error(`agent.wait answered ${JSON.stringify(waited)}`);
        overheads.push(wall - modelTime);
      }
      if (r < 0) continue;
      gwP50.push(percentile(overheads, 50));
      gwP99.push(percentile(overheads, 99));
    }
    return { toolOverhead: { p50: spread(toolP50), p99: spread(toolP99) }, gatewayOverhead: { p50: spread(gwP50), p99: spread(gwP99) }, modelMs: spread([percentile(modelMs, 50)]) };
  } finally {
    client.close();
    await daemon.stop();
    await model.stop();
    tmp.remove();
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  console.log(JSON.stringify(await benchSessionsSend({ runs: 5, calls: 40 }), (k, v) => (k === "runs" ? undefined : typeof v === "number" ? Number(v.toFixed(2)) : v), 1));
}
