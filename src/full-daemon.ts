/**
 * The daemon with every feature wired in; `switchboard start` and the benchmarks run this.
 *
 * On top of the core: the session tools (sessions_list/history/send/spawn, agents_list) with the
 * sub-agent registry, cron jobs, and the `POST /hooks/agent` webhook. Work left by a previous
 * process (sub-agent runs to finish or announce) is resumed only once the daemon is fully up,
 * because an announce needs the outbox and the chat channels running.
 */
import { Daemon, type DaemonOptions } from "./daemon.js";
import { SubagentRegistry, type SubagentRun } from "./agents/subagents/registry.js";
import { CronScheduler } from "./sources/cron.js";
import { registerHooksRoute } from "./sources/hooks.js";
import { BackgroundTasks } from "./tools/background.js";
import { SendWaits } from "./tools/send-waits.js";
import { sessionTools, subagentToolFilter } from "./tools/session-tools.js";
import type { AgentTool, ToolSource } from "./tools/types.js";
import { BoundedMap } from "./util/bounded-map.js";

/** How long stop() waits for background agent-to-agent and announce work. */
const BACKGROUND_DRAIN_MS = 5000;

export interface Features {
  subagents: SubagentRegistry;
  cron: CronScheduler;
  /** In-flight background work (agent-to-agent flows, announces). */
  background: BackgroundTasks;
}

export class FullDaemon extends Daemon {
  private wired?: Features;

  constructor(opts: DaemonOptions) {
    super({ ...opts, plugins: [...(opts.plugins ?? []), (daemon) => (daemon as FullDaemon).wire()] });
  }

  /** The features wired at start (undefined before). */
  get features(): Features | undefined {
    return this.wired;
  }

  override async start(): Promise<{ port: number }> {
    const started = await super.start();
    await this.wired?.subagents.resume();
    await this.wired?.cron.start();
    return started;
  }

  override async stop(): Promise<void> {
    // No new cron runs while the runtime drains.
    this.wired?.cron.stop();
    await super.stop();
  }

  private async wire(): Promise<void> {
    const { app } = this;
    const log = app.log.child({ component: "session-tools" });
    const background = new BackgroundTasks(log);
    const subagents = new SubagentRegistry({ app, space: app.kv.space<SubagentRun>("subagents"), background, log: app.log.child({ component: "subagents" }) });
    await subagents.load();
    const waits = new SendWaits();
    app.addTools(cachedPerScope((scope) => sessionTools({ app, subagents, background, waits, log }, scope)));
    app.addToolFilter(subagentToolFilter(app));
    app.stopHooks.push((sessionKey) => subagents.stopFor(sessionKey));
    registerHooksRoute(this.gateway, app, app.log.child({ component: "hooks" }));
    const cron = new CronScheduler(app, app.log.child({ component: "cron" }));
    this.wired = { subagents, cron, background };
    this.onStop(async () => {
      subagents.stop();
      await background.idle(BACKGROUND_DRAIN_MS);
    });
  }
}

export function createFullDaemon(opts: DaemonOptions): FullDaemon {
  return new FullDaemon(opts);
}

/** Scopes whose tool lists are kept (least recently used dropped first). */
const TOOL_LISTS_KEPT = 2000;

/**
 * The session tools are a pure function of the scope (the config is fixed for the daemon's life;
 * everything else is read when a tool runs), and every run asks for its list: the lists of
 * recently active sessions are built once instead of five closures and schemas per message.
 */
function cachedPerScope(source: ToolSource): ToolSource {
  const lists = new BoundedMap<string, AgentTool[]>(TOOL_LISTS_KEPT);
  return (scope) => {
    const key = `${scope.agentId}\u0000${scope.sessionKey}`;
    let list = lists.get(key);
    if (!list) lists.set(key, (list = source(scope)));
    return list;
  };
}
