/** CPU time of processes, for the benchmarks' CPU-per-message figures (Linux /proc). */
import { readFileSync } from "node:fs";

/** USER_HZ: 100 on every Linux this runs on (getconf CLK_TCK). */
const CLOCK_TICKS_PER_SECOND = 100;

/** utime + stime of a process, all threads, in µs. */
export function processCpuMicros(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  // Fields after the command name, which is in parentheses and may contain spaces.
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return ((Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS_PER_SECOND) * 1e6;
}

/** user + system CPU of this process, all threads, in µs. */
export function ownCpuMicros(): number {
  const c = process.cpuUsage();
  return c.user + c.system;
}
