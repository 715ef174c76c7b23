/**
 * Gateway latency and footprint with many sessions: the daemon runs as a child process
 * (`node src/bin.js start`) on a state directory seeded with 10,000 or 100,000 session entries
 * (and a 10,000-message transcript); an outside WebSocket client times each call.
 * Also: cold start to "listening" (empty state and 100,000 sessions) and resident memory.
 */
import { GatewayClient } from "../src/gateway/client.js";
import { spawnDaemon, writeConfig, type DaemonProcess } from "../test/helpers/daemon-process.js";
import { tempDir } from "./lib/fixtures.js";
import { seedSessions, seedTranscript } from "./lib/seed.js";
import { percentile, sleep, spread, timeEach, type Spread } from "./lib/stats.js";

const TOKEN = "bench-gateway-token-0123456789";

async function startDaemon(dir: string, stateDir: string): Promise<{ daemon: DaemonProcess; client: GatewayClient; startMs: number }> {
  const config = writeConfig(dir, { stateDir, log: { level: "info" }, gateway: { port: 0, auth: { token: TOKEN } }, channels: { webchat: { enabled: true } } });
  const daemon = spawnDaemon(config);
  const { port, ms } = await daemon.listening;
  const client = new GatewayClient({ url: `ws://127.0.0.1:${port}/`, token: TOKEN });
  await client.connect();
  return { daemon, client, startMs: ms };
}

async function stopDaemon(d: { daemon: DaemonProcess; client: GatewayClient }): Promise<void> {
  d.client.close();
  d.daemon.kill("SIGTERM");
  await d.daemon.exited;
}

/** Per-run p50 of `calls` sequential calls, `runs` times. */
async function p50Runs(runs: number, calls: number, fn: (i: number) => Promise<unknown>): Promise<{ p50: Spread; p99: Spread }> {
  const p50s: number[] = [];
  const p99s: number[] = [];
  for (let r = 0; r < runs; r++) {
    const d = await timeEach(calls, (i) => fn(r * calls + i));
    p50s.push(percentile(d, 50));
    p99s.push(percentile(d, 99));
  }
  return { p50: spread(p50s), p99: spread(p99s) };
}

export interface GatewayFigures {
  list10k: { p50: Spread; p99: Spread };
  history10k: { p50: Spread; p99: Spread };
  list100k: { p50: Spread; p99: Spread };
  patch100k: { p50: Spread; p99: Spread };
  rss100kMb: Spread;
  coldStart100kMs: Spread;
  coldStartEmptyMs: Spread;
}

export async function benchGateway(o: { runs: number; calls: number; starts: number }): Promise<GatewayFigures> {
  const tmp = tempDir();
  try {
    // ---- 10,000 sessions, one of them with a 10,000-message transcript
    const small = `${tmp.dir}/s10k`;
    const entries10k = await seedSessions(small, 10_000);
    const longOne = entries10k[entries10k.length - 1];
    seedTranscript(small, longOne, 10_000);
    let d = await startDaemon(tmp.dir, small);
    const client10k = d.client;
    await client10k.request("sessions.list", { limit: 200 });
    const list10k = await p50Runs(o.runs, o.calls, async () => {
      const res = await client10k.request("sessions.list", { limit: 200 });
      if (res.count !== 200) throw new Error(`sessions.list returned ${res.count} rows`);
    });
    const history10k = await p50Runs(o.runs, o.calls, async () => {
      const res = await client10k.request("chat.history", { sessionKey: longOne.key, limit: 200 });
      if (res.messages.length !== 200) throw new Error(`chat.history returned ${res.messages.length} messages`);
    });
    await stopDaemon(d);

    // ---- 100,000 sessions: list, patch, memory, start time
    const big = `${tmp.dir}/s100k`;
    const entries100k = await seedSessions(big, 100_000);
    const rss: number[] = [];
    const starts: number[] = [];
    let list100k: GatewayFigures["list100k"] | undefined;
    let patch100k: GatewayFigures["patch100k"] | undefined;
    for (let s = 0; s < o.starts; s++) {
      d = await startDaemon(tmp.dir, big);
      starts.push(d.startMs);
      const c = d.client;
      const health = await c.request("health", {});
      if (health.sessions < 100_000) throw new Error(`daemon loaded ${health.sessions} sessions, expected 100,000`);
      if (s === 0) {
        await c.request("sessions.list", { limit: 200 });
        list100k = await p50Runs(o.runs, o.calls, async () => {
          const res = await c.request("sessions.list", { limit: 200 });
          if (res.count !== 200) throw new Error(`sessions.list returned ${res.count} rows`);
        });
        patch100k = await p50Runs(o.runs, o.calls, async (i) => {
          const e = entries100k[(i * 7919) % entries100k.length];
          await c.request("sessions.patch", { key: e.key, sendPolicy: i % 2 ? "allow" : "deny" });
        });
      } else {
        for (let i = 0; i < 20; i++) await c.request("sessions.list", { limit: 200 });
      }
      await sleep(500);
      rss.push((d.daemon.rssBytes() ?? Number.NaN) / (1024 * 1024));
      await stopDaemon(d);
    }

    // ---- cold start with an empty state directory (tsx's compile cache warmed by the runs above)
    const empty: number[] = [];
    for (let s = 0; s < o.starts; s++) {
      const dir = `${tmp.dir}/empty${s}`;
      const e = await startDaemon(tmp.dir, dir);
      empty.push(e.startMs);
      await stopDaemon(e);
    }
    return { list10k, history10k, list100k: list100k!, patch100k: patch100k!, rss100kMb: spread(rss), coldStart100kMs: spread(starts), coldStartEmptyMs: spread(empty) };
  } finally {
    tmp.remove();
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  console.log(JSON.stringify(await benchGateway({ runs: 5, calls: 100, starts: 3 }), (k, v) => (k === "runs" ? undefined : typeof v === "number" ? Number(v.toFixed(2)) : v), 1));
}
