/**
 * The channel contract (issue "Channel adapters" §8): one suite, run against every adapter with
 * its real SDK talking to a protocol fake on 127.0.0.1. Each driver says how to inject a platform
 * message and how to read what the platform received; the assertions are shared.
 */
import { afterEach, describe, expect, it, vi } from "vitest";
import type { ChannelId } from "../../src/channels/types.js";
import type { Harness } from "../helpers/harness.js";

export type Who = "owner" | "stranger";

export interface ContractContext {
  harness: Harness;
  /** Inject a direct message from `who`. */
  dm(who: Who, text: string): Promise<void>;
  /** Inject a group message; `mentioned` addresses the bot. */
  group(who: Who, text: string, mentioned: boolean): Promise<void>;
  /** Texts the platform received for the DM of `who` / for the group, in order. */
  dmSent(who: Who): string[];
  groupSent(): string[];
  /** The `to` recorded for the DM of `who` and the group. */
  dmTo(who: Who): string;
  groupTo: string;
  /** The session key of the group. */
  groupKey: string;
  /** Break the platform connection (the adapter must recover by itself). */
  drop(): Promise<void>;
  /** Make the n-th send from now fail once with a transient server error. */
  failNthSend(n: number): void;
  stop(): Promise<void>;
}

export interface ContractDriver {
  channel: ChannelId;
  chunkLimit: number;
  start(): Promise<ContractContext>;
}

const WAIT = { timeout: 10_000, interval: 20 };

export function runChannelContract(driver: ContractDriver): void {
  describe(`channel contract: ${driver.channel}`, () => {
    let ctx: ContractContext | undefined;
    afterEach(async () => {
      await ctx?.stop();
      ctx = undefined;
    });

    it("D1 R1 R24 a direct message lands in agent:main:main with lastChannel, lastTo and deliveryContext", async () => {
      ctx = await driver.start();
      await ctx.dm("stranger", "hello there");
      await vi.waitFor(() => expect(ctx!.dmSent("stranger")).toEqual(["echo: hello there"]), WAIT);
      const rows = (await (await ctx.harness.client()).request("sessions.list", {})).sessions;
      const main = rows.find((r: any) => r.key === "agent:main:main");
      expect(main).toMatchObject({
        kind: "main",
        channel: driver.channel,
        lastChannel: driver.channel,
        lastTo: ctx.dmTo("stranger"),
        deliveryContext: { channel: driver.channel, to: ctx.dmTo("stranger"), accountId: "default" },
      });
    });

    it("D1 R2 R23 a mentioned group message lands in the group key and the reply returns to the group", async () => {
      ctx = await driver.start();
      await ctx.group("stranger", "hi group", true);
      await vi.waitFor(() => expect(ctx!.groupSent()).toEqual([expect.stringMatching(/^echo: .*hi group$/)]), WAIT);
      const rows = (await (await ctx.harness.client()).request("sessions.list", { kinds: ["group"] })).sessions;
      expect(rows).toEqual([expect.objectContaining({ key: ctx.groupKey, kind: "group", channel: driver.channel, lastTo: ctx.groupTo, deliveryContext: expect.objectContaining({ channel: driver.channel, to: ctx.groupTo }) })]);
    });

    it("mention gating: an unmentioned group message is recorded, not answered", async () => {
      ctx = await driver.start();
      await ctx.group("stranger", "just chatting", false);
      await vi.waitFor(() => expect(ctx!.harness.app.sessions.get(ctx!.groupKey)).toBeDefined(), WAIT);
      await ctx.harness.app.router.idle();
      expect(ctx.groupSent()).toEqual([]);
    });

    it("R28 D2 D3 the owner's /send off stops delivery to that chat; a stranger's /send on changes nothing", async () => {
      ctx = await driver.start();
      await ctx.group("owner", "/send off", false);
      await vi.waitFor(() => expect(ctx!.groupSent()).toEqual(["⚙️ Send policy set to off."]), WAIT);
      await ctx.group("stranger", "/send on", true);
      await ctx.group("stranger", "are you there?", true);
      await vi.waitFor(async () => {
        const entry = ctx!.harness.app.sessions.require(ctx!.groupKey);
        const said = (await ctx!.harness.app.transcripts.readMessages(ctx!.harness.app.sessions.transcriptPath(entry))).map((m) => (m.role === "user" ? m.content : ""));
        expect(said.some((t) => t.endsWith("are you there?"))).toBe(true);
      }, WAIT);
      await ctx.harness.app.router.idle();
      expect(ctx.harness.app.sessions.get(ctx.groupKey)?.sendPolicy).toBe("deny");
      expect(ctx.groupSent()).toEqual(["⚙️ Send policy set to off."]);
    });

    it("long replies arrive chunked within the platform limit, in order", async () => {
      ctx = await driver.start();
      const paragraphs = Array.from({ length: 4 }, (_, i) => `Paragraph ${i}: ${"lorem ipsum ".repeat(Math.ceil(driver.chunkLimit / 24))}`.trim());
      ctx.harness.model.setResponder(() => ({ content: paragraphs.join("\n\n") }));
      await ctx.dm("stranger", "tell me a lot");
      await vi.waitFor(() => expect(ctx!.dmSent("stranger").join("\n\n").length).toBeGreaterThanOrEqual(paragraphs.join("\n\n").length - 20), WAIT);
      const chunks = ctx.dmSent("stranger");
      expect(chunks.length).toBeGreaterThan(2);
      expect(chunks.every((c) => c.length <= driver.chunkLimit)).toBe(true);
      expect(chunks.join(" ").replace(/\s+/g, " ")).toBe(paragraphs.join(" ").replace(/\s+/g, " "));
    });

    it("a dropped connection loses no inbound message", async () => {
      ctx = await driver.start();
      await ctx.dm("stranger", "before");
      await vi.waitFor(() => expect(ctx!.dmSent("stranger")).toEqual(["echo: before"]), WAIT);
      await ctx.drop();
      await ctx.dm("stranger", "after the drop");
      await vi.waitFor(() => expect(ctx!.dmSent("stranger")).toEqual(["echo: before", "echo: after the drop"]), WAIT);
    });

    it("no duplicate reply after a send that failed half-way", async () => {
      ctx = await driver.start();
      const reply = ["first part " + "a".repeat(driver.chunkLimit - 40), "second part " + "b".repeat(driver.chunkLimit - 40)].join("\n\n");
      ctx.harness.model.setResponder(() => ({ content: reply }));
      ctx.failNthSend(2);
      await ctx.dm("stranger", "two chunks please");
      await vi.waitFor(() => expect(ctx!.dmSent("stranger")).toHaveLength(2), WAIT);
      await ctx.harness.app.router.idle();
      const sent = ctx.dmSent("stranger");
      expect(sent[0]).toMatch(/^first part a+$/);
      expect(sent[1]).toMatch(/^second part b+$/);
    });
  });
}
