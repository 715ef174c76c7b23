/**
 * The one source of truth for every option and its default (interfaces §2).
 * Every object is strict: an unknown key is an error, never silently ignored.
 */
import { Cron } from "croner";
import { z } from "zod";
import { isRedisUrl, maskUrlPassword, parseRedisUrl, REDIS_URL_FORMS } from "../store/redis-url.js";

const ChannelName = z.enum(["webchat", "telegram", "discord", "whatsapp"]);
const ChatTypeName = z.enum(["direct", "group", "channel"]);

/**
 * A rule's channel, compared case-insensitively as the policy does. Any other name could never
 * match: a misspelt deny rule would silently let every message through.
 */
const RuleChannel = z.string().refine((name) => (ChannelName.options as readonly string[]).includes(name.toLowerCase()), {
  error: (issue) => `no channel ${JSON.stringify(issue.input)}: expected ${ChannelName.options.map((c) => JSON.stringify(c)).join(" | ")}`,
});

const SendPolicyRule = z.strictObject({
  action: z.enum(["allow", "deny"]),
  match: z
    .strictObject({
      channel: RuleChannel.optional(),
      chatType: ChatTypeName.optional(),
      keyPrefix: z.string().min(1).optional(),
    })
    .default({}),
});

const ModelCost = z.strictObject({
  input: z.number().nonnegative().default(0),
  output: z.number().nonnegative().default(0),
});

const Provider = z.strictObject({
  api: z.literal("openai-chat").default("openai-chat"),
  baseUrl: z.string().min(1),
  apiKey: z.string().optional(),
  models: z.array(z.strictObject({ id: z.string().min(1), cost: ModelCost.optional(), contextWindow: z.number().int().positive().optional() })).default([]),
  timeoutMs: z.number().int().positive().default(120_000),
});

const Sandbox = z.strictObject({
  mode: z.enum(["off", "non-main", "all"]).default("off"),
  sessionToolsVisibility: z.enum(["spawned", "all"]).default("spawned"),
});

const SubagentDefaults = z.strictObject({
  archiveAfterMinutes: z.number().min(0).default(60),
  maxConcurrent: z.number().int().min(1).default(8),
  model: z.string().optional(),
});

const Agent = z.strictObject({
  id: z.string().min(1).regex(/^[a-z0-9][a-z0-9_-]{0,63}$/i, "agent id: letters, digits, '_' or '-', at most 64"),
  default: z.boolean().optional(),
  name: z.string().optional(),
  systemPrompt: z.string().optional(),
  model: z.string().optional(),
  subagents: z.strictObject({ allowAgents: z.array(z.string()).default([]), model: z.string().optional() }).default({ allowAgents: [] }),
});

const ToolFilter = z.strictObject({ allow: z.array(z.string()).default([]), deny: z.array(z.string()).default([]) });

type OwnerChannel = "telegram" | "discord" | "whatsapp" | "webchat";

/**
 * The sender ids each adapter reports. An owner entry is compared with `<channel>:<sender id>`
 * exactly (inbound/owners.ts), so an entry in any other form (a username, a number without its
 * "+") would be accepted and never match: the owner's commands would be ignored without a word.
 */
const OWNER_IDS: Partial<Record<OwnerChannel, { pattern: RegExp; hint: string }>> = {
  telegram: { pattern: /^\d+$/, hint: 'a Telegram owner is the numeric user id ("telegram:123456", e.g. from @userinfobot), not a username' },
  discord: { pattern: /^\d+$/, hint: 'a Discord owner is the numeric user id ("discord:998877", Developer Mode → Copy User ID)' },
  // A sender WhatsApp names only by its LID (no phone number known) is "<digits>@lid".
  whatsapp: { pattern: /^(\+\d{5,20}|\d+@(hosted\.)?lid)$/, hint: 'a WhatsApp owner is the number in E.164 with its + ("whatsapp:+15551234567")' },
};

const OWNER_ENTRY = /^(telegram|discord|whatsapp|webchat):(.+)$/;

