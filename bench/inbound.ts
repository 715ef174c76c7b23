/**
 * Inbound throughput and added latency across 1,000 sessions, two ways:
 *
 * - Telegram end to end: the Telegram Bot API fake (this process) → the real Telegram adapter
 *   (long polling) in a daemon child process (`node src/bin.js start`, SQLite state) → router
 *   (session key, entry update, transcript append) → a model call to the fake OpenAI-compatible
 *   server (its own process, answers at once) → outbox → sendMessage back to the fake. Latency is
 *   injecting the update → the fake receiving the matching sendMessage, on this process's clock.
 * - Core pipeline: the same daemon code in this process, fed InboundMessages through
 *   `app.router.accept` with a recording adapter instead of Telegram's wire (same model process).
 *
 * Each run offers a fixed load (open loop) and waits for every reply; a burst run measures the
 * most the pipeline drains per second. Telegram's send limits are raised in the config (the
 * fake does not enforce them here; they are exercised by test/reliability/rate-limit.test.ts),
 * and agents.defaults.maxConcurrent is 64 (the default 4 suits slow real models; see WORKLOAD).
 */
import { fork } from "node:child_process";
import { fileURLToPath } from "node:url";
import pino from "pino";
import type { ChannelAdapter, InboundMessage, OutboundTarget } from "../src/channels/types.js";
import { parseConfig } from "../src/config/load.js";
import { createFullDaemon } from "../src/full-daemon.js";
import { GatewayClient } from "../src/gateway/client.js";
import { FakeTelegramBotApi, fakeUser, privateChat } from "../test/fakes/telegram-bot-api.js";
import { spawnDaemon, writeConfig } from "../test/helpers/daemon-process.js";
import { benchConfig, tempDir } from "./lib/fixtures.js";
import { ownCpuMicros, processCpuMicros } from "./lib/cpu.js";
import { ReplyClock, type CpuReading, type LoadResult } from "./lib/load.js";
import type { RelayOptions } from "./lib/floor-relay.js";
import { startModelProcess } from "./lib/model-process.js";
import { processStats, type GcCounts } from "../src/util/process-stats.js";
import { nowMs, sleep } from "./lib/stats.js";

export interface InboundOptions {
  sessions: number;
  /** Offered load of the measured runs (messages/s) and each run's length. */
  rate: number;
  seconds: number;
  runs: number;
  /** Size of the burst of the saturation run. */
  burst: number;
  maxConcurrent: number;
}

/**
 * The workload `npm run bench` measures. maxConcurrent 64: at 2,000 msg/s a run holds its slot for
 * its model call, ~1.5 ms when the daemon keeps up but 6–12 ms while it works off a hiccup; with
 * 16 slots the run pool itself became the bottleneck then, and the backlog grew (Telegram p99
 * medians 53–84 ms against 14–37 ms with 64 in one interleaved comparison of three invocations
 * each). A deployment expecting this rate sizes the pool for it the same way.
 */
export const WORKLOAD: InboundOptions = { sessions: 1000, rate: 2000, seconds: 3, runs: 3, burst: 5000, maxConcurrent: 64 };

/**
 * The daemon's model request on this workload (system prompt, tool definitions, up to 60 history
 * messages: 5 KB on average, measured) and its synchronous appends per answered message (three
 * transcript lines — the user's message, the reply, its delivery — and one send-journal line).
 */
export const DAEMON_MODEL_BODY_BYTES = 5000;
export const DAEMON_APPENDS_PER_MESSAGE = 4;

export interface InboundFigures {
  runs: LoadResult[];
  burst: LoadResult[];
  /**
   * The daemon's full collections (mark-compacts) during each measured run, where it reports them
   * (`health.process.gc`): each pauses its event loop and slows it for tens of ms around that, and
   * a run with one has its p99 set by it.
   */
  fullGcsPerRun?: number[];
  /** The daemon's largest resident set during the whole workload (MB), sampled every 100 ms. */
  peakRssMb?: number;
}

