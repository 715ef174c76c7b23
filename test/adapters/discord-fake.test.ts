/**
 * The fake itself, driven by a bare discord.js client: the Discord rules other suites rely on
 * (MESSAGE_CONTENT blanking, auth, rate-limit headers, heartbeats) must hold, or tests built on the
 * fake would pass against a friendlier Discord than the real one.
 */
import { Client, Events, GatewayIntentBits, Partials, type Message } from "discord.js";
import { afterEach, describe, expect, it, vi } from "vitest";
import { FakeDiscord } from "../fakes/discord-api.js";

const waitOpts = { timeout: 5000, interval: 10 };
const cleanups: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  for (const fn of cleanups.splice(0).reverse()) await fn();
});

async function setup(intents: GatewayIntentBits[], options: ConstructorParameters<typeof FakeDiscord>[0] = {}) {
  const fake = await new FakeDiscord(options).start();
  cleanups.push(() => fake.stop());
  const client = new Client({ intents, partials: [Partials.Channel], rest: { api: fake.apiBase } });
  cleanups.push(() => client.destroy());
  const seen: Message[] = [];
  client.on(Events.MessageCreate, (m) => void seen.push(m));
  await client.login(fake.token);
  return { fake, client, seen };
}

describe("FakeDiscord", () => {
  it("blanks guild message content for a client without MESSAGE_CONTENT unless the bot is mentioned; DMs keep it", async () => {
    const { fake, seen } = await setup([GatewayIntentBits.Guilds, GatewayIntentBits.GuildMessages, GatewayIntentBits.DirectMessages]);
    fake.injectMessage({ channelId: fake.ids.general, content: "secret words" });
    fake.injectMessage({ channelId: fake.ids.general, content: `<@${fake.ids.bot}> visible` });
    fake.injectDM({ content: "dm text" });
    await vi.waitFor(() => expect(seen).toHaveLength(3), waitOpts);
    expect(seen.map((m) => m.content)).toEqual(["", `<@${fake.ids.bot}> visible`, "dm text"]);
  });

  it("drops events for intents the client did not ask for", async () => {
    const { fake, seen } = await setup([GatewayIntentBits.Guilds, GatewayIntentBits.DirectMessages]);
    fake.injectMessage({ channelId: fake.ids.general, content: "guild" });
    fake.injectDM({ content: "dm" });
    await vi.waitFor(() => expect(seen).toHaveLength(1), waitOpts);
    expect(seen[0]!.content).toBe("dm");
  });

  it("requires the bot token on REST, except for interaction callbacks", async () => {
    const fake = await new FakeDiscord().start();
    cleanups.push(() => fake.stop());
    const res = await fetch(`${fake.apiBase}/v10/channels/${fake.ids.general}/messages`, {
      method: "POST",
      headers: { authorization: "Bot wrong", "content-type": "application/json" },
      body: JSON.stringify({ content: "x" }),
    });
    expect(res.status).toBe(401);
    expect(await res.json()).toEqual({ message: "401: Unauthorized", code: 0 });
    const unknown = await fetch(`${fake.apiBase}/v10/interactions/1/nope/callback`, { method: "POST", headers: { "content-type": "application/json" }, body: "{}" });
    expect(unknown.status).toBe(404);
    expect((await unknown.json()) as object).toMatchObject({ code: 10062 });
  });

  it("enforces the per-channel limit with Discord's headers and body when asked", async () => {
    const fake = await new FakeDiscord({ enforceRateLimits: true }).start();
    cleanups.push(() => fake.stop());
    const post = () =>
      fetch(`${fake.apiBase}/v10/channels/${fake.ids.general}/messages`, {
        method: "POST",
        headers: { authorization: `Bot ${fake.token}`, "content-type": "application/json" },
        body: JSON.stringify({ content: "x" }),
      });
    const statuses: number[] = [];
    let last: Response | undefined;
    for (let i = 0; i < 6; i++) {
      last = await post();
      statuses.push(last.status);
    }
    expect(statuses).toEqual([200, 200, 200, 200, 200, 429]);
    expect(last!.headers.get("x-ratelimit-limit")).toBe("5");
    expect(last!.headers.get("x-ratelimit-remaining")).toBe("0");
    expect(Number(last!.headers.get("retry-after"))).toBeGreaterThan(4);
    expect(await last!.json()).toMatchObject({ message: "You are being rate limited.", global: false });
    expect(fake.rateLimitHits).toBe(1);
    expect(fake.sent()).toHaveLength(5);
  });

  it("acks heartbeats without forcing a re-IDENTIFY", async () => {
    const { fake } = await setup([GatewayIntentBits.Guilds], { heartbeatIntervalMs: 50 });
    await vi.waitFor(() => expect(fake.framesWithOp(1).length).toBeGreaterThanOrEqual(3), waitOpts);
    expect(fake.framesWithOp(2)).toHaveLength(1);
  });
});
