/**
 * Inbound message → (agentId, session key). Pure: bindings pick the agent (exact peer, then the
 * thread's parent peer, then account, then channel, then the default agent); the key follows
 * spec R1/R2 and `session.dmScope`.
 */
import type { InboundMessage } from "../channels/types.js";
import type { Config } from "../config/schema.js";
import { directSessionKey, groupSessionKey, normalizeAccountId, normalizeAgentId, type SessionKey } from "../sessions/keys.js";

export interface Route {
  agentId: string;
  sessionKey: SessionKey;
  matchedBy: "binding.peer" | "binding.parent" | "binding.account" | "binding.channel" | "default";
}

export function defaultAgentId(config: Config): string {
  return normalizeAgentId((config.agents.list.find((a) => a.default) ?? config.agents.list[0])?.id);
}

/**
 * The `agents.list` entry of a (normalised) agent id. Config ids may be written with upper case
 * ("Ops") while every key, run and entry carries the normalised id ("ops"): comparing them raw
 * would lose the agent's model, systemPrompt and name.
 */
export function agentConfigOf(config: Config, agentId: string): Config["agents"]["list"][number] | undefined {
  const id = normalizeAgentId(agentId);
  return config.agents.list.find((a) => normalizeAgentId(a.id) === id);
}

type InboundRouteFields = Pick<InboundMessage, "channel" | "accountId" | "chatType" | "peerId" | "threadId" | "parentPeerId">;

export function resolveRoute(config: Config, msg: InboundRouteFields): Route {
  const { agentId, matchedBy } = pickAgent(config, msg);
  const sessionKey =
    msg.chatType === "direct"
      ? directSessionKey({ agentId, channel: msg.channel, accountId: msg.accountId, peerId: msg.peerId, threadId: msg.threadId, dmScope: config.session.dmScope, scope: config.session.scope })
      : groupSessionKey({ agentId, channel: msg.channel, chatType: msg.chatType, peerId: msg.peerId, threadId: msg.threadId });
  return { agentId, sessionKey, matchedBy };
}

function pickAgent(config: Config, msg: InboundRouteFields): { agentId: string; matchedBy: Route["matchedBy"] } {
  const known = new Set(config.agents.list.map((a) => normalizeAgentId(a.id)));
  // A binding without accountId matches only the default account; "*" matches any. Account ids
  // are compared normalised (as in dmScope keys): "Support" in a channel and "support" here match.
  const account = normalizeAccountId(msg.accountId);
  const candidates = config.bindings.filter(
    (b) => b.match.channel === msg.channel && (b.match.accountId === "*" || normalizeAccountId(b.match.accountId) === account),
  );
  const tiers: Array<[Route["matchedBy"], (b: Config["bindings"][number]) => boolean]> = [
    ["binding.peer", (b) => !!b.match.peer && b.match.peer.kind === msg.chatType && b.match.peer.id === msg.peerId],
    ["binding.parent", (b) => !!b.match.peer && !!msg.parentPeerId && b.match.peer.id === msg.parentPeerId],
    ["binding.account", (b) => !b.match.peer && b.match.accountId !== "*"],
    ["binding.channel", (b) => !b.match.peer && b.match.accountId === "*"],
  ];
  for (const [matchedBy, test] of tiers) {
    const hit = candidates.find(test);
    if (hit && known.has(normalizeAgentId(hit.agentId))) return { agentId: normalizeAgentId(hit.agentId), matchedBy };
  }
  return { agentId: defaultAgentId(config), matchedBy: "default" };
}
