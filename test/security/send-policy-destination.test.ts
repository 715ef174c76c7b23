/**
 * A chat an owner silenced (`/send off`, R28) stays silent whatever names it as a destination
 * (D2, R30): the reference system's deny rules were bypassed by other send paths (ecosystem §0.2,
 * #6301). Deliveries that carry an explicit destination — a webhook's `deliver` with `channel`
 * and `to`, the gateway's `agent` with `deliver` and `channel`/`to`, the gateway's `send` naming
 * some other session — belong to a session of their own (the hook's, the caller's), but what they
 * make the platform show lands in the silenced chat. Driven through the Telegram Bot API fake and
 * the real telegraf adapter, with real SQLite.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FakeTelegramBotApi, groupChat, supergroupChat, waitFor, type FakeUser } from "../fakes/telegram-bot-api.js";
import { startHarness, type Harness } from "../helpers/harness.js";
import type { GatewayClient } from "../../src/gateway/client.js";

const OWNER: FakeUser = { id: 777101, is_bot: false, first_name: "Olivia", username: "olivia" };
const SILENCED = groupChat(-100_900_101, "Silenced");
const OPEN = groupChat(-100_900_102, "Open");
const HOOK_TOKEN = "hook-secret-destination-0123";

let h: Harness;
let api: FakeTelegramBotApi;
let gw: GatewayClient;

beforeAll(async () => {
  api = new FakeTelegramBotApi();
  const apiRoot = await api.start();
  h = await startHarness({
    config: {
      commands: { owners: [`telegram:${OWNER.id}`] },
      hooks: { enabled: true, token: HOOK_TOKEN },
      channels: { telegram: { enabled: true, botToken: api.token, apiRoot, requireMention: false, pollTimeoutSeconds: 1 } },
    },
  });
  await waitFor(() => api.isPolling, 10_000, "telegram adapter polling");
  // Both groups speak first (their sessions record where they live); then the owner silences one.
  api.injectText({ chat: SILENCED, from: OWNER, text: "hello silenced" });
  api.injectText({ chat: OPEN, from: OWNER, text: "hello open" });
  await waitFor(() => textsTo(SILENCED).includes("echo: hello silenced") && textsTo(OPEN).includes("echo: hello open"), 10_000, "both groups answered");
  api.injectText({ chat: SILENCED, from: OWNER, text: "/send off" });
  await waitFor(() => textsTo(SILENCED).includes("⚙️ Send policy set to off."), 10_000, "the owner's /send off confirmed");
  expect(h.app.sessions.get(`agent:main:telegram:group:${SILENCED.id}`)?.sendPolicy).toBe("deny");
  gw = await h.client();
});
afterAll(async () => {
  await h?.stop();
  await api?.stop();
});

function textsTo(chat: { id: number }): string[] {
  return api.sent.filter((m) => m.chat.id === chat.id).map((m) => m.text ?? "");
}

async function hook(body: Record<string, unknown>): Promise<{ runId: string; status?: string }> {
  const res = await fetch(`${h.url.replace("ws://", "http://")}hooks/agent`, { method: "POST", headers: { "content-type": "application/json", authorization: `Bearer ${HOOK_TOKEN}` }, body: JSON.stringify(body) });
  expect(res.status).toBe(200);
  return (await res.json()) as { runId: string; status?: string };
}

/** The outbox's final word on a message (polled: a delivery is enqueued after its run ends). */
async function settled(id: string): Promise<string> {
  const record = await waitFor(() => {
    const r = h.app.outbox.get(id);
    return r && ["sent", "suppressed", "failed"].includes(r.state) ? r : undefined;
  }, 10_000, `outbox ${id} settled`);
  return record.state;
}