/** `only`: the channel whose own list this is (`channels.<name>.owners`). */
function Owners(only?: OwnerChannel) {
  const entry = z.string().superRefine((value, ctx) => {
    const m = OWNER_ENTRY.exec(value);
    if (!m) return void ctx.addIssue({ code: "custom", message: "owner entries look like <channel>:<platform user id>" });
    const [, channel, id] = m as unknown as [string, OwnerChannel, string];
    if (only && channel !== only) {
      return void ctx.addIssue({ code: "custom", message: `"${value}" is a ${channel} owner: channels.${only}.owners lists ${only} owners (put it in commands.owners or channels.${channel}.owners)` });
    }
    const rule = OWNER_IDS[channel];
    if (rule && !rule.pattern.test(id)) ctx.addIssue({ code: "custom", message: `"${value}": ${rule.hint}` });
  });
  return z.array(entry);
}

const channelCommon = (channel: OwnerChannel) => ({
  requireMention: z.boolean().default(true),
  owners: Owners(channel).default([]),
  rateLimit: z
    .strictObject({ perChatPerSecond: z.number().positive().optional(), perChatPerMinute: z.number().positive().optional(), globalPerSecond: z.number().positive().optional() })
    .default({}),
});

const Telegram = z.strictObject({
  enabled: z.boolean().default(false),
  botToken: z.string().default(""),
  apiRoot: z.string().default("https://api.telegram.org"),
  textChunkLimit: z.number().int().min(100).max(4096).default(4000),
  accountId: z.string().default("default"),
  pollTimeoutSeconds: z.number().int().min(0).max(50).default(30),
  groups: z.record(z.string(), z.strictObject({ requireMention: z.boolean().optional() })).default({}),
  ...channelCommon("telegram"),
});

const Discord = z.strictObject({
  enabled: z.boolean().default(false),
  token: z.string().default(""),
  apiBase: z.string().default("https://discord.com/api"),
  applicationId: z.string().optional(),
  textChunkLimit: z.number().int().min(100).max(2000).default(2000),
  accountId: z.string().default("default"),
  registerCommands: z.boolean().default(true),
  ...channelCommon("discord"),
});

const WhatsApp = z.strictObject({
  enabled: z.boolean().default(false),
  /** Where the login (Baileys' creds and keys) is kept; default `<stateDir>/whatsapp`, so it moves with --state-dir. */
  authDir: z.string().min(1).optional(),
  textChunkLimit: z.number().int().min(100).max(65_000).default(4000),
  accountId: z.string().default("default"),
  ...channelCommon("whatsapp"),
});

/** Refuses a second item whose id equals an earlier one's, compared case-insensitively. */
function uniqueIds(what: string, list: string, why: string) {
  return (items: Array<{ id: string }>, ctx: z.RefinementCtx): void => {
    const first = new Map<string, number>();
    items.forEach((item, i) => {
      const key = item.id.trim().toLowerCase();
      const earlier = first.get(key);
      if (earlier === undefined) first.set(key, i);
      else ctx.addIssue({ code: "custom", path: [i, "id"], message: `${what} "${item.id}" is already the id of ${list}[${earlier}] (${why}, compared case-insensitively)` });
    });
  };
}

/**
 * A job's id names its session (`cron:<id>`, case-insensitive): two jobs with one id would share
 * a transcript, and the second could not be scheduled.
 */
const uniqueCronIds = uniqueIds("cron job id", "jobs", "ids name the job's cron:<id> session");

/**
 * An agent's id names its sessions (`agent:<id>:…`, lowercased): of two agents with one id the
 * second could never run — its model, systemPrompt and bindings would silently be the first's.
 */
const uniqueAgentIds = uniqueIds("agent id", "list", "agent ids name sessions agent:<id>:…");

/** Of several agents marked default the first would silently win (inbound/route.ts: defaultAgentId). */
function oneDefaultAgent(agents: Array<{ id: string; default?: boolean }>, ctx: z.RefinementCtx): void {
  const first = agents.findIndex((a) => a.default);
  agents.forEach((agent, i) => {
    if (agent.default && i > first) ctx.addIssue({ code: "custom", path: [i, "default"], message: `only one agent may be the default; list[${first}] ("${agents[first].id}") already is` });
  });
}

/**
 * What the scheduler (sources/cron.ts) would fail on at start, checked here so that `config check`
 * refuses it: otherwise the daemon starts and the job just never runs.
 */
