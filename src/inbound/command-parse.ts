/**
 * Recognises standalone chat commands (interfaces §5). Only a message that *is* a command is
 * one: commands run before the send-policy gate and the agent, so a loose match ("hey /status",
 * "/send off please") would hijack ordinary prompts. Authorisation is the caller's job.
 * Normalisation follows the reference system (openclaw-behaviour §5.1).
 */

export type ParsedCommand =
  /** mode null: no argument or an unknown word, answered with the usage line. */
  | { name: "send"; mode: "on" | "off" | "inherit" | null }
  | { name: "status" }
  | { name: "sid" }
  | { name: "new"; rest: string }
  | { name: "reset"; rest: string }
  | { name: "stop" }
  | { name: "help" };

export interface ParseCommandOptions {
  /** Our bot's username; `/cmd@ThisName` is ours, any other `@name` addresses another bot. */
  botUsername?: string;
}

export const COMMAND_HELP = [
  "Commands:",
  "/send on|off|inherit — allow or stop replies in this chat (owners only)",
  "/status — show this session's status",
  "/sid — show the session key, kind, channel and send policy",
  "/new or /reset — start a fresh session (text after it is sent as the first message)",
  "/stop — abort the current run and its sub-agents",
  "/help — show this help",
].join("\n");

/** `/name`, an optional `@bot` suffix (Telegram groups), then `:`, whitespace or the end. */
const COMMAND_HEAD = /^\/([a-z]+)(?:@(\S+?))?(?:\s*:|(?=\s)|$)(.*)$/i;

/** Letters only, as in the reference regex `^/send(\s+[a-zA-Z]+)?\s*$`. */
const SEND_ARG = /^[a-z]*$/i;

// A Map, not an object literal: a word like "constructor" must not resolve to a prototype member.
const SEND_MODES = new Map<string, "on" | "off" | "inherit">([
  ["on", "on"],
  ["allow", "on"],
  ["off", "off"],
  ["deny", "off"],
  ["inherit", "inherit"],
  ["default", "inherit"],
  ["reset", "inherit"],
]);

export function parseCommand(text: string, opts: ParseCommandOptions = {}): ParsedCommand | null {
  const trimmed = text.trimStart();
  const firstLine = trimmed.split(/\r?\n/, 1)[0];
  const m = COMMAND_HEAD.exec(firstLine);
  if (!m) return null;
  const [, rawName, botName, tail] = m;
  if (botName !== undefined && botName.toLowerCase() !== opts.botUsername?.trim().toLowerCase()) return null;
  const rest = tail.trim();

  switch (rawName.toLowerCase()) {
    case "send":
      if (!SEND_ARG.test(rest)) return null;
      return { name: "send", mode: SEND_MODES.get(rest.toLowerCase()) ?? null };
    case "new":
    case "reset":
      // The command is read from the first line, but what follows it is the fresh session's first
      // message: "/new" with the question on the next line must not lose the question.
      return { name: rawName.toLowerCase() as "new" | "reset", rest: `${tail}${trimmed.slice(firstLine.length)}`.trim() };
    case "status":
      return rest ? null : { name: "status" };
    case "sid":
      return rest ? null : { name: "sid" };
    case "stop":
      return rest ? null : { name: "stop" };
    case "help":
      return rest ? null : { name: "help" };
    default:
      return null;
  }
}