async function measure(clock: ReplyClock, o: InboundOptions, inject: (tag: string) => (i: number) => string, cpu: () => CpuReading, gc?: () => Promise<GcCounts>): Promise<InboundFigures> {
  // Warm-up: creates the sessions (one message each), then runs the offered load once to warm
  // the JIT, the connection pools and SQLite's cache; none of it is counted.
  await clock.run(Math.min(o.rate, 2000), o.sessions / Math.min(o.rate, 2000), inject("warm"));
  await clock.run(o.rate, 2, inject("warm2"));
  const runs: LoadResult[] = [];
  const fullGcsPerRun: number[] = [];
  for (let r = 0; r < o.runs; r++) {
    const before = await gc?.();
    runs.push(await clock.run(o.rate, o.seconds, inject(`r${r}`), cpu));
    const after = await gc?.();
    if (before && after) fullGcsPerRun.push(after.full - before.full);
  }
  const burst: LoadResult[] = [];
  for (let r = 0; r < o.runs; r++) burst.push(await clock.run(1e9, o.burst / 1e9, inject(`b${r}`)));
  return { runs, burst, ...(gc ? { fullGcsPerRun } : {}) };
}

/** The largest value `read` returns while `work` runs, sampled every 100 ms. */
async function peakDuring<T>(read: () => number | undefined, work: Promise<T>): Promise<{ result: T; peak: number }> {
  let peak = read() ?? 0;
  const sampler = setInterval(() => (peak = Math.max(peak, read() ?? 0)), 100);
  try {
    const result = await work;
    return { result, peak: Math.max(peak, read() ?? 0) };
  } finally {
    clearInterval(sampler);
  }
}

/** The Bot API fake, its reply clock and the load's injector: the Telegram benches' common harness. */
async function telegramHarness(o: InboundOptions) {
  const api = new FakeTelegramBotApi({ history: false });
  const apiRoot = await api.start();
  const clock = new ReplyClock();
  api.override("sendMessage", (body) => {
    clock.replied(String(body.text));
    return undefined;
  });
  const users = Array.from({ length: o.sessions }, (_, i) => fakeUser(`User${i}`, { username: `user${i}` }));
  const inject = (tag: string) => (i: number) => {
    const u = users[i % users.length];
    const text = `${tag}-${i}`;
    api.injectText({ chat: privateChat(u), from: u, text });
    return text;
  };
  return { api, apiRoot, clock, inject };
}

export async function benchTelegramInbound(o: InboundOptions): Promise<InboundFigures> {
  const tmp = tempDir();
  const model = await startModelProcess();
  const { api, apiRoot, clock, inject } = await telegramHarness(o);
  const config = writeConfig(
    tmp.dir,
    benchConfig({
      stateDir: `${tmp.dir}/data`,
      modelBaseUrl: model.baseUrl,
      maxConcurrent: o.maxConcurrent,
      telegram: { enabled: true, botToken: api.token, apiRoot, rateLimit: { perChatPerSecond: 1_000_000, globalPerSecond: 1_000_000 } },
    }),
  );
  // SB_BENCH_DAEMON_ARGS passes node flags to the daemon child, e.g. "--cpu-prof --cpu-prof-dir=/tmp/prof".
  const daemon = spawnDaemon(config, { execArgv: process.env.SB_BENCH_DAEMON_ARGS?.split(" ").filter(Boolean) });
  try {
    const { port } = await daemon.listening;
    const deadline = nowMs() + 10_000;
    while (!api.isPolling && nowMs() < deadline) await sleep(10);
    const client = new GatewayClient({ url: `ws://127.0.0.1:${port}/` });
    await client.connect();
    try {
      const gc = async (): Promise<GcCounts> => (await client.request("health", {})).process.gc;
      const cpu = () => ({ system: processCpuMicros(daemon.pid), harness: ownCpuMicros() + processCpuMicros(model.pid) });
      const { result: figures, peak } = await peakDuring(() => daemon.rssBytes(), measure(clock, o, inject, cpu, gc));
      const health = await client.request("health", {});
      if (health.sessions < o.sessions) throw new Error(`expected ${o.sessions} sessions, the daemon has ${health.sessions}`);
      return { ...figures, peakRssMb: peak / 2 ** 20 };
    } finally {
      client.close();
    }
  } finally {
    daemon.kill("SIGTERM");
    await daemon.exited;
    await api.stop();
    await model.stop();
    tmp.remove();
  }
}

/** What the wire-floor relay does besides relaying (see bench/lib/floor-relay.ts). */
export interface FloorVariant {
  modelBodyBytes: number;
  appendsPerMessage: number;
}

/**
 * The same Telegram workload through bench/lib/floor-relay.ts, with no Switchboard in it: what
 * the wire alone (and, in a variant, the daemon's model body size and file appends) costs per
 * message on this host, beside the daemon's figures.
 */
