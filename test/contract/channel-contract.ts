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
  /** Edit the direct message `who` sent last, as the platform delivers an edit. */
  editDm(who: Who, text: string): Promise<void>;
  /** Inject a photo without a caption from `who`, directly or in the group (not addressing the bot). */
  dmPhoto(who: Who): Promise<void>;
  groupPhoto(who: Who): Promise<void>;
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
  /** Web chat has no groups, no platform limit, no edits and no media: those cases do not apply to it. */
  groups?: boolean;
  chunking?: boolean;
  edits?: boolean;
  media?: boolean;
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
    const start = async () => (ctx = await driver.start());

    it("D1 R1 R24 a direct message lands in agent:main:main with lastChannel, lastTo and deliveryContext", async () => {
      const c = await start();
      await c.dm("stranger", "hello there");
      await vi.waitFor(() => expect(c.dmSent("stranger")).toEqual(["echo: hello there"]), WAIT);
      const rows = (await (await c.harness.client()).request("sessions.list", {})).sessions;
      expect(rows.find((r: any) => r.key === "agent:main:main")).toMatchObject({
        kind: "main",
        channel: driver.channel,
        lastChannel: driver.channel,
        lastTo: c.dmTo("stranger"),
        deliveryContext: { channel: driver.channel, to: c.dmTo("stranger"), accountId: "default" },
      });
    });

    it("a dropped connection loses no inbound message", async () => {
      const c = await start();
      await c.dm("stranger", "before");
      await vi.waitFor(() => expect(c.dmSent("stranger")).toEqual(["echo: before"]), WAIT);
      await c.drop();
      await c.dm("stranger", "after the drop");
      await vi.waitFor(() => expect(c.dmSent("stranger")).toEqual(["echo: before", "echo: after the drop"]), WAIT);
    });

    /** The user turns of a session's transcript, in order. */
    const said = async (c: ContractContext, key: string) => {
      const entry = c.harness.app.sessions.require(key);
      return (await c.harness.app.transcripts.readMessages(c.harness.app.sessions.transcriptPath(entry))).flatMap((m) => (m.role === "user" ? [m.content] : []));
    };

    if (driver.edits !== false) {
      it("an edit is not a new prompt: a user who fixes a typo is answered once, and the transcript keeps what was first said", async () => {
        const c = await start();
        await c.dm("stranger", "helo");
        await vi.waitFor(() => expect(c.dmSent("stranger")).toEqual(["echo: helo"]), WAIT);
        await c.editDm("stranger", "hello");
        // The next message waits in the session's lane behind the edit: once it is answered, the edit was handled.
        await c.dm("stranger", "and then?");
        await vi.waitFor(() => expect(c.dmSent("stranger")).toEqual(["echo: helo", "echo: and then?"]), WAIT);
        await c.harness.app.router.idle();
        expect(c.harness.model.requests).toHaveLength(2);
        expect(await said(c, "agent:main:main")).toEqual(["helo", "and then?"]);
      });
    }

    if (driver.media !== false) {
      it("media without a caption reaches the agent as a placeholder saying what was sent, and is answered", async () => {
        const c = await start();
        await c.dmPhoto("stranger");
        await vi.waitFor(() => expect(c.dmSent("stranger")).toEqual([expect.stringMatching(/^echo: \[photo\b/)]), WAIT);
      });
    }

    if (driver.groups !== false && driver.media !== false) {
      it("mention gating: a photo without a caption in a group is recorded as its placeholder, not answered", async () => {
        const c = await start();
        await c.groupPhoto("stranger");
        await vi.waitFor(async () => expect(await said(c, c.groupKey)).toEqual([expect.stringMatching(/\[photo\b/)]), WAIT);
        await c.harness.app.router.idle();
        expect(c.groupSent()).toEqual([]);
      });
    }

    if (driver.groups !== false) {
      it("D1 R2 R23 a mentioned group message lands in the group key and the reply returns to the group", async () => {
        const c = await start();
        await c.group("stranger", "hi group", true);
        await vi.waitFor(() => expect(c.groupSent()).toEqual([expect.stringMatching(/^echo: .*hi group$/)]), WAIT);
        const rows = (await (await c.harness.client()).request("sessions.list", { kinds: ["group"] })).sessions;
        expect(rows).toEqual([
          expect.objectContaining({ key: c.groupKey, kind: "group", channel: driver.channel, lastTo: c.groupTo, deliveryContext: expect.objectContaining({ channel: driver.channel, to: c.groupTo }) }),
        ]);
      });

      it("mention gating: an unmentioned group message is recorded, not answered", async () => {
        const c = await start();
        await c.group("stranger", "just chatting", false);
        await vi.waitFor(() => expect(c.harness.app.sessions.get(c.groupKey)).toBeDefined(), WAIT);
        await c.harness.app.router.idle();
        expect(c.groupSent()).toEqual([]);
      });

      it("R28 D2 D3 the owner's /send off stops delivery to that chat; a stranger's /send on changes nothing", async () => {
        const c = await start();
        await c.group("owner", "/send off", false);
        await vi.waitFor(() => expect(c.groupSent()).toEqual(["⚙️ Send policy set to off."]), WAIT);
        await c.group("stranger", "/send on", true);
        await c.group("stranger", "are you there?", true);
        await vi.waitFor(async () => {
          const entry = c.harness.app.sessions.require(c.groupKey);
          const said = (await c.harness.app.transcripts.readMessages(c.harness.app.sessions.transcriptPath(entry))).map((m) => (m.role === "user" ? m.content : ""));
          expect(said.some((t) => t.endsWith("are you there?"))).toBe(true);
        }, WAIT);
        await c.harness.app.router.idle();
        expect(c.harness.app.sessions.get(c.groupKey)?.sendPolicy).toBe("deny");
        expect(c.groupSent()).toEqual(["⚙️ Send policy set to off."]);
      });

      it("R28 the owner's /send off led by a mention of the bot is the command (the mention addresses the bot), not a prompt", async () => {
        const c = await start();
        await c.group("owner", "/send off", true);
        await vi.waitFor(() => expect(c.groupSent()).toEqual(["⚙️ Send policy set to off."]), WAIT);
        await c.harness.app.router.idle();
        expect(c.harness.app.sessions.get(c.groupKey)?.sendPolicy).toBe("deny");
        expect(c.harness.model.requests).toHaveLength(0);
      });
    }

    if (driver.chunking !== false) {
      it("long replies arrive chunked within the platform limit, in order", async () => {
        const c = await start();
        const paragraphs = Array.from({ length: 4 }, (_, i) => `Paragraph ${i}: ${"lorem ipsum ".repeat(Math.ceil(driver.chunkLimit / 24))}`.trim());
        c.harness.model.setResponder(() => ({ content: paragraphs.join("\n\n") }));
        await c.dm("stranger", "tell me a lot");
        await vi.waitFor(() => expect(c.dmSent("stranger").join("\n\n").length).toBeGreaterThanOrEqual(paragraphs.join("\n\n").length - 20), WAIT);
        const chunks = c.dmSent("stranger");
        expect(chunks.length).toBeGreaterThan(2);
        expect(chunks.every((t) => t.length <= driver.chunkLimit)).toBe(true);
        expect(chunks.join(" ").replace(/\s+/g, " ")).toBe(paragraphs.join(" ").replace(/\s+/g, " "));
      });

      it("no duplicate reply after a send that failed half-way", async () => {
        const c = await start();
        const reply = ["first part " + "a".repeat(driver.chunkLimit - 40), "second part " + "b".repeat(driver.chunkLimit - 40)].join("\n\n");
        c.harness.model.setResponder(() => ({ content: reply }));
        c.failNthSend(2);
        await c.dm("stranger", "two chunks please");
        await vi.waitFor(() => expect(c.dmSent("stranger")).toHaveLength(2), WAIT);
        await c.harness.app.router.idle();
        const sent = c.dmSent("stranger");
        expect(sent[0]).toMatch(/^first part a+$/);
        expect(sent[1]).toMatch(/^second part b+$/);
      });
    }
  });
}
