import { describe, expect, it } from "vitest";
import { parseConfig } from "../../src/config/load.js";
import { resolveRoute } from "../../src/inbound/route.js";
import {
  agentIdFromKey,
  canonicalizeKey,
  classifySessionKind,
  cronSessionKey,
  deriveRowChannel,
  directSessionKey,
  displayKey,
  groupSessionKey,
  hookSessionKey,
  looksLikeSessionKey,
  nodeSessionKey,
  normalizeAgentId,
  subagentSessionKey,
} from "../../src/sessions/keys.js";

describe("session keys", () => {
  it.each([
    ["main", "per-sender", "agent:main:main"],
    ["ops", "per-sender", "agent:ops:main"],
    ["main", "global", "global"],
  ] as const)("R1 direct chats with dmScope main go to the main bucket (agent %s, scope %s)", (agentId, scope, expected) => {
    expect(directSessionKey({ agentId, channel: "telegram", peerId: "42", dmScope: "main", scope })).toBe(expected);
  });

  it.each([
    ["per-peer", "agent:main:direct:42"],
    ["per-channel-peer", "agent:main:telegram:direct:42"],
    ["per-account-channel-peer", "agent:main:telegram:work:direct:42"],
  ] as const)("session.dmScope %s isolates direct chats", (dmScope, expected) => {
    expect(directSessionKey({ agentId: "main", channel: "telegram", accountId: "work", peerId: "42", dmScope })).toBe(expected);
  });

  it.each([
    ["Work", "agent:main:telegram:work:direct:42"],
    [undefined, "agent:main:telegram:default:direct:42"],
    ["  ", "agent:main:telegram:default:direct:42"],
  ])("session.dmScope per-account-channel-peer normalises the account id (%j), so the key is already canonical", (accountId, expected) => {
    // canonicalizeKey lowercases what an operator passes; a key minted otherwise would name another session.
    const key = directSessionKey({ agentId: "main", channel: "telegram", accountId, peerId: "42", dmScope: "per-account-channel-peer" });
    expect(key).toBe(expected);
    expect(canonicalizeKey(key, { agentId: "main", scope: "per-sender" })).toBe(key);
  });

  it("a ':' inside an id cannot split a key into other parts", () => {
    expect(directSessionKey({ agentId: "main", channel: "webchat", peerId: "room:7", threadId: "t:1", dmScope: "per-peer" })).toBe("agent:main:direct:room_7:thread:t_1");
    expect(groupSessionKey({ agentId: "main", channel: "telegram", chatType: "group", peerId: "1:group:2" })).toBe("agent:main:telegram:group:1_group_2");
    expect(cronSessionKey("a:main")).toBe("cron:a_main");
  });

  it("a Telegram DM thread gets its own :thread: session", () => {
    expect(directSessionKey({ agentId: "main", channel: "telegram", peerId: "42", threadId: "7", dmScope: "main" })).toBe("agent:main:main:thread:7");
  });

  it.each([
    [{ channel: "telegram", chatType: "group", peerId: "-100123" }, "agent:main:telegram:group:-100123"],
    [{ channel: "discord", chatType: "channel", peerId: "998877" }, "agent:main:discord:channel:998877"],
    [{ channel: "whatsapp", chatType: "group", peerId: "12036@G.US" }, "agent:main:whatsapp:group:12036@g.us"],
    [{ channel: "telegram", chatType: "group", peerId: "-100123", threadId: "99" }, "agent:main:telegram:group:-100123:topic:99"],
  ] as const)("R2 group keys: %j → %s", (input, expected) => {
    expect(groupSessionKey({ agentId: "main", ...input })).toBe(expected);
  });

  it.each([
    ["daily", "cron:daily"],
    ["Daily", "cron:daily"],
    ["NIGHTLY-Backup", "cron:nightly-backup"],
    [" Weekly ", "cron:weekly"],
  ])("R3 cron keys are lowercase whatever the job id's case: %j → %s", (jobId, expected) => {
    // Stored keys are always lowercase, so a cron job named "Daily" must meet the same session callers reach as cron:daily.
    expect(cronSessionKey(jobId)).toBe(expected);
  });

  it("R3 R4 R5 internal sources keep their spec'd bare keys", () => {
    expect(cronSessionKey("daily")).toBe("cron:daily");
    expect(hookSessionKey("5f0c")).toBe("hook:5f0c");
    expect(nodeSessionKey("Kitchen-Pi")).toBe("node-kitchen-pi");
    expect(subagentSessionKey("Research", "ABC")).toBe("agent:research:subagent:abc");
  });

  it.each([
    ["main", "agent:ops:main"],
    ["MAIN", "agent:ops:main"],
    ["agent:main:main", "agent:main:main"],
    ["agent:ops:telegram:group:1", "agent:ops:telegram:group:1"],
    ["agent:ops:cron:daily", "cron:daily"],
    ["cron:daily", "cron:daily"],
    ["hook:abc", "hook:abc"],
    ["unknown", "unknown"],
    // Keys arrive from gateway params and tool arguments with stray whitespace; unstripped they would name a different session.
    [" main ", "agent:ops:main"],
    ["\tmain\n", "agent:ops:main"],
    ["  agent:ops:telegram:group:1 ", "agent:ops:telegram:group:1"],
    [" cron:daily\n", "cron:daily"],
  ])("R1 canonicalisation: %j from agent ops → %s", (raw, expected) => {
    expect(canonicalizeKey(raw, { agentId: "ops", scope: "per-sender" })).toBe(expected);
  });

  it("R6 with scope=global, main aliases to global and callers see main", () => {
    const key = canonicalizeKey("main", { agentId: "main", scope: "global" });
    expect(key).toBe("global");
    expect(displayKey(key)).toBe("main");
    expect(canonicalizeKey("agent:main:main", { agentId: "main", scope: "global" })).toBe("global");
  });

  it.each([
    ["agent:main:main", "main"],
    ["global", "main"],
    ["agent:main:main:thread:7", "main"],
    ["cron:daily", "cron"],
    ["agent:main:cron:daily", "cron"],
    ["hook:abc", "hook"],
    ["node-pi", "node"],
    ["agent:main:telegram:group:-1", "group"],
    ["agent:main:discord:channel:9", "group"],
    ["agent:main:subagent:abc", "other"],
    ["agent:main:direct:42", "other"],
  ])("kind classification on the part after agent:<id>: — %s is %s", (key, kind) => {
    expect(classifySessionKind(key)).toBe(kind);
  });

  it.each([
    ["agent:main:telegram:group:-1", { channel: "telegram" }, "telegram"],
    ["agent:main:discord:channel:9", {}, "discord"],
  ] as const)("R23 groups use the channel on the entry (%s)", (key, entry, expected) => {
    expect(deriveRowChannel(key, entry)).toBe(expected);
  });

  it("R24 direct chats map channel from lastChannel (deliveryContext first)", () => {
    expect(deriveRowChannel("agent:main:main", { lastChannel: "whatsapp" })).toBe("whatsapp");
    expect(deriveRowChannel("agent:main:main", { lastChannel: "whatsapp", deliveryContext: { channel: "telegram" } })).toBe("telegram");
  });

  it.each(["cron:daily", "hook:x", "node-pi"])("R25 %s lists with channel internal", (key) => {
    expect(deriveRowChannel(key, { lastChannel: "telegram" })).toBe("internal");
  });

  it("R26 without a recorded channel the row channel is unknown", () => {
    expect(deriveRowChannel("agent:main:main", {})).toBe("unknown");
    expect(deriveRowChannel("agent:main:subagent:x", {})).toBe("unknown");
  });

  it("R26 a channel outside the row's channel list is shown as unknown", () => {
    expect(deriveRowChannel("agent:main:main", { lastChannel: "sms" })).toBe("unknown");
    expect(deriveRowChannel("agent:main:slack:group:1", {})).toBe("unknown");
  });

  it("a key with an empty agent id does not name agent \"\": the fallback agent owns it", () => {
    expect(agentIdFromKey("agent::main", "ops")).toBe("ops");
    expect(agentIdFromKey("agent:research:main", "ops")).toBe("research");
  });

  it("a key's agent id is normalised like any agent id: a path typed into it (agent:../../x:chat) names no directory outside", () => {
    expect(agentIdFromKey("agent:../../escaped:chat", "ops")).toBe("escaped");
    expect(agentIdFromKey("agent:team/ops:chat", "main")).toBe("team-ops");
    expect(agentIdFromKey("agent:..:chat", "ops")).toBe("main");
  });

  it.each([
    ["main", true],
    ["agent:main:main", true],
    ["cron:x", true],
    ["node-x", true],
    ["discord:group:dev", true],
    ["discord:channel:dev", true],
    ["7f20529d-863e-4570-8ffe-c0ad624fff39", false],
    ["sess-group", false],
  ])("R12 %s looks like a key: %s (otherwise it is tried as a sessionId)", (value, expected) => {
    expect(looksLikeSessionKey(value)).toBe(expected);
  });

  it.each([
    [" Research ", "research"],
    ["bad id!", "bad-id"],
    ["", "main"],
  ])("agent ids normalise: %j → %s", (raw, expected) => {
    expect(normalizeAgentId(raw)).toBe(expected);
  });
});