export async function benchWireFloor(o: InboundOptions, variant: FloorVariant): Promise<InboundFigures> {
  const tmp = tempDir();
  const model = await startModelProcess();
  const { api, apiRoot, clock, inject } = await telegramHarness(o);
  const options: RelayOptions = { apiRoot, token: api.token, modelBaseUrl: model.baseUrl, dir: tmp.dir, ...variant };
  const relay = fork(fileURLToPath(new URL("./lib/floor-relay.ts", import.meta.url)), [JSON.stringify(options)], { execArgv: ["--import", "tsx"], stdio: ["ignore", "inherit", "inherit", "ipc"] });
  const exited = new Promise<void>((resolve) => relay.once("exit", () => resolve()));
  try {
    await Promise.race([new Promise<void>((resolve) => relay.once("message", () => resolve())), exited.then(() => Promise.reject(new Error(`floor relay exited (${relay.exitCode})`)))]);
    return await measure(clock, o, inject, () => ({ system: processCpuMicros(relay.pid as number), harness: ownCpuMicros() + processCpuMicros(model.pid) }));
  } finally {
    relay.kill("SIGKILL");
    await exited;
    await api.stop();
    await model.stop();
    tmp.remove();
  }
}

export async function benchCorePipeline(o: InboundOptions): Promise<InboundFigures> {
  const tmp = tempDir();
  const model = await startModelProcess();
  const clock = new ReplyClock();
  let next = 1;
  const adapter: ChannelAdapter = {
    channel: "telegram",
    accountId: "default",
    textChunkLimit: 4000,
    async start() {},
    async stop() {},
    async send(_t: OutboundTarget, text: string) {
      clock.replied(text);
      return { messageId: String(next++) };
    },
    async typing() {},
    health: () => ({ connected: true, lastInboundAt: null, lastError: null }),
  };
  const config = parseConfig(benchConfig({ stateDir: `${tmp.dir}/data`, modelBaseUrl: model.baseUrl, maxConcurrent: o.maxConcurrent }), "<bench>", {});
  const daemon = createFullDaemon({ config, log: pino({ level: "info" }, pino.destination("/dev/null")), env: {}, plugins: [(d) => d.app.registerAdapter(adapter)] });
  await daemon.start();
  try {
    const msg = (i: number, text: string): InboundMessage => {
      const peer = String(10_000 + (i % o.sessions));
      return { channel: "telegram", accountId: "default", chatType: "direct", peerId: peer, senderId: peer, senderName: `User ${peer}`, text, messageId: `m-${text}`, wasMentioned: true, to: peer, timestamp: Date.now() };
    };
    const figures = await measure(
      clock,
      o,
      (tag) => (i) => {
        const text = `${tag}-${i}`;
        void daemon.app.router.accept(msg(i, text));
        return text;
      },
      () => ({ system: ownCpuMicros(), harness: processCpuMicros(model.pid) }),
      async () => processStats().gc,
    );
    if (daemon.app.sessions.size < o.sessions) throw new Error(`expected ${o.sessions} sessions, the daemon has ${daemon.app.sessions.size}`);
    return figures;
  } finally {
    await daemon.stop();
    await model.stop();
    tmp.remove();
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const o: InboundOptions = { ...WORKLOAD, rate: Number(process.env.RATE ?? WORKLOAD.rate) };
  const show = (label: string, f: InboundFigures) => {
    for (const r of f.runs) console.log(label, `offered ${r.offered}/s → ${r.throughput.toFixed(0)}/s p50 ${r.p50.toFixed(1)} ms p99 ${r.p99.toFixed(1)} ms (${r.answered}/${r.sent}) cpu ${r.cpuUsPerMessage?.toFixed(0)} µs/msg, fakes ${r.harnessCpuUsPerMessage?.toFixed(0)} µs/msg`);
    for (const r of f.burst) console.log(label, `burst ${r.sent} → ${r.throughput.toFixed(0)}/s`);
    if (f.fullGcsPerRun) console.log(label, `full collections per measured run: ${f.fullGcsPerRun.join(", ")}`);
    if (f.peakRssMb !== undefined) console.log(label, `peak resident memory ${f.peakRssMb.toFixed(0)} MB`);
  };
  const only = process.env.ONLY;
  if (!only || only === "telegram") show("telegram", await benchTelegramInbound(o));
  if (!only || only === "core") show("core", await benchCorePipeline(o));
  if (!only || only === "floor") {
    show("floor", await benchWireFloor(o, { modelBodyBytes: 0, appendsPerMessage: 0 }));
    show("floor+", await benchWireFloor(o, { modelBodyBytes: DAEMON_MODEL_BODY_BYTES, appendsPerMessage: DAEMON_APPENDS_PER_MESSAGE }));
  }
}
