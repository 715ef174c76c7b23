import { randomUUID } from "node:crypto";
import { afterEach, describe, expect, it, vi } from "vitest";
import type { GatewayClient } from "../../src/gateway/client.js";
import { PAGE_SCOPES } from "../../src/web/webchat-client.js";
import { startHarness, type Harness } from "../helpers/harness.js";
import { runChannelContract, type ContractContext } from "./channel-contract.js";

/** The web chat page's side of the protocol: chat.send in, `chat` events out. */
async function webchat(h: Harness) {
  const finals: string[] = [];
  let client: GatewayClient;
  const connect = async () => {
    client = await h.client({ scopes: PAGE_SCOPES });
    client.on("event", (name, p) => name === "chat" && p.state === "final" && p.sessionKey === "agent:main:main" && finals.push(p.message.content[0].text));
  };
  await connect();
  return {
    finals,
    send: (message: string) => client.request("chat.send", { sessionKey: "main", message, idempotencyKey: randomUUID() }),
    async reconnect() {
      client.close();
      await connect();
    },
  };
}

runChannelContract({
  channel: "webchat",
  chunkLimit: Number.MAX_SAFE_INTEGER,
  groups: false,
  chunking: false,
  edits: false,
  media: false,
  async start(): Promise<ContractContext> {
    const harness = await startHarness();
    const page = await webchat(harness);
    return {
      harness,
      dm: async (_who, text) => void (await page.send(text)),
      group: async () => {
        throw new Error("web chat has no groups");
      },
      editDm: async () => {
        throw new Error("web chat has no edits");
      },
      dmPhoto: async () => {
        throw new Error("web chat sends no media");
      },
      groupPhoto: async () => {
        throw new Error("web chat has no groups");
      },
      dmSent: () => page.finals,
      groupSent: () => [],
      dmTo: () => "agent:main:main",
      groupTo: "",
      groupKey: "",
      drop: () => page.reconnect(),
      failNthSend: () => {
        throw new Error("web chat delivery has no platform to fail");
      },
      stop: () => harness.stop(),
    };
  },
});

describe("web chat owner commands", () => {
  let h: Harness | undefined;
  afterEach(async () => h?.stop());

  it("R28 R29 /send off from the web chat is confirmed, then chat.send into that session is blocked", async () => {
    h = await startHarness();
    const page = await webchat(h);
    await page.send("/send off");
    await vi.waitFor(() => expect(page.finals).toEqual(["⚙️ Send policy set to off."]));
    await expect(page.send("hello?")).rejects.toMatchObject({ message: "send blocked by session policy" });
    await page.send("/send inherit");
    await page.send("hello again");
    await vi.waitFor(() => expect(page.finals).toContain("echo: hello again"));
  });
});

describe("web chat deliveries", () => {
  let h: Harness | undefined;
  afterEach(async () => h?.stop());

  async function chatEvents(harness: Harness) {
    const client = await harness.client({ scopes: ["operator.read", "operator.write"] });
    const events: any[] = [];
    client.on("event", (name, p) => name === "chat" && events.push(p));
    return { client, events };
  }

  it("a reply carries the runId of the chat.send it answers, which the page clears its waiting placeholder by", async () => {
    h = await startHarness();
    const { client, events } = await chatEvents(h);
    const idempotencyKey = randomUUID();
    await client.request("chat.send", { sessionKey: "main", message: "hi", idempotencyKey });
    await vi.waitFor(() => expect(events.filter((e) => e.state === "final")).toHaveLength(1));
    expect(events[0]).toMatchObject({ runId: idempotencyKey, sessionKey: "agent:main:main", state: "final", message: { role: "assistant", content: [{ type: "text", text: "echo: hi" }] } });
  });

  it("a send to the web chat reports the message id the page received", async () => {
    h = await startHarness();
    const { client, events } = await chatEvents(h);
    const sent = [];
    for (const message of ["one", "two"]) sent.push(await client.request("send", { channel: "webchat", to: "agent:main:main", message, idempotencyKey: randomUUID() }));
    await vi.waitFor(() => expect(events).toHaveLength(2));
    expect(sent.map((r) => r.messageIds)).toEqual(events.map((e) => [e.messageId]));
    expect(events[0].messageId).not.toBe(events[1].messageId);
  });
});