describe("inbound route → session key", () => {
  const config = parseConfig({}, "<test>", {});
  const dm = { channel: "telegram", accountId: "default", chatType: "direct", peerId: "42" } as const;

  it.each([
    [{ ...dm, threadId: "7" }, "agent:main:main:thread:7"],
    [dm, "agent:main:main"],
    [{ ...dm, chatType: "group", peerId: "-100123", threadId: "99" }, "agent:main:telegram:group:-100123:topic:99"],
  ] as const)("R1 R2 a message %j routes to %s (a DM thread keeps its own :thread: session)", (msg, expected) => {
    expect(resolveRoute(config, msg)).toMatchObject({ agentId: "main", sessionKey: expected, matchedBy: "default" });
  });

  it("a direct message follows the configured session.dmScope", () => {
    expect(resolveRoute(parseConfig({ session: { dmScope: "per-channel-peer" } }, "<test>", {}), dm).sessionKey).toBe("agent:main:telegram:direct:42");
  });
});

describe("inbound route → agent (bindings)", () => {
  const config = parseConfig(
    {
      agents: { list: [{ id: "main" }, { id: "ops", default: true }, { id: "work" }, { id: "tg" }] },
      bindings: [
        { agentId: "work", match: { channel: "telegram", peer: { kind: "group", id: "-100777" } } },
        // An agent that is not in agents.list: skipped, as if the binding were not there.
        { agentId: "ghost", match: { channel: "telegram", peer: { kind: "group", id: "-100888" } } },
        { agentId: "main", match: { channel: "discord", peer: { kind: "channel", id: "555" } } },
        // No accountId: the default account only.
        { agentId: "tg", match: { channel: "telegram" } },
        { agentId: "work", match: { channel: "whatsapp", accountId: "*" } },
        // Account ids are compared normalised (reference §1.1), as the config may spell them.
        { agentId: "work", match: { channel: "discord", accountId: "support" } },
      ],
    },
    "<test>",
    {},
  );
  const tg = { channel: "telegram", accountId: "default", chatType: "group" } as const;

  it.each([
    ["an exact peer", { ...tg, peerId: "-100777" }, "work", "binding.peer"],
    ["a peer binding is for its chat type only", { ...tg, chatType: "direct", peerId: "-100777" }, "tg", "binding.account"],
    ["a binding to an unknown agent is skipped", { ...tg, peerId: "-100888" }, "tg", "binding.account"],
    ["a thread takes its parent channel's binding", { channel: "discord", accountId: "default", chatType: "channel", peerId: "9001", parentPeerId: "555" }, "main", "binding.parent"],
    ["a binding without accountId is not another account's", { ...tg, accountId: "second", peerId: "-100999" }, "ops", "default"],
    ['accountId "*" matches every account', { channel: "whatsapp", accountId: "second", chatType: "direct", peerId: "+1555" }, "work", "binding.channel"],
    ['an account binding "support" matches the account configured as "Support"', { channel: "discord", accountId: "Support", chatType: "channel", peerId: "77" }, "work", "binding.account"],
    ["unbound: the agent marked default, not the first listed", { channel: "discord", accountId: "default", chatType: "direct", peerId: "42" }, "ops", "default"],
  ] as const)("%s", (_case, msg, agentId, matchedBy) => {
    expect(resolveRoute(config, msg)).toMatchObject({ agentId, matchedBy });
  });
});
