/**
 * The fake Bot API is shared by the adapter tests, benches and the contract suite, so its own
 * protocol rules are pinned here with plain HTTP (no telegraf).
 */
import { afterEach, describe, expect, it } from "vitest";
import { FakeTelegramBotApi, computeEntities, errors, fakeUser, groupChat, privateChat, supergroupChat, waitFor } from "../fakes/telegram-bot-api.js";

let api: FakeTelegramBotApi;
afterEach(async () => api?.stop());

async function call(method: string, body: object = {}, token = api.token): Promise<{ status: number; json: any }> {
  const res = await fetch(`${api.apiRoot}bot${token}/${method}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  return { status: res.status, json: await res.json() };
}

describe("fake Telegram Bot API", () => {
  it("F1 a wrong token is answered 401 Unauthorized, like Telegram", async () => {
    api = new FakeTelegramBotApi();
    await api.start();
    expect(await call("getMe", {}, "1:wrong")).toEqual({ status: 401, json: { ok: false, error_code: 401, description: "Unauthorized" } });
    expect((await call("getMe")).json.result).toMatchObject({ id: api.bot.id, is_bot: true, username: "SwitchboardTestBot" });
  });

  it("F2 unknown methods are 404 Not Found", async () => {
    api = new FakeTelegramBotApi();
    await api.start();
    expect((await call("sendTelepathy")).status).toBe(404);
  });

  it("F3 getUpdates with an offset forgets every earlier update", async () => {
    api = new FakeTelegramBotApi();
    await api.start();
    const alice = fakeUser("Alice");
    const u1 = api.injectText({ chat: privateChat(alice), from: alice, text: "one" });
    const u2 = api.injectText({ chat: privateChat(alice), from: alice, text: "two" });
    expect((await call("getUpdates", { timeout: 0 })).json.result.map((u: any) => u.update_id)).toEqual([u1.update_id, u2.update_id]);
    expect((await call("getUpdates", { offset: u2.update_id, timeout: 0 })).json.result.map((u: any) => u.update_id)).toEqual([u2.update_id]);
    expect(api.confirmedOffset).toBe(u2.update_id);
    expect((await call("getUpdates", { timeout: 0 })).json.result.map((u: any) => u.update_id)).toEqual([u2.update_id]);
  });

  it("F4 a long poll parks until an update arrives", async () => {
    api = new FakeTelegramBotApi();
    await api.start();
    const pending = call("getUpdates", { timeout: 30 });
    await api.waitForCall("getUpdates");
    const alice = fakeUser("Alice");
    api.injectText({ chat: privateChat(alice), from: alice, text: "wake up" });
    const { json } = await pending;
    expect(json.result[0].message.text).toBe("wake up");
  });

  it("F5 a second concurrent getUpdates terminates the first with 409", async () => {
    api = new FakeTelegramBotApi();
    await api.start();
    const first = call("getUpdates", { timeout: 30 });
    await api.waitForCall("getUpdates");
    const second = call("getUpdates", { timeout: 0 });
    expect(await first).toEqual({ status: 409, json: errors.conflict });
    expect((await second).json).toEqual({ ok: true, result: [] });
  });

  it("F6 getUpdates fails with 409 while a webhook is set, until deleteWebhook", async () => {
    api = new FakeTelegramBotApi();
    await api.start();
    api.webhookUrl = "https://example.com/hook";
    expect((await call("getUpdates", { timeout: 0 })).json).toEqual(errors.webhookActive);
    await call("deleteWebhook");
    expect((await call("getUpdates", { timeout: 0 })).status).toBe(200);
  });

  it("F7 rate limits: a 2nd message within 1 s to a private chat gets 429 with retry_after", async () => {
    let now = 1_000_000;
    api = new FakeTelegramBotApi({ enforceRateLimits: true, now: () => now });
    await api.start();
    expect((await call("sendMessage", { chat_id: 42, text: "a" })).status).toBe(200);
    now += 400;
    const second = await call("sendMessage", { chat_id: 42, text: "b" });
    expect(second).toEqual({ status: 429, json: { ok: false, error_code: 429, description: "Too Many Requests: retry after 1", parameters: { retry_after: 1 } } });
    expect((await call("sendMessage", { chat_id: 43, text: "other chat" })).status).toBe(200);
    now += 600;
    expect((await call("sendMessage", { chat_id: 42, text: "c" })).status).toBe(200);
    expect(api.rateLimitHits).toBe(1);
  });

  it("F8 rate limits: the 21st message in a minute to a group, and the 31st per second overall, get 429", async () => {
    let now = 5_000_000;
    api = new FakeTelegramBotApi({ enforceRateLimits: true, now: () => now });
    await api.start();
    for (let i = 0; i < 20; i++) {
      expect((await call("sendMessage", { chat_id: -100, text: `m${i}` })).status).toBe(200);
      now += 1000;
    }
    const g = await call("sendMessage", { chat_id: -100, text: "one too many" });
    expect(g.status).toBe(429);
    expect(g.json.parameters.retry_after).toBe(40);

    now += 60_000;
    for (let i = 0; i < 30; i++) expect((await call("sendMessage", { chat_id: 1000 + i, text: "x" })).status).toBe(200);
    expect((await call("sendMessage", { chat_id: 2000, text: "x" })).json.parameters).toEqual({ retry_after: 1 });
    expect(api.rateLimitHits).toBe(2);
  });

  it("F9 sendMessage returns a realistic Message and rejects thread 1 in a forum", async () => {
    api = new FakeTelegramBotApi();
    await api.start();
    const alice = fakeUser("Alice");
    const forum = supergroupChat(-100888, "Forum", { forum: true });
    api.injectText({ chat: forum, from: alice, text: "hi", threadId: 77 });
    const { json } = await call("sendMessage", { chat_id: "-100888", text: "reply", message_thread_id: 77 });
    expect(json.result).toMatchObject({ message_id: 2, from: { id: api.bot.id }, chat: { id: -100888, is_forum: true }, text: "reply", message_thread_id: 77, is_topic_message: true });
    expect(await call("sendMessage", { chat_id: -100888, text: "x", message_thread_id: 1 })).toEqual({ status: 400, json: errors.threadNotFound });
    expect((await call("sendMessage", { chat_id: 42, text: " " })).json.description).toBe("Bad Request: message text is empty");
  });

  it("F10 injected messages carry Telegram-style entities and topic replies", async () => {
    api = new FakeTelegramBotApi();
    const alice = fakeUser("Alice");
    const u = api.injectText({ chat: supergroupChat(-1, "F", { forum: true }), from: alice, text: "/send@SwitchboardTestBot off @SwitchboardTestBot", threadId: 5 });
    const m = u.message as any;
    expect(m.entities).toEqual([
      { type: "bot_command", offset: 0, length: 24 },
      { type: "mention", offset: 29, length: 19 },
    ]);
    expect(m).toMatchObject({ message_thread_id: 5, is_topic_message: true, reply_to_message: { message_id: 5, forum_topic_created: { name: "Topic 5" } } });
    expect(computeEntities("mail a@b.com or @ab")).toEqual([]);
  });

  it("F11 stop() closes parked long polls and open connections promptly", async () => {
    api = new FakeTelegramBotApi();
    await api.start();
    const pending = call("getUpdates", { timeout: 50 }).catch((e: unknown) => e);
    await api.waitForCall("getUpdates");
    // The poll is parked for 50 s, beyond the test's timeout: stop() must close it, not wait.
    await api.stop();
    expect(await pending).toBeInstanceOf(Error);
  });

  it("F12 failNext answers the next N calls then restores default behaviour", async () => {
    api = new FakeTelegramBotApi();
    await api.start();
    api.failNext("sendMessage", errors.blocked, 2);
    const group = groupChat(-7, "G");
    expect((await call("sendMessage", { chat_id: group.id, text: "a" })).status).toBe(403);
    expect((await call("sendMessage", { chat_id: group.id, text: "b" })).status).toBe(403);
    expect((await call("sendMessage", { chat_id: group.id, text: "c" })).status).toBe(200);
    await waitFor(() => api.sent.length === 1);
    expect(api.callsTo("sendMessage").map((c) => (c.reply as any).ok)).toEqual([false, false, true]);
  });
});
