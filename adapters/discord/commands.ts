/**
 * Native slash commands: definitions, their text form for the core, and registration.
 * Names match the chat commands of spec §5 so the core parses exactly one form ("/send off").
 */
import { createHash } from "node:crypto";
import {
  ApplicationCommandOptionType,
  ApplicationCommandType,
  ApplicationIntegrationType,
  InteractionContextType,
  Routes,
  type REST,
  type RESTPutAPIApplicationCommandsJSONBody,
} from "discord.js";
import type { Logger } from "pino";
import type { AdapterKv } from "../../src/channels/types.js";

export const SEND_MODES = ["on", "off", "inherit"] as const;

// Guild channels and the bot's DMs; the app is installed to guilds, not to user accounts.
const WHERE = { contexts: [InteractionContextType.Guild, InteractionContextType.BotDM], integration_types: [ApplicationIntegrationType.GuildInstall] };

export const NATIVE_COMMANDS = [
  {
    name: "send",
    description: "Allow or stop replies in this chat (owners only)",
    type: ApplicationCommandType.ChatInput,
    options: [
      {
        name: "mode",
        description: "on, off, or inherit the default policy",
        type: ApplicationCommandOptionType.String,
        required: true,
        choices: SEND_MODES.map((m) => ({ name: m, value: m })),
      },
    ],
    ...WHERE,
  },
  { name: "status", description: "Show this chat's session status", type: ApplicationCommandType.ChatInput, ...WHERE },
  { name: "sid", description: "Show this chat's session key and send policy", type: ApplicationCommandType.ChatInput, ...WHERE },
  { name: "new", description: "Start a fresh session in this chat", type: ApplicationCommandType.ChatInput, ...WHERE },
  { name: "stop", description: "Stop the running reply and its sub-agents", type: ApplicationCommandType.ChatInput, ...WHERE },
] satisfies RESTPutAPIApplicationCommandsJSONBody;

const NAMES = new Set<string>(NATIVE_COMMANDS.map((c) => c.name));

export function isNativeCommand(name: string): boolean {
  return NAMES.has(name);
}

/** "/send" + option values in the order given: `/send mode:off` → "/send off". */
export function commandText(name: string, options: ReadonlyArray<{ value?: string | number | boolean }>): string {
  return [`/${name}`, ...options.map((o) => o.value).filter((v) => v !== undefined).map(String)].join(" ");
}

export function commandsHash(appId: string, defs: unknown = NATIVE_COMMANDS): string {
  return createHash("sha256").update(JSON.stringify({ appId, defs })).digest("hex");
}

const kvKey = (appId: string) => `commands:${appId}`;

/**
 * Bulk-overwrites the app's global commands only when the definitions changed since the last
 * successful registration: command writes are heavily rate limited (200 creates/day per app), and
 * re-registering on every restart is a known way to get locked out.
 */
export async function registerCommands(opts: { rest: REST; appId: string; kv: AdapterKv; log: Logger }): Promise<"registered" | "unchanged"> {
  const hash = commandsHash(opts.appId);
  if ((await opts.kv.get<string>(kvKey(opts.appId))) === hash) return "unchanged";
  await opts.rest.put(Routes.applicationCommands(opts.appId), { body: NATIVE_COMMANDS });
  await opts.kv.set(kvKey(opts.appId), hash);
  opts.log.info({ appId: opts.appId, commands: NATIVE_COMMANDS.length }, "discord: registered slash commands");
  return "registered";
}