function runnableCronJob(job: { schedule: string; timezone?: string }, ctx: z.RefinementCtx): void {
  if (job.timezone !== undefined && !isTimeZone(job.timezone)) {
    ctx.addIssue({ code: "custom", path: ["timezone"], message: `unknown time zone "${job.timezone}": use an IANA name such as "Europe/Berlin"` });
    return;
  }
  let next: Date | null;
  try {
    // Without a function croner schedules nothing: this only parses the pattern.
    next = new Cron(job.schedule, { timezone: job.timezone }).nextRun();
  } catch (err) {
    ctx.addIssue({ code: "custom", path: ["schedule"], message: `not a cron schedule (${JSON.stringify(job.schedule)}): ${(err as Error).message.replace(/^CronPattern: /, "")}` });
    return;
  }
  if (!next) ctx.addIssue({ code: "custom", path: ["schedule"], message: `the cron schedule ${JSON.stringify(job.schedule)} never comes (no date matches it)` });
}

function isTimeZone(name: string): boolean {
  try {
    new Intl.DateTimeFormat("en", { timeZone: name });
    return true;
  } catch {
    return false;
  }
}

/** A job naming no agent of agents.list would be skipped at every start. */
function cronAgentsExist(config: { agents: { list: Array<{ id: string }> }; cron: { jobs: Array<{ agentId?: string }> } }, ctx: z.RefinementCtx): void {
  const ids = config.agents.list.map((a) => a.id);
  const known = new Set(ids.map((id) => id.toLowerCase()));
  config.cron.jobs.forEach((job, i) => {
    if (job.agentId !== undefined && !known.has(job.agentId.trim().toLowerCase())) {
      ctx.addIssue({ code: "custom", path: ["cron", "jobs", i, "agentId"], message: `no agent "${job.agentId}" in agents.list (${ids.join(", ")})` });
    }
  });
}

/**
 * The stores src/store/kv.ts opens. Checked here so that `config check` refuses what `start`
 * would; messages never show a URL's password.
 */
const StoreUrl = z
  .string()
  .min(1)
  .superRefine((url, ctx) => {
    if (url === "memory://" || url === "memory" || url.startsWith("sqlite://")) return;
    if (!isRedisUrl(url)) {
      ctx.addIssue({ code: "custom", message: `unsupported store ${JSON.stringify(maskUrlPassword(url))}: use "sqlite://<file>", ${REDIS_URL_FORMS} or "memory://"` });
      return;
    }
    try {
      parseRedisUrl(url);
    } catch (err) {
      ctx.addIssue({ code: "custom", message: (err as Error).message });
    }
  });

