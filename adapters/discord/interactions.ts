/**
 * Slash command → NativeCommand → ephemeral answer. Discord drops an interaction that is not
 * acknowledged within 3 s, and the core may take longer (store writes, aborting a run), so the
 * reply is deferred first and filled in afterwards. Answers are ephemeral: only the invoker sees
 * them, which is also how a non-owner learns "not allowed" without telling the channel.
 */
import { MessageFlags, type ChatInputCommandInteraction } from "discord.js";
import type { Logger } from "pino";
import type { AdapterContext } from "../../src/channels/types.js";
import { commandText, isNativeCommand } from "./commands.js";
import { redact } from "./errors.js";
import { mapInteractionOrigin } from "./map-message.js";

const DISCORD_MESSAGE_LIMIT = 2000;

function clip(text: string): string {
  const t = text.trim() || "Done.";
  return t.length <= DISCORD_MESSAGE_LIMIT ? t : `${t.slice(0, DISCORD_MESSAGE_LIMIT - 1)}…`;
}

export interface InteractionDeps {
  accountId: string;
  ctx: AdapterContext;
  log: Logger;
  token: string;
}

export async function handleCommandInteraction(interaction: ChatInputCommandInteraction, deps: InteractionDeps): Promise<void> {
  const ephemeral = (content: string) => interaction.reply({ content, flags: MessageFlags.Ephemeral, allowedMentions: { parse: [] } });
  try {
    const origin = isNativeCommand(interaction.commandName) ? mapInteractionOrigin(interaction, deps.accountId) : null;
    if (!origin) {
      await ephemeral("This command is not available here.");
      return;
    }
    if (!deps.ctx.onNativeCommand) {
      await ephemeral("commands unavailable");
      return;
    }
    await interaction.deferReply({ flags: MessageFlags.Ephemeral });
    let answer: string;
    try {
      answer = await deps.ctx.onNativeCommand({ origin, text: commandText(interaction.commandName, interaction.options.data) });
    } catch (err) {
      deps.log.error({ err: redact(String(err), deps.token), command: interaction.commandName }, "discord: native command failed");
      answer = "Command failed.";
    }
    await interaction.editReply({ content: clip(answer), allowedMentions: { parse: [] } });
  } catch (err) {
    // Usually the 3 s window was missed or the interaction token expired; nothing left to answer.
    deps.log.warn({ err: redact(String(err), deps.token), command: interaction.commandName }, "discord: could not answer interaction");
  }
}
