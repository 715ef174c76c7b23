/**
 * Who may steer the daemon from chat. Only the platform's authenticated sender id counts —
 * never a display name, username text, forwarded or quoted content (the reference system's
 * `/send` owner check was bypassable, CVE-2026-35620).
 */
import type { ChannelId } from "../channels/types.js";
import type { Config } from "../config/schema.js";

export function isOwner(config: Config, channel: ChannelId, senderId: string): boolean {
  if (!senderId) return false;
  const id = `${channel}:${senderId}`;
  if (config.commands.owners.includes(id)) return true;
  const perChannel = channel === "webchat" ? undefined : config.channels[channel]?.owners;
  return perChannel?.includes(id) ?? false;
}