describe("D2 R30 a silenced chat stays silent whatever names it as a destination", () => {
  it("D2 R30 a webhook's deliver with channel and to does not post into a chat whose session is /send off", async () => {
    const silenced = await hook({ message: "deploy done", deliver: true, channel: "telegram", to: String(SILENCED.id), wait: true, idempotencyKey: "dest-hook-1" });
    expect(silenced.status).toBe("ok");
    expect(await settled(`hook:${silenced.runId}`)).toBe("suppressed");
    expect(h.app.outbox.get(`hook:${silenced.runId}`)?.policy).toBe(`session override of agent:main:telegram:group:${SILENCED.id}, the session at the destination`);
    // The control: the same hook into a chat nobody silenced is delivered.
    const open = await hook({ message: "deploy done", deliver: true, channel: "telegram", to: String(OPEN.id), wait: true, idempotencyKey: "dest-hook-2" });
    expect(await settled(`hook:${open.runId}`)).toBe("sent");
    await waitFor(() => textsTo(OPEN).includes("echo: deploy done"), 10_000, "the open group's hook delivery");
    expect(textsTo(SILENCED)).not.toContain("echo: deploy done");
  });

  it("D2 R29 the gateway's agent with deliver and an explicit channel/to does not post into a silenced chat from another session", async () => {
    const final = await gw.request("agent", { message: "weekly summary", sessionKey: "main", deliver: true, channel: "telegram", to: String(SILENCED.id), idempotencyKey: "dest-agent-1" }, { expectFinal: true });
    expect(final).toMatchObject({ status: "ok" });
    expect(await settled("agent:dest-agent-1")).toBe("suppressed");
    expect(textsTo(SILENCED)).not.toContain("echo: weekly summary");
  });

  it("D2 the gateway's send naming another (allowed) session does not post into a silenced chat", async () => {
    // An integration sending on behalf of its own session (here the main one, allowed) posts into
    // the chat all the same: the chat's owner said no there.
    const writer = await h.client({ scopes: ["operator.write"] });
    await expect(writer.request("send", { sessionKey: "main", channel: "telegram", to: String(SILENCED.id), message: "sneaky notice", idempotencyKey: "dest-send-1" })).rejects.toMatchObject({ code: "INVALID_REQUEST", message: "send blocked by session policy" });
    expect(await writer.request("send", { sessionKey: "main", channel: "telegram", to: String(OPEN.id), message: "open notice", idempotencyKey: "dest-send-2" })).toMatchObject({ status: "sent" });
    expect(textsTo(SILENCED)).not.toContain("sneaky notice");
    expect(textsTo(OPEN)).toContain("open notice");
  });

  it("D2 R28 a chat silenced by sessions.patch before it first speaks stays silent for send and hooks", async () => {
    // interfaces §3: sessions.patch creates the entry "so an operator can set a chat's policy
    // before it first speaks" — its session has no route recorded yet, only its key.
    const QUIET = -100_900_103;
    await gw.request("sessions.patch", { key: `agent:main:telegram:group:${QUIET}`, sendPolicy: "deny" });
    await expect(gw.request("send", { channel: "telegram", to: String(QUIET), message: "early notice", idempotencyKey: "dest-send-3" })).rejects.toMatchObject({ code: "INVALID_REQUEST", message: "send blocked by session policy" });
    const early = await hook({ message: "early deploy", deliver: true, channel: "telegram", to: String(QUIET), wait: true, idempotencyKey: "dest-hook-4" });
    expect(await settled(`hook:${early.runId}`)).toBe("suppressed");
    expect(api.sent.filter((m) => m.chat.id === QUIET)).toEqual([]);
  });

  it("D2 R28 a forum's General topic silenced by /send off stays silent for a send without a topic, which Telegram puts there", async () => {
    const FORUM = supergroupChat(-100_900_104, "Forum", { forum: true });
    // General's messages carry no topic id; their session is the forum's `:topic:1`.
    api.injectText({ chat: FORUM, from: OWNER, text: "/send off" });
    await waitFor(() => textsTo(FORUM).includes("⚙️ Send policy set to off."), 10_000, "the owner's /send off in General confirmed");
    expect(h.app.sessions.get(`agent:main:telegram:group:${FORUM.id}:topic:1`)?.sendPolicy).toBe("deny");
    await expect(gw.request("send", { channel: "telegram", to: String(FORUM.id), message: "into General", idempotencyKey: "dest-send-4" })).rejects.toMatchObject({ code: "INVALID_REQUEST", message: "send blocked by session policy" });
    // The control: another topic of the forum has a session of its own, which nobody silenced.
    expect(await gw.request("send", { channel: "telegram", to: String(FORUM.id), threadId: "9", message: "into topic 9", idempotencyKey: "dest-send-5" })).toMatchObject({ status: "sent" });
    expect(textsTo(FORUM)).toEqual(["⚙️ Send policy set to off.", "into topic 9"]);
  });

  it("D2 R28 the owner's /send on lifts it for those deliveries too (the control case)", async () => {
    api.injectText({ chat: SILENCED, from: OWNER, text: "/send on" });
    await waitFor(() => textsTo(SILENCED).includes("⚙️ Send policy set to on."), 10_000, "the owner's /send on confirmed");
    const again = await hook({ message: "deploy again", deliver: true, channel: "telegram", to: String(SILENCED.id), wait: true, idempotencyKey: "dest-hook-3" });
    expect(await settled(`hook:${again.runId}`)).toBe("sent");
    await waitFor(() => textsTo(SILENCED).includes("echo: deploy again"), 10_000, "the hook delivery once allowed");
  });
});

