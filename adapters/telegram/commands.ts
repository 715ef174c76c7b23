/**
 * The bot's command menu. Telegram menu taps arrive as ordinary `/cmd` text messages, so the
 * only job here is registering the list, and registering it only when it changed: calling
 * setMyCommands on every restart has earned bots ~8-minute 429 lock-outs (ecosystem B.14).
 */
import { createHash } from "node:crypto";
import type { AdapterKv } from "../../src/channels/types.js";

export interface MenuCommand {
  /** 1-32 chars of a-z, 0-9, _ (Telegram rejects anything else with BOT_COMMAND_INVALID). */
  command: string;
  /** 1-256 chars. */
  description: string;
}

/** Mirrors the core's text commands (openclaw-behaviour §5). */
export const DEFAULT_COMMANDS: readonly MenuCommand[] = [
  { command: "send", description: "Reply delivery in this chat: /send on|off|inherit" },
  { command: "status", description: "Show the session status" },
  { command: "sid", description: "Show this chat's session id" },
  { command: "new", description: "Start a new session" },
  { command: "reset", description: "Reset the current session" },
  { command: "stop", description: "Stop the running reply" },
  { command: "help", description: "List the commands" },
];

export function commandsHash(commands: readonly MenuCommand[]): string {
  const canonical = commands.map((c) => [c.command, c.description]);
  return createHash("sha256").update(JSON.stringify(canonical)).digest("hex");
}

export interface SyncCommandsDeps {
  kv: AdapterKv;
  key: string;
  commands: readonly MenuCommand[];
  setMyCommands(commands: MenuCommand[]): Promise<unknown>;
}

/**
 * Registers the menu if its hash differs from the last registered one. The hash is stored only
 * after Telegram accepted the list, so a failed attempt is retried on the next start.
 */
export async function syncCommands(deps: SyncCommandsDeps): Promise<"registered" | "unchanged"> {
  const hash = commandsHash(deps.commands);
  if ((await deps.kv.get<string>(deps.key)) === hash) return "unchanged";
  await deps.setMyCommands(deps.commands.map((c) => ({ ...c })));
  await deps.kv.set(deps.key, hash);
  return "registered";
}
