/**
 * Open-loop load: inject messages at a fixed offered rate and match each reply to its message
 * (the fake model echoes the text, so "echo: <text>" answers "<text>"). Latency is injection →
 * reply received, on this process's clock.
 */
import { nowMs, percentile, sleep } from "./stats.js";

export interface LoadResult {
  offered: number;
  sent: number;
  answered: number;
  seconds: number;
  /** Answered messages per second, first injection → last reply. */
  throughput: number;
  p50: number;
  p99: number;
  max: number;
  /** CPU the system under test spent per answered message (µs, all its threads), when measured. */
  cpuUsPerMessage?: number;
  /**
   * CPU the benchmark's own processes (platform fake, load generator, model server) spent per
   * answered message (µs), when measured: on this host they share the cores with the daemon.
   */
  harnessCpuUsPerMessage?: number;
}

/** CPU time used so far (µs, all threads): by the system under test and by the benchmark's own processes. */
export interface CpuReading {
  system: number;
  harness: number;
}

export class ReplyClock {
  private readonly sentAt = new Map<string, number>();
  private readonly latencies: number[] = [];
  private lastAt = 0;
  private outstanding = 0;

  /** Call when a message is injected. */
  sent(text: string): void {
    this.sentAt.set(text, nowMs());
    this.outstanding++;
  }

  /** Call for every reply the platform fake receives. */
  replied(replyText: string): void {
    const text = replyText.startsWith("echo: ") ? replyText.slice(6) : replyText;
    const at = this.sentAt.get(text);
    if (at === undefined) return;
    this.sentAt.delete(text);
    const now = nowMs();
    this.latencies.push(now - at);
    this.lastAt = now;
    this.outstanding--;
  }

  /**
   * Injects `rate` msg/s for `seconds` (`inject(i)` sends message i and returns its text), waits
   * for every reply (at most `drainMs`), and summarises. `cpu` reads the CPU time used so far,
   * for the CPU-per-message figures.
   */
  async run(rate: number, seconds: number, inject: (i: number) => string, cpu?: () => CpuReading, drainMs = 60_000): Promise<LoadResult> {
    this.latencies.length = 0;
    const cpu0 = cpu?.();
    const total = Math.max(1, Math.round(rate * seconds));
    const start = nowMs();
    let i = 0;
    while (i < total) {
      const due = Math.min(total, Math.floor(((nowMs() - start) / 1000) * rate) + 1);
      for (; i < due; i++) this.sent(inject(i));
      if (i < total) await sleep(1);
    }
    const deadline = nowMs() + drainMs;
    while (this.outstanding > 0 && nowMs() < deadline) await sleep(2);
    const lat = this.latencies;
    const secs = Math.max(1e-6, (this.lastAt - start) / 1000);
    const result: LoadResult = { offered: rate, sent: total, answered: lat.length, seconds: secs, throughput: lat.length / secs, p50: percentile(lat, 50), p99: percentile(lat, 99), max: Math.max(...lat) };
    if (cpu0 && cpu && lat.length) {
      const cpu1 = cpu();
      result.cpuUsPerMessage = (cpu1.system - cpu0.system) / lat.length;
      result.harnessCpuUsPerMessage = (cpu1.harness - cpu0.harness) / lat.length;
    }
    return result;
  }
}
