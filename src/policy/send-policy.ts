/**
 * Send policy evaluation (R27–R30, D2). Pure: the outbox and the gateway call it for every
 * outbound message and every chat.send/agent request.
 *
 * Order: the session's own override wins; then rules in order, where the first matching deny
 * wins at once and a matching allow is remembered; then the configured default.
 */
import type { ChatType } from "../channels/types.js";
import { channelFromGroupKey, chatTypeFromKey } from "../sessions/keys.js";

export type SendDecision = "allow" | "deny";

export interface SendPolicyRule {
  action: SendDecision;
  match: { channel?: string; chatType?: ChatType; keyPrefix?: string };
}

export interface SendPolicyConfig {
  rules: readonly SendPolicyRule[];
  default: SendDecision;
}

export interface SendPolicySubject {
  sessionKey?: string;
  /** The session's runtime override (R27); undefined = inherit the config. */
  override?: SendDecision;
  /** Channel of the delivery (or of the session entry). */
  channel?: string;
  chatType?: ChatType;
}

export interface SendPolicyResult {
  decision: SendDecision;
  /** Why, for logs and `/sid`: "session override", "rule #2", "default". */
  reason: string;
}

export function resolveSendPolicy(config: SendPolicyConfig, subject: SendPolicySubject): SendPolicyResult {
  if (subject.override === "allow" || subject.override === "deny") {
    return { decision: subject.override, reason: "session override" };
  }
  const key = subject.sessionKey ?? "";
  const channel = (subject.channel ?? channelFromGroupKey(key) ?? "").toLowerCase();
  const chatType = subject.chatType ?? chatTypeFromKey(key);
  let allowedBy: number | undefined;
  for (const [index, rule] of config.rules.entries()) {
    const m = rule.match;
    if (m.channel !== undefined && m.channel.toLowerCase() !== channel) continue;
    if (m.chatType !== undefined && !chatTypeMatches(m.chatType, chatType)) continue;
    if (m.keyPrefix !== undefined && !key.startsWith(m.keyPrefix.toLowerCase())) continue;
    if (rule.action === "deny") return { decision: "deny", reason: `rule #${index + 1}` };
    allowedBy ??= index;
  }
  if (allowedBy !== undefined) return { decision: "allow", reason: `rule #${allowedBy + 1}` };
  return { decision: config.default, reason: "default" };
}

/**
 * Group chats are groups and channels alike (R2: `…:group:<id>` or `…:channel:<id>`), so a rule
 * for `group` — the spec's own example, `{ channel: "discord", chatType: "group" }` — covers a
 * Discord guild channel too, where the bot has no other group chats; a rule for `channel` only
 * channels.
 */
function chatTypeMatches(rule: ChatType, subject: ChatType | undefined): boolean {
  return rule === subject || (rule === "group" && subject === "channel");
}
