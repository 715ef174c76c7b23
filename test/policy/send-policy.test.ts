import { describe, expect, it } from "vitest";
import { resolveSendPolicy, type SendPolicyConfig, type SendPolicySubject } from "../../src/policy/send-policy.js";

const discordGroupsDenied: SendPolicyConfig = { rules: [{ action: "deny", match: { channel: "discord", chatType: "group" } }], default: "allow" };

describe("send policy", () => {
  it.each<[string, SendPolicyConfig, SendPolicySubject, "allow" | "deny", string]>([
    ["empty config allows", { rules: [], default: "allow" }, { sessionKey: "agent:main:main" }, "allow", "default"],
    ["default deny", { rules: [], default: "deny" }, { sessionKey: "agent:main:main" }, "deny", "default"],
    ["R27 override deny beats default allow", { rules: [], default: "allow" }, { override: "deny" }, "deny", "session override"],
    ["R27 override allow beats a matching deny rule", discordGroupsDenied, { override: "allow", channel: "discord", chatType: "group" }, "allow", "session override"],
    ["rule on channel+chatType denies", discordGroupsDenied, { channel: "discord", chatType: "group" }, "deny", "rule #1"],
    ["rule does not match another chat type", discordGroupsDenied, { channel: "discord", chatType: "direct" }, "allow", "default"],
    ["R2 a group rule covers a channel chat (a Discord guild channel is a group chat)", discordGroupsDenied, { channel: "discord", chatType: "channel" }, "deny", "rule #1"],
    ["R2 a group rule covers a channel key", discordGroupsDenied, { sessionKey: "agent:main:discord:channel:1" }, "deny", "rule #1"],
    ["a channel rule does not cover a group chat", { rules: [{ action: "deny", match: { chatType: "channel" } }], default: "allow" }, { channel: "telegram", chatType: "group" }, "allow", "default"],
    ["chat type derived from the key", discordGroupsDenied, { sessionKey: "agent:main:discord:group:1", channel: "discord" }, "deny", "rule #1"],
    ["channel derived from a group key", discordGroupsDenied, { sessionKey: "agent:main:discord:group:1" }, "deny", "rule #1"],
    ["keyPrefix matches", { rules: [{ action: "deny", match: { keyPrefix: "cron:" } }], default: "allow" }, { sessionKey: "cron:job-1" }, "deny", "rule #1"],
    [
      "first matching deny wins over an earlier allow",
      { rules: [{ action: "allow", match: { channel: "telegram" } }, { action: "deny", match: { chatType: "group" } }], default: "deny" },
      { channel: "telegram", chatType: "group" },
      "deny",
      "rule #2",
    ],
    [
      "of two matching allows the first is the reason",
      { rules: [{ action: "allow", match: { channel: "telegram" } }, { action: "allow", match: { chatType: "group" } }], default: "deny" },
      { channel: "telegram", chatType: "group" },
      "allow",
      "rule #1",
    ],
    ["a rule's channel matches whatever its case", { rules: [{ action: "deny", match: { channel: "Discord" } }], default: "allow" }, { channel: "discord", chatType: "direct" }, "deny", "rule #1"],
    ["a rule's keyPrefix matches whatever its case (keys are lower case)", { rules: [{ action: "deny", match: { keyPrefix: "Cron:" } }], default: "allow" }, { sessionKey: "cron:job-1" }, "deny", "rule #1"],
    ["a matching allow beats default deny", { rules: [{ action: "allow", match: { channel: "telegram" } }], default: "deny" }, { channel: "telegram", chatType: "direct" }, "allow", "rule #1"],
    ["unset override inherits the config", discordGroupsDenied, { override: undefined, channel: "discord", chatType: "group" }, "deny", "rule #1"],
    // A cron session has no chat type: a group-only rule must not silence it.
    ["a chatType rule does not match a subject of unknown chat type", { rules: [{ action: "deny", match: { chatType: "group" } }], default: "allow" }, { sessionKey: "cron:j", channel: "telegram" }, "allow", "default"],
  ])("R27–R30 %s", (_name, config, subject, decision, reason) => {
    expect(resolveSendPolicy(config, subject)).toEqual({ decision, reason });
  });
});
