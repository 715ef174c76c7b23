/**
 * The daemon with every feature wired in; `switchboard start` and the benchmarks run this.
 */
import { Daemon, type DaemonOptions } from "./daemon.js";

export function createFullDaemon(opts: DaemonOptions): Daemon {
  return new Daemon({ ...opts, plugins: [...(opts.plugins ?? [])] });
}