describe("D2 a chat-type rule holds for a chat that has not spoken yet", () => {
  let h2: Harness;
  let api2: FakeTelegramBotApi;
  const NEVER_SPOKE = -100_900_201;
  const USER: FakeUser = { id: 777201, is_bot: false, first_name: "Uma" };

  beforeAll(async () => {
    api2 = new FakeTelegramBotApi();
    const apiRoot = await api2.start();
    h2 = await startHarness({
      config: {
        hooks: { enabled: true, token: HOOK_TOKEN },
        session: { sendPolicy: { rules: [{ match: { channel: "telegram", chatType: "group" }, action: "deny" }], default: "allow" } },
        channels: { telegram: { enabled: true, botToken: api2.token, apiRoot, requireMention: false, pollTimeoutSeconds: 1 } },
      },
    });
    await waitFor(() => api2.isPolling, 10_000, "telegram adapter polling");
  });
  afterAll(async () => {
    await h2?.stop();
    await api2?.stop();
  });

  it("D2 R30 a Telegram group (negative chat id) with no session is a group to the rules: hooks and send do not post there; a private chat is not one", async () => {
    const c = await h2.client();
    await expect(c.request("send", { channel: "telegram", to: String(NEVER_SPOKE), message: "into the group", idempotencyKey: "type-send-1" })).rejects.toMatchObject({ code: "INVALID_REQUEST", message: "send blocked by session policy" });
    const res = await fetch(`${h2.url.replace("ws://", "http://")}hooks/agent`, { method: "POST", headers: { "content-type": "application/json", authorization: `Bearer ${HOOK_TOKEN}` }, body: JSON.stringify({ message: "deploy done", deliver: true, channel: "telegram", to: String(NEVER_SPOKE), wait: true }) });
    const { runId } = (await res.json()) as { runId: string };
    const record = await waitFor(() => {
      const r = h2.app.outbox.get(`hook:${runId}`);
      return r && r.state !== "queued" && r.state !== "sending" ? r : undefined;
    }, 10_000, "the hook's delivery settled");
    expect(record.state).toBe("suppressed");
    // The control: a private chat (a user's positive id) is no group.
    expect(await c.request("send", { channel: "telegram", to: String(USER.id), message: "to a person", idempotencyKey: "type-send-2" })).toMatchObject({ status: "sent" });
    expect(api2.sent.map((m) => [m.chat.id, m.text])).toEqual([[USER.id, "to a person"]]);
  });
});