export const ConfigSchema = z.strictObject({
  stateDir: z.string().default("./data"),
  store: z.strictObject({ url: StoreUrl.optional() }).default({}),
  log: z.strictObject({ level: z.enum(["fatal", "error", "warn", "info", "debug", "trace", "silent"]).default("info") }).default({ level: "info" }),
  gateway: z
    .strictObject({
      bind: z.string().default("127.0.0.1"),
      port: z.number().int().min(0).max(65535).default(18789),
      auth: z.strictObject({ token: z.string().optional() }).default({}),
      maxPayload: z.number().int().positive().default(8 * 1024 * 1024),
      tickIntervalMs: z.number().int().positive().default(30_000),
    })
    .default({ bind: "127.0.0.1", port: 18789, auth: {}, maxPayload: 8 * 1024 * 1024, tickIntervalMs: 30_000 }),
  models: z.strictObject({ providers: z.record(z.string(), Provider).default({}) }).default({ providers: {} }),
  agents: z
    .strictObject({
      defaults: z
        .strictObject({
          model: z.string().optional(),
          // Runs at once in the main lane, and as many in the nested one (sessions_send and its
          // follow-ups). A run waiting in sessions_send for another session's reply does not count.
          maxConcurrent: z.number().int().min(1).default(4),
          runTimeoutSeconds: z.number().min(0).default(600),
          maxToolRounds: z.number().int().min(1).max(100).default(12),
          subagents: SubagentDefaults.default({ archiveAfterMinutes: 60, maxConcurrent: 8 }),
          sandbox: Sandbox.default({ mode: "off", sessionToolsVisibility: "spawned" }),
        })
        .default({ maxConcurrent: 4, runTimeoutSeconds: 600, maxToolRounds: 12, subagents: { archiveAfterMinutes: 60, maxConcurrent: 8 }, sandbox: { mode: "off", sessionToolsVisibility: "spawned" } }),
      list: z.array(Agent).min(1).superRefine(uniqueAgentIds).superRefine(oneDefaultAgent).default([{ id: "main", default: true, name: "Main", subagents: { allowAgents: [] } }]),
    })
    .default({
      defaults: { maxConcurrent: 4, runTimeoutSeconds: 600, maxToolRounds: 12, subagents: { archiveAfterMinutes: 60, maxConcurrent: 8 }, sandbox: { mode: "off", sessionToolsVisibility: "spawned" } },
      list: [{ id: "main", default: true, name: "Main", subagents: { allowAgents: [] } }],
    }),
  tools: z
    .strictObject({
      subagents: z.strictObject({ tools: ToolFilter.default({ allow: [], deny: [] }) }).default({ tools: { allow: [], deny: [] } }),
      agentToAgent: z.strictObject({ enabled: z.boolean().default(false), allow: z.array(z.string()).default([]) }).default({ enabled: false, allow: [] }),
    })
    .default({ subagents: { tools: { allow: [], deny: [] } }, agentToAgent: { enabled: false, allow: [] } }),
  session: z
    .strictObject({
      scope: z.enum(["per-sender", "global"]).default("per-sender"),
      dmScope: z.enum(["main", "per-peer", "per-channel-peer", "per-account-channel-peer"]).default("main"),
      sendPolicy: z.strictObject({ rules: z.array(SendPolicyRule).default([]), default: z.enum(["allow", "deny"]).default("allow") }).default({ rules: [], default: "allow" }),
      agentToAgent: z.strictObject({ maxPingPongTurns: z.number().int().min(0).max(5).default(5) }).default({ maxPingPongTurns: 5 }),
    })
    .default({ scope: "per-sender", dmScope: "main", sendPolicy: { rules: [], default: "allow" }, agentToAgent: { maxPingPongTurns: 5 } }),
  commands: z.strictObject({ owners: Owners().default([]) }).default({ owners: [] }),
  channels: z
    .strictObject({
      webchat: z.strictObject({ enabled: z.boolean().default(true) }).default({ enabled: true }),
      telegram: Telegram.optional(),
      discord: Discord.optional(),
      whatsapp: WhatsApp.optional(),
    })
    .default({ webchat: { enabled: true } }),
  cron: z
    .strictObject({
      jobs: z
        .array(
          z.strictObject({
            id: z.string().min(1).regex(/^[A-Za-z0-9_.-]+$/, "cron job id: letters, digits, '_', '.', '-'"),
            schedule: z.string().min(1),
            agentId: z.string().optional(),
            message: z.string().min(1),
            timezone: z.string().optional(),
            enabled: z.boolean().default(true),
          }).superRefine(runnableCronJob),
        )
        .superRefine(uniqueCronIds)
        .default([]),
    })
    .default({ jobs: [] }),
  hooks: z.strictObject({ enabled: z.boolean().default(false), token: z.string().optional() }).default({ enabled: false }),
  bindings: z
    .array(
      z.strictObject({
        agentId: z.string().min(1),
        match: z.strictObject({
          channel: ChannelName,
          accountId: z.string().optional(),
          peer: z.strictObject({ kind: ChatTypeName, id: z.string().min(1) }).optional(),
        }),
      }),
    )
    .default([]),
  // Cross-references are checked on an otherwise valid config only: a broken agents.list is named
  // at its own path, not again at every job that names one of its agents.
}).superRefine(cronAgentsExist, { when: (payload) => payload.issues.length === 0 });

export type Config = z.infer<typeof ConfigSchema>;
export type ConfigInput = z.input<typeof ConfigSchema>;
export type ChannelName = z.infer<typeof ChannelName>;
export type AgentConfig = Config["agents"]["list"][number];
export type TelegramConfig = z.infer<typeof Telegram>;
export type DiscordConfig = z.infer<typeof Discord>;
export type WhatsAppConfig = z.infer<typeof WhatsApp>;
export type SendPolicyConfig = Config["session"]["sendPolicy"];
