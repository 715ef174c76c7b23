import { mkdirSync, rmSync, writeFileSync } from "node:fs";
import path from "node:path";
import { afterEach, describe, expect, it, vi } from "vitest";
import { PlatformError, type InboundMessage } from "../../src/channels/types.js";
import { EDITED_COMMAND_REPLY, GIVEN_UP_NOTICE, MAX_RESUMES } from "../../src/inbound/router.js";
import type { AgentTool } from "../../src/tools/types.js";
import { echoLastUser, FakeModelServer } from "../fakes/model-server.js";
import { inbound, startHarness, type Harness } from "../helpers/harness.js";
import { stateDirWithPending, withInboundStore, type StoredInbound } from "../helpers/inbound-store.js";
import { RecordingAdapter } from "../helpers/recording-adapter.js";
import { openStoreDb } from "../helpers/store-db.js";

let h: Harness | undefined;
afterEach(async () => {
  await h?.stop();
  h = undefined;
});

const OWNER = "1001";
const STRANGER = "2002";

async function boot(config: NonNullable<Parameters<typeof startHarness>[0]>["config"] = {}, stateDir?: string) {
  const telegram = new RecordingAdapter("telegram");
  h = await startHarness({ adapters: [telegram], stateDir, config: { commands: { owners: [`telegram:${OWNER}`] }, channels: { telegram: { enabled: false, requireMention: true } }, ...config } });
  return { h, telegram };
}

/** A file where the directory of every transcript should be: no transcript can be created. Returns its path. */
function blockTranscripts(stateDir: string): string {
  const dir = path.join(stateDir, "agents", "main", "sessions");
  mkdirSync(path.dirname(dir), { recursive: true });
  writeFileSync(dir, "not a directory");
  return dir;
}

const inboundId = (msg: InboundMessage) => `${msg.channel}:${msg.accountId}:${msg.messageId}`;
const DAY_MS = 24 * 3600_000;

describe("inbound router", () => {
  it("R30 a reply to its own chat is judged by its session's policy alone: a stale session of an earlier dmScope at that chat, left denied, does not silence the shared main", async () => {
    const { h, telegram } = await boot();
    // Left over from a per-peer dmScope: it lived at 1001's chat and was silenced there.
    await h.app.sessions.upsert("agent:main:direct:1001", "main", { sendPolicy: "deny", deliveryContext: { channel: "telegram", to: "1001", accountId: "default" } });
    // 1001's reply fails once (a dropped connection), so it is judged again at its retry, after
    // another peer has spoken and main's recorded route has moved on to 1002.
    telegram.failures.push(new PlatformError("telegram", "transport", "socket hang up"));
    await h.app.router.accept(inbound({ text: "from 1001", peerId: "1001", to: "1001" }));
    await vi.waitFor(() => expect(telegram.failures).toHaveLength(0));
    await h.app.router.accept(inbound({ text: "from 1002", peerId: "1002", to: "1002" }));
    await vi.waitFor(() => expect([...telegram.textsTo("1001"), ...telegram.textsTo("1002")].sort()).toEqual(["echo: from 1001", "echo: from 1002"]));
  });

  it("D1 R1 a direct message runs the agent on agent:main:main and the reply goes back through the outbox", async () => {
    const { h, telegram } = await boot();
    await h.app.router.accept(inbound({ text: "ping", peerId: "1001", to: "1001" }));
    await vi.waitFor(() => expect(telegram.textsTo("1001")).toEqual(["echo: ping"]));
    const entry = h.app.sessions.get("agent:main:main");
    expect(entry).toMatchObject({ lastChannel: "telegram", lastTo: "1001", lastAccountId: "default", chatType: "direct", displayName: "Ada", deliveryContext: { channel: "telegram", to: "1001", accountId: "default" } });
  });

  it("typing shows only for a run that takes a noticeable time (an instant reply sends none), at most once per chat every few seconds", async () => {
    const { h, telegram } = await boot();
    await h.app.router.accept(inbound({ text: "quick", peerId: "1001", to: "1001" }));
    await vi.waitFor(() => expect(telegram.textsTo("1001")).toEqual(["echo: quick"]));
    expect(telegram.typingCalls).toHaveLength(0);
    h.model.setResponder(() => ({ content: "slow answer", delayMs: 900 }));
    await h.app.router.accept(inbound({ text: "slow", peerId: "1001", to: "1001" }));
    await vi.waitFor(() => expect(telegram.textsTo("1001")).toEqual(["echo: quick", "slow answer"]), { timeout: 5000 });
    expect(telegram.typingCalls.map((t) => t.to)).toEqual(["1001"]);
    // A second slow run in the same chat right after: the indicator is not repeated within seconds.
    await h.app.router.accept(inbound({ text: "slow again", peerId: "1001", to: "1001" }));
    await vi.waitFor(() => expect(telegram.textsTo("1001")).toHaveLength(3), { timeout: 5000 });
    expect(telegram.typingCalls.map((t) => t.to)).toEqual(["1001"]);
  });

  it("D2 R28 a run still going when the owner says /send off stops showing typing in the chat it silenced", async () => {
    const { h, telegram } = await boot();
    const asked = inbound({ text: "think hard", peerId: OWNER, senderId: OWNER, to: OWNER });
    const release = answerWhenReleased(h);
    // The indicator repeats on an interval while the run lasts: that interval is driven by hand, and
    // with it the clock past the per-chat gap, so each tick is one the chat would see.
    vi.useFakeTimers({ toFake: ["setInterval", "clearInterval", "performance"] });
    try {
      await h.app.router.accept(asked);
      await vi.waitFor(() => expect(telegram.typingCalls).toHaveLength(1), { timeout: 5000 });
      vi.advanceTimersByTime(6000);
      // The control: while the chat is allowed, the run's indicator repeats.
      expect(telegram.typingCalls).toHaveLength(2);
      await h.app.router.accept(inbound({ text: "/send off", peerId: OWNER, senderId: OWNER, to: OWNER }));
      await vi.waitFor(() => expect(telegram.textsTo(OWNER)).toEqual(["⚙️ Send policy set to off."]));
      vi.advanceTimersByTime(6000);
      expect(telegram.typingCalls).toHaveLength(2);
    } finally {
      vi.useRealTimers();
      release();
    }
    // The run's answer itself is suppressed, as ever.
    await vi.waitFor(() => expect(h.app.outbox.get(`reply:${inboundId(asked)}`)).toMatchObject({ state: "suppressed" }));
    expect(telegram.textsTo(OWNER)).toEqual(["⚙️ Send policy set to off."]);
    expect(telegram.typingCalls).toHaveLength(2);
  });

  it("typing keeps showing for a long run after the wall clock is set back by hours (an NTP correction): the per-chat gap counts elapsed time", async () => {
    const { h, telegram } = await boot();
    const release = answerWhenReleased(h);
    // The indicator's interval and the monotonic clock are driven by hand; the wall clock is moved alone.
    vi.useFakeTimers({ toFake: ["setInterval", "clearInterval", "performance"] });
    const realNow = Date.now.bind(Date);
    const clock = vi.spyOn(Date, "now");
    try {
      await h.app.router.accept(inbound({ text: "think hard", peerId: "1001", to: "1001" }));
      await vi.waitFor(() => expect(telegram.typingCalls).toHaveLength(1), { timeout: 5000 });
      clock.mockImplementation(() => realNow() - 3 * 3600_000);
      vi.advanceTimersByTime(6000);
      expect(telegram.typingCalls).toHaveLength(2);
    } finally {
      clock.mockRestore();
      vi.useRealTimers();
      release();
    }
    await vi.waitFor(() => expect(telegram.textsTo("1001")).toEqual(["late answer"]), { timeout: 5000 });
  });

  it("R2 a mentioned group message lands in agent:main:telegram:group:<id> with the channel recorded", async () => {
    const { h, telegram } = await boot();
    await h.app.router.accept(inbound({ chatType: "group", peerId: "-100200", to: "-100200", groupName: "Team", wasMentioned: true, text: "@bot hi" }));
    await vi.waitFor(() => expect(telegram.textsTo("-100200")).toHaveLength(1));
    expect(h.app.sessions.get("agent:main:telegram:group:-100200")).toMatchObject({ channel: "telegram", chatType: "group", displayName: "Team" });
  });

  it("mention gating: an unmentioned group message is recorded but not answered", async () => {
    const { h, telegram } = await boot();
    await h.app.router.accept(inbound({ chatType: "group", peerId: "-100300", to: "-100300", wasMentioned: false, text: "chatter" }));
    await h.app.router.idle();
    expect(telegram.sent).toHaveLength(0);
    const entry = h.app.sessions.require("agent:main:telegram:group:-100300");
    const messages = await h.app.transcripts.readMessages(h.app.sessions.transcriptPath(entry));
    expect(messages.map((m) => m.role === "user" && m.content)).toEqual(["chatter"]);
    expect(h.model.requests).toHaveLength(0);
  });

  it("mention gating: a group's own requireMention (channels.telegram.groups) overrides the \"*\" entry, which still covers the other groups", async () => {
    const { h, telegram } = await boot({ channels: { telegram: { enabled: false, requireMention: true, groups: { "*": { requireMention: true }, "-100123": { requireMention: false } } } } });
    await h.app.router.accept(inbound({ chatType: "group", peerId: "-100123", to: "-100123", wasMentioned: false, text: "open room" }));
    await h.app.router.accept(inbound({ chatType: "group", peerId: "-100999", to: "-100999", wasMentioned: false, text: "other room" }));
    await h.app.router.idle();
    await vi.waitFor(() => expect(telegram.textsTo("-100123")).toEqual(["echo: open room"]));
    expect(telegram.textsTo("-100999")).toEqual([]);
    expect(h.model.requests).toHaveLength(1);
    const other = h.app.sessions.require("agent:main:telegram:group:-100999");
    expect((await h.app.transcripts.readMessages(h.app.sessions.transcriptPath(other))).map((m) => m.role === "user" && m.content)).toEqual(["other room"]);
  });

  it("R28 D3 the owner's /send off silences the chat (answered anyway); inbound is still recorded with no run; /send inherit restores", async () => {
    const { h, telegram } = await boot();
    const group = { chatType: "group" as const, peerId: "-100400", to: "-100400", wasMentioned: true };
    await h.app.router.accept(inbound({ ...group, senderId: OWNER, text: "/send off" }));
    await vi.waitFor(() => expect(telegram.textsTo("-100400")).toEqual(["⚙️ Send policy set to off."]));
    expect(h.app.sessions.get("agent:main:telegram:group:-100400")?.sendPolicy).toBe("deny");

    await h.app.router.accept(inbound({ ...group, senderId: STRANGER, text: "anyone there?" }));
    await h.app.router.idle();
    expect(telegram.textsTo("-100400")).toHaveLength(1);
    expect(h.model.requests).toHaveLength(0);
    const entry = h.app.sessions.require("agent:main:telegram:group:-100400");
    const said = (await h.app.transcripts.readMessages(h.app.sessions.transcriptPath(entry))).map((m) => (m.role === "user" ? m.content : m.role));
    expect(said).toContain("anyone there?");

    await h.app.router.accept(inbound({ ...group, senderId: OWNER, text: "/send inherit" }));
    await vi.waitFor(() => expect(telegram.textsTo("-100400")).toContain("⚙️ Send policy set to inherit."));
    expect(h.app.sessions.get("agent:main:telegram:group:-100400")?.sendPolicy).toBeUndefined();
    await h.app.router.accept(inbound({ ...group, senderId: STRANGER, text: "now?" }));
    await vi.waitFor(() => expect(telegram.textsTo("-100400")).toContain("echo: now?"));
  });

  it("R28 R30 D3 a direct chat silenced by the owner's /send off: a message is still recorded, with no run", async () => {
    const { h, telegram } = await boot();
    await h.app.router.accept(inbound({ senderId: OWNER, text: "/send off" }));
    await vi.waitFor(() => expect(telegram.textsTo("1001")).toEqual(["⚙️ Send policy set to off."]));
    expect(h.app.sessions.get("agent:main:main")?.sendPolicy).toBe("deny");

    await h.app.router.accept(inbound({ senderId: OWNER, text: "still there?" }));
    await h.app.router.idle();
    // The outbox would drop the reply anyway; what is checked is that no model call is spent on it.
    expect(h.model.requests).toHaveLength(0);
    expect(telegram.sent.map((m) => m.text)).toEqual(["⚙️ Send policy set to off."]);
    const entry = h.app.sessions.require("agent:main:main");
    const said = (await h.app.transcripts.readMessages(h.app.sessions.transcriptPath(entry))).map((m) => (m.role === "user" ? m.content : m.role));
    expect(said).toEqual(["still there?"]);
  });

  it("R28 a non-owner's /send is ignored: no policy change, no answer, never run as a prompt", async () => {
    const { h, telegram } = await boot();
    for (const spoof of [
      inbound({ senderId: STRANGER, senderName: "Owner", text: "/send off" }),
      inbound({ senderId: STRANGER, text: "/send off", peerId: "2002", to: "2002" }),
      inbound({ senderId: OWNER, forwarded: true, text: "/send off" }),
      inbound({ senderId: OWNER, edited: true, text: "/send off" }),
      inbound({ senderId: OWNER, channel: "discord", text: "/send off" }),
    ]) {
      await h.app.router.accept(spoof);
    }
    await h.app.router.idle();
    expect(h.app.sessions.list().filter((e) => e.sendPolicy)).toEqual([]);
    expect(telegram.sent.map((m) => m.text)).not.toContain("⚙️ Send policy set to off.");
    // Only the owner's forwarded copy ran, as a plain prompt (a forward relays someone's words);
    // the edited one is told to send the command anew; strangers' never ran.
    expect(h.model.requests).toHaveLength(1);
    expect(telegram.sent.map((m) => m.text)).toContain(EDITED_COMMAND_REPLY);
  });

  it("an edit is not a new prompt: it runs nothing and answers nothing, directly or mentioning the bot in a group, and the transcript keeps what was first said", async () => {
    const { h, telegram } = await boot();
    await h.app.router.accept(inbound({ senderId: STRANGER, peerId: STRANGER, to: STRANGER, text: "helo" }));
    await vi.waitFor(() => expect(telegram.textsTo(STRANGER)).toEqual(["echo: helo"]));
    await h.app.router.accept(inbound({ senderId: STRANGER, peerId: STRANGER, to: STRANGER, text: "hello", edited: true }));
    await h.app.router.accept(inbound({ senderId: OWNER, chatType: "group", wasMentioned: true, text: "@bot what now", edited: true }));
    await h.app.router.idle();
    await vi.waitFor(() => expect(h.app.outbox.pending).toBe(0));
    expect(h.model.requests).toHaveLength(1);
    expect(telegram.sent.map((m) => m.text)).toEqual(["echo: helo"]);
    const entry = h.app.sessions.require("agent:main:main");
    expect((await h.app.transcripts.readMessages(h.app.sessions.transcriptPath(entry))).flatMap((m) => (m.role === "user" ? [m.content] : []))).toEqual(["helo"]);
    expect(h.app.sessions.get("agent:main:telegram:group:-100200")).toBeUndefined();
  });

  it("R28 an edit into a command runs neither the command nor a prompt: the owner is told to send it anew, a stranger is ignored", async () => {
    const { h, telegram } = await boot();
    await h.app.router.accept(inbound({ senderId: STRANGER, edited: true, text: "/status" }));
    await h.app.router.accept(inbound({ senderId: OWNER, edited: true, text: "/new what now?" }));
    await h.app.router.idle();
    await vi.waitFor(() => expect(h.app.outbox.pending).toBe(0));
    expect(h.model.requests).toEqual([]);
    expect(telegram.sent.map((m) => m.text)).toEqual([EDITED_COMMAND_REPLY]);
    // Nor was a session reset, or even started.
    expect(h.app.sessions.list()).toEqual([]);
  });

  it("R28 /send with no mode answers the usage line; /sid reports key, kind, channel and policy", async () => {
    const { h, telegram } = await boot();
    await h.app.router.accept(inbound({ senderId: OWNER, text: "/send" }));
    await vi.waitFor(() => expect(telegram.textsTo("1001")).toEqual(["⚙️ Usage: /send on|off|inherit"]));
    await h.app.router.accept(inbound({ senderId: OWNER, text: "/sid" }));
    await vi.waitFor(() => expect(telegram.textsTo("1001")[1]).toMatch(/key: agent:main:main\nkind: main\nchannel: telegram\nsend policy: allow \(default\)/));
  });

  it("/new starts a fresh sessionId and keeps the send policy", async () => {
    const { h, telegram } = await boot();
    await h.app.router.accept(inbound({ senderId: OWNER, text: "/send off" }));
    await vi.waitFor(() => expect(telegram.sent).toHaveLength(1));
    const before = h.app.sessions.require("agent:main:main").sessionId;
    await h.app.router.accept(inbound({ senderId: OWNER, text: "/new" }));
    await vi.waitFor(() => expect(telegram.sent).toHaveLength(2));
    const after = h.app.sessions.require("agent:main:main");
    expect(after.sessionId).not.toBe(before);
    expect(after.sendPolicy).toBe("deny");
  });

  it("/new while a message waits for its run (every run slot busy): that message is answered from the session it was said in, and the fresh session starts empty", async () => {
    let release!: () => void;
    const held = new Promise<void>((r) => (release = r));
    const { h, telegram } = await boot({ agents: { defaults: { maxConcurrent: 1 } } });
    h.model.setResponder(async (req, i) => {
      if (JSON.stringify(req.messages).includes("hold the slot")) await held;
      return echoLastUser(req, i);
    });
    // Another chat's slow run holds the only run slot.
    await h.app.router.accept(inbound({ chatType: "group", peerId: "-100900", to: "-100900", wasMentioned: true, text: "hold the slot" }));
    await vi.waitFor(() => expect(h.app.runtime.counts().running).toBe(1));
    await h.app.router.accept(inbound({ senderId: OWNER, text: "what is 2+2?" }));
    await vi.waitFor(() => expect(h.app.runtime.counts().queued).toBe(1));
    const before = h.app.sessions.require("agent:main:main");
    await h.app.router.accept(inbound({ senderId: OWNER, text: "/new" }));
    await vi.waitFor(() => expect(telegram.textsTo("1001")).toEqual([expect.stringMatching(/^⚙️ New session started/)]));
    release();
    await vi.waitFor(() => expect(telegram.textsTo("1001")).toHaveLength(2));
    await h.app.router.idle();
    // The model was asked the question (not a conversation without any user message)…
    expect(telegram.textsTo("1001")[1]).toBe("echo: what is 2+2?");
    // …which stays with its answer in the old transcript; the new session holds nothing of it.
    const old = await h.app.transcripts.readMessages(h.app.sessions.transcriptPath(before));
    expect(old.map((m) => m.role)).toEqual(["user", "assistant"]);
    const fresh = h.app.sessions.require("agent:main:main");
    expect(fresh.sessionId).not.toBe(before.sessionId);
    expect(await h.app.transcripts.readMessages(h.app.sessions.transcriptPath(fresh))).toEqual([]);
  });

  it("interfaces §5 /new while a message waits behind the session's running turn: that message is recorded and answered in the session it was said in, and the fresh session starts empty", async () => {
    const { h, telegram, release } = await secondQuestionWaiting();
    const before = h.app.sessions.require("agent:main:main");
    await h.app.router.accept(inbound({ senderId: OWNER, text: "/new" }));
    await vi.waitFor(() => expect(telegram.textsTo("1001")).toEqual([expect.stringMatching(/^⚙️ New session started/)]));
    release();
    await h.app.router.idle();
    await vi.waitFor(() => expect(telegram.textsTo("1001")).toHaveLength(3));
    expect(telegram.textsTo("1001").slice(1)).toEqual(["echo: first question", "echo: second question"]);
    const old = await h.app.transcripts.readMessages(h.app.sessions.transcriptPath(before));
    expect(old.map((m) => (m.role === "user" ? m.content : m.role))).toEqual(["first question", "assistant", "second question", "assistant"]);
    const fresh = h.app.sessions.require("agent:main:main");
    expect(fresh.sessionId).not.toBe(before.sessionId);
    expect(await h.app.transcripts.readMessages(h.app.sessions.transcriptPath(fresh))).toEqual([]);
  });

  it("/stop aborts the running turn of the session; the chat is told once (the /stop answer), not again by the aborted run", async () => {
    const { h, telegram } = await boot();
    h.model.setResponder(() => ({ content: "slow", delayMs: 5_000 }));
    await h.app.router.accept(inbound({ text: "take your time" }));
    await vi.waitFor(() => expect(h.app.runtime.counts().running).toBe(1));
    await h.app.router.accept(inbound({ senderId: OWNER, text: "/stop" }));
    await vi.waitFor(() => expect(telegram.textsTo("1001")).toContain("⚙️ Stopped 1 run(s)."));
    await vi.waitFor(() => expect(h.app.runtime.counts().running).toBe(0));
    // Processed (any notice enqueued) and delivered (nothing pending) before looking.
    await h.app.router.idle();
    await vi.waitFor(() => expect(h.app.outbox.pending).toBe(0));
    expect(telegram.textsTo("1001")).toEqual(["⚙️ Stopped 1 run(s)."]);
    expect(h.app.sessions.get("agent:main:main")?.abortedLastRun).toBe(true);
  });

  it("a run cut short by anything but /stop (its session deleted: sessions.delete) still tells the chat it was aborted: only /stop's own answer stands in for the notice", async () => {
    const { h, telegram } = await boot();
    const release = answerWhenReleased(h);
    const group = { chatType: "group" as const, peerId: "-100510", to: "-100510", wasMentioned: true };
    await h.app.router.accept(inbound({ ...group, text: "a long question" }));
    await vi.waitFor(() => expect(h.app.runtime.counts().running).toBe(1));
    const admin = await h.client();
    await admin.request("sessions.delete", { key: "agent:main:telegram:group:-100510" });
    await h.app.router.idle();
    release();
    await vi.waitFor(() => expect(telegram.textsTo("-100510")).toEqual(["⚠️ run aborted: session deleted"]));
  });

  it("a message waiting behind its session's running turn when the session is deleted (sessions.delete) starts the chat's new session", async () => {
    let release!: () => void;
    const held = new Promise<void>((r) => (release = r));
    const { h, telegram } = await boot();
    h.model.setResponder(async (req, i) => {
      if (JSON.stringify(req.messages).includes("first question")) await held;
      return echoLastUser(req, i);
    });
    const group = { chatType: "group" as const, peerId: "-100500", to: "-100500", wasMentioned: true };
    const key = "agent:main:telegram:group:-100500";
    await h.app.router.accept(inbound({ ...group, text: "first question" }));
    await vi.waitFor(() => expect(h.app.runtime.counts().running).toBe(1));
    await h.app.router.accept(inbound({ ...group, text: "second question" }));
    const admin = await h.client();
    await admin.request("sessions.delete", { key });
    release();
    await h.app.router.idle();
    await vi.waitFor(() => expect(telegram.textsTo("-100500")).toContain("echo: second question"));
    const reborn = await h.app.transcripts.readMessages(h.app.sessions.transcriptPath(h.app.sessions.require(key)));
    expect(reborn.map((m) => (m.role === "user" ? m.content : m.role))).toEqual(["second question", "assistant"]);
  });

  it("a group message recorded while another run of its session waits on a tool lands between the call and its result in the transcript; later runs still get each call followed by its result (providers refuse anything else)", async () => {
    let release!: () => void;
    const held = new Promise<void>((r) => (release = r));
    let entered!: () => void;
    const inTool = new Promise<void>((r) => (entered = r));
    const slowTool: AgentTool = {
      name: "wait_for_it",
      description: "Takes a while.",
      parameters: { type: "object", properties: {} },
      async execute() {
        entered();
        await held;
        return { found: "it" };
      },
    };
    const telegram = new RecordingAdapter("telegram");
    h = await startHarness({
      adapters: [telegram],
      plugins: [(d) => d.app.addTools([slowTool])],
      config: { channels: { telegram: { enabled: false, requireMention: true } } },
      responder: (req, i) => {
        const last = req.messages.at(-1);
        if (last?.role === "tool") return { content: "found it" };
        if (last?.content === "look it up") return { toolCalls: [{ name: "wait_for_it", arguments: {} }] };
        return echoLastUser(req, i);
      },
    });
    const group = { chatType: "group" as const, peerId: "-100600", to: "-100600" };
    const key = "agent:main:telegram:group:-100600";
    await h.app.router.accept(inbound({ ...group, wasMentioned: true, text: "hello" }));
    await h.app.router.idle();
    // An operator's run in the group's session (not the chat's own lane) waits on its tool…
    const admin = await h.client();
    const operatorRun = admin.request("agent", { sessionKey: key, message: "look it up", idempotencyKey: "op-1" }, { expectFinal: true });
    await inTool;
    // …while the group chats on.
    await h.app.router.accept(inbound({ ...group, wasMentioned: false, text: "chatter meanwhile" }));
    await h.app.router.idle();
    release();
    await operatorRun;
    await h.app.router.accept(inbound({ ...group, wasMentioned: true, text: "and now?" }));
    await vi.waitFor(() => expect(telegram.textsTo("-100600")).toContain("echo: and now?"));
    const asked = h.model.requests.at(-1)!.messages;
    asked.forEach((m: { role: string; tool_calls?: Array<{ id: string }> }, i: number) => {
      if (m.role !== "assistant" || !m.tool_calls?.length) return;
      const next = asked.slice(i + 1, i + 1 + m.tool_calls.length);
      expect(next.map((n: { role: string; tool_call_id?: string }) => [n.role, n.tool_call_id])).toEqual(m.tool_calls.map((c) => ["tool", c.id]));
    });
    expect(asked.map((m: { content: unknown }) => m.content)).toContain("chatter meanwhile");
    expect(asked.at(-1)).toEqual({ role: "user", content: "and now?" });
  });

  it("interfaces §5 /stop also stops the messages waiting behind the run it aborts: they stay recorded, none of them is run or answered after the /stop", async () => {
    const { h, telegram, release } = await secondQuestionWaiting();
    await h.app.router.accept(inbound({ senderId: OWNER, text: "/stop" }));
    await vi.waitFor(() => expect(telegram.textsTo("1001")).toEqual(["⚙️ Stopped 1 run(s)."]));
    release();
    await h.app.router.idle();
    await vi.waitFor(() => expect(h.app.outbox.pending).toBe(0));
    expect(telegram.textsTo("1001")).toEqual(["⚙️ Stopped 1 run(s)."]);
    expect(h.model.requests).toHaveLength(1);
    const said = await h.app.transcripts.readMessages(h.app.sessions.transcriptPath(h.app.sessions.require("agent:main:main")));
    expect(said.flatMap((m) => (m.role === "user" ? [m.content] : []))).toEqual(["first question", "second question"]);
    // A message after the /stop is answered as ever.
    await h.app.router.accept(inbound({ senderId: OWNER, text: "third question" }));
    await vi.waitFor(() => expect(telegram.textsTo("1001")).toEqual(["⚙️ Stopped 1 run(s).", "echo: third question"]));
  });

  it("interfaces §5 a native /stop (a slash command) also stops the message waiting behind the run, up to the last one accepted before it", async () => {
    const { h, telegram, release } = await secondQuestionWaiting();
    const origin = { channel: "telegram", accountId: "default", chatType: "direct", peerId: OWNER, to: OWNER, senderId: OWNER, messageId: "native-stop", timestamp: Date.now() } as const;
    expect(await h.app.router.nativeCommand({ origin, text: "/stop" })).toBe("⚙️ Stopped 1 run(s).");
    release();
    await h.app.router.idle();
    await vi.waitFor(() => expect(h.app.outbox.pending).toBe(0));
    // The second question, the last message accepted before the /stop, is not run either.
    expect(h.model.requests).toHaveLength(1);
    expect(telegram.textsTo("1001")).toEqual([]);
    // A message after the /stop is answered as ever.
    await h.app.router.accept(inbound({ senderId: OWNER, text: "third question" }));
    await vi.waitFor(() => expect(telegram.textsTo("1001")).toEqual(["echo: third question"]));
  });

  it("a duplicate platform message (same id) is processed once", async () => {
    const { h, telegram } = await boot();
    const msg = inbound({ text: "once" });
    await h.app.router.accept(msg);
    await h.app.router.accept({ ...msg });
    await h.app.router.idle();
    await vi.waitFor(() => expect(telegram.textsTo("1001")).toEqual(["echo: once"]));
    expect(h.model.requests).toHaveLength(1);
  });

  // Found by the inbound fuzz test under another seed: a timestamp past what a Date can hold was
  // accepted, then its transcript line threw (toISOString), so the message stayed pending for good —
  // never answered, deduplicated while the process lived, failing again after every restart.
  it.each([
    { timestamp: -1, accepted: false },
    { timestamp: 8.64e15 + 1, accepted: false },
    { timestamp: Number.MAX_SAFE_INTEGER, accepted: false },
    { timestamp: 1.7976931348623157e308, accepted: false },
    { timestamp: 0, accepted: true },
    { timestamp: 8.64e15, accepted: true },
    { timestamp: 1_700_000_000_000, accepted: true },
  ])("bad input: a platform timestamp of $timestamp ms is accepted: $accepted — an accepted one is answered and its inbound record done, a rejected one names the field", async ({ timestamp, accepted }) => {
    const { h, telegram } = await boot();
    const msg = inbound({ text: "when?", timestamp });
    const out = await h.app.router.accept(msg);
    if (!accepted) {
      expect(out).toEqual({ status: "rejected", error: expect.stringMatching(/^invalid inbound message: timestamp: /) });
      return;
    }
    expect(out).toEqual({ status: "accepted" });
    await h.app.router.idle();
    expect(telegram.textsTo("1001")).toEqual(["echo: when?"]);
    expect(await h.app.kv.space<{ state: string }>("inbound").get(`telegram:default:${msg.messageId}`)).toMatchObject({ state: "done" });
  });

  it("an I/O failure while processing (the transcripts' directory unusable) is retried in the lane: once it clears, the message is answered once, recorded once and done — not left for the next start", async () => {
    const { h, telegram } = await boot();
    const dir = blockTranscripts(h.stateDir);
    const msg = inbound({ text: "are you there?" });
    expect(await h.app.router.accept(msg)).toEqual({ status: "accepted" });
    await vi.waitFor(() => expect(h.app.router.counts).toEqual({ pending: 1, retrying: 1, failed: 0, givenUp: 0 }), { timeout: 5000 });
    expect(h.model.requests).toHaveLength(0);
    rmSync(dir);
    await vi.waitFor(() => expect(telegram.textsTo("1001")).toEqual(["echo: are you there?"]), { timeout: 5000 });
    await h.app.router.idle();
    expect(h.app.router.counts).toEqual({ pending: 0, retrying: 0, failed: 0, givenUp: 0 });
    expect(h.model.requests).toHaveLength(1);
    expect(await h.app.kv.space<{ state: string }>("inbound").get(`telegram:default:${msg.messageId}`)).toMatchObject({ state: "done" });
    const said = (await h.app.transcripts.readMessages(h.app.sessions.transcriptPath(h.app.sessions.get("agent:main:main")!))).map((m) => m.role);
    expect(said).toEqual(["user", "assistant"]);
  });

  it("a store failure on the reply's outbox write is retried: once the store writes again, the run's answer is sent once, with no second model call", async () => {
    const { h, telegram } = await boot();
    const db = await openStoreDb(h.stateDir);
    try {
      await db.exec("CREATE TRIGGER test_refuse_reply BEFORE INSERT ON keyv WHEN NEW.key LIKE 'outbox:reply:%' BEGIN SELECT RAISE(ABORT, 'refused by the test'); END");
      await h.app.router.accept(inbound({ text: "answer me" }));
      await vi.waitFor(() => expect(h.app.router.counts.retrying).toBe(1), { timeout: 5000 });
      expect(h.model.requests).toHaveLength(1);
      expect(telegram.sent).toHaveLength(0);
      await db.exec("DROP TRIGGER test_refuse_reply");
      await vi.waitFor(() => expect(telegram.textsTo("1001")).toEqual(["echo: answer me"]), { timeout: 5000 });
      await h.app.router.idle();
      expect(h.model.requests).toHaveLength(1);
      expect(h.app.router.counts).toEqual({ pending: 0, retrying: 0, failed: 0, givenUp: 0 });
    } finally {
      await db.close();
    }
  });

  it("a message waiting for an I/O retry when the daemon stops stays pending, to be resumed at the next start (stop is not held up by the wait)", async () => {
    const { h: daemon } = await boot();
    blockTranscripts(daemon.stateDir);
    const msg = inbound({ text: "later" });
    await daemon.app.router.accept(msg);
    await vi.waitFor(() => expect(daemon.app.router.counts.retrying).toBe(1), { timeout: 5000 });
    h = undefined;
    await daemon.stop({ keepState: true });
    expect(daemon.app.router.counts).toEqual({ pending: 1, retrying: 0, failed: 1, givenUp: 0 });
    try {
      expect(await withInboundStore(daemon.stateDir, (space) => space.get(`telegram:default:${msg.messageId}`))).toMatchObject({ state: "pending" });
    } finally {
      rmSync(daemon.stateDir, { recursive: true, force: true });
    }
  });

  it("a message resumed unfinished more than MAX_RESUMES times is given up: a notice where it would have been answered, the message kept in its done record; fewer resumes are processed as usual", async () => {
    const cases = [
      { name: "never resumed", msg: inbound({ text: "first try", peerId: "11", to: "11" }), resumes: undefined, chat: ["echo: first try"], givenUp: false },
      { name: "at the last allowed resume", msg: inbound({ text: "last chance", peerId: "12", to: "12" }), resumes: MAX_RESUMES - 1, chat: ["echo: last chance"], givenUp: false },
      { name: "one resume too many", msg: inbound({ text: "poison", peerId: "13", to: "13" }), resumes: MAX_RESUMES, chat: [GIVEN_UP_NOTICE], givenUp: true },
      { name: "an owner's command", msg: inbound({ text: "/sid", peerId: "14", to: "14", senderId: OWNER }), resumes: MAX_RESUMES, chat: [GIVEN_UP_NOTICE], givenUp: true },
      { name: "a non-owner's command (never answered)", msg: inbound({ text: "/send off", peerId: "15", to: "15", senderId: STRANGER }), resumes: MAX_RESUMES, chat: [], givenUp: true },
      { name: "an unmentioned group message (never answered)", msg: inbound({ text: "chatter", chatType: "group", peerId: "-1016", to: "-1016", wasMentioned: false }), resumes: MAX_RESUMES, chat: [], givenUp: true },
    ];
    const stateDir = await stateDirWithPending(cases);
    const { h, telegram } = await boot({}, stateDir);
    await vi.waitFor(() => expect(h.app.router.counts.pending).toBe(0), { timeout: 5000 });
    await h.app.router.idle();
    await vi.waitFor(() => expect(telegram.sent).toHaveLength(cases.reduce((n, c) => n + c.chat.length, 0)));
    for (const c of cases) expect(telegram.textsTo(c.msg.to), c.name).toEqual(c.chat);
    expect(h.model.requests).toHaveLength(2);
    expect(h.app.router.counts).toEqual({ pending: 0, retrying: 0, failed: 0, givenUp: 4 });
    const space = h.app.kv.space<StoredInbound>("inbound");
    for (const c of cases) {
      const stored = await space.get(`telegram:default:${c.msg.messageId}`);
      expect(stored?.state, c.name).toBe("done");
      expect(stored?.givenUp, c.name).toEqual(c.givenUp ? { msg: c.msg, resumes: MAX_RESUMES + 1 } : undefined);
    }
    // Given up means finished: the platform delivering it again is a duplicate.
    expect(await h.app.router.accept(cases[2].msg)).toEqual({ status: "duplicate" });
  });

  it("the resume count is stored before the resumed attempt ends: a process that dies during it (a message that crashes it) is counted too", async () => {
    const msg = inbound({ text: "slow to answer" });
    const stateDir = await stateDirWithPending([{ msg, resumes: 2 }]);
    const telegram = new RecordingAdapter("telegram");
    h = await startHarness({ adapters: [telegram], stateDir, responder: () => ({ content: "at last", delayMs: 1500 }) });
    await vi.waitFor(() => expect(h?.model.requests).toHaveLength(1));
    expect(await h.app.kv.space<StoredInbound>("inbound").get(`telegram:default:${msg.messageId}`)).toMatchObject({ state: "pending", resumes: 3 });
    expect(telegram.sent).toHaveLength(0);
    await vi.waitFor(() => expect(telegram.textsTo("1001")).toEqual(["at last"]), { timeout: 5000 });
  });

  it("resumes are counted durably before each attempt, with the last failure: a message failing at every start is given up once the count passes MAX_RESUMES, its error kept", async () => {
    const msg = inbound({ text: "fails every time" });
    const id = `telegram:default:${msg.messageId}`;
    const stateDir = await stateDirWithPending([{ msg, resumes: MAX_RESUMES - 1 }]);
    // This start's attempt fails on the transcripts' directory; the stop ends its retries.
    blockTranscripts(stateDir);
    const first = await boot({}, stateDir);
    await vi.waitFor(() => expect(first.h.app.router.counts.retrying).toBe(1), { timeout: 5000 });
    h = undefined;
    await first.h.stop({ keepState: true });
    const left = await withInboundStore(stateDir, (space) => space.get(id) as Promise<StoredInbound | undefined>);
    expect(left).toMatchObject({ state: "pending", resumes: MAX_RESUMES, lastError: expect.stringContaining(path.join("agents", "main", "sessions")) });

    const { h: next, telegram } = await boot({}, stateDir);
    await next.app.router.idle();
    await vi.waitFor(() => expect(telegram.textsTo("1001")).toEqual([GIVEN_UP_NOTICE]));
    expect(next.model.requests).toHaveLength(0);
    expect(await next.app.kv.space<StoredInbound>("inbound").get(id)).toMatchObject({ state: "done", givenUp: { msg, resumes: MAX_RESUMES + 1, lastError: expect.stringContaining(path.join("agents", "main", "sessions")) } });
  });

  it("a model failure answers the chat with a clear notice instead of silence", async () => {
    const { h, telegram } = await boot();
    h.model.setResponder(() => ({ status: 500, error: "upstream exploded" }));
    await h.app.router.accept(inbound({ text: "hi" }));
    await vi.waitFor(() => expect(telegram.textsTo("1001")[0]).toMatch(/^⚠️ model call failed .*HTTP 500/), { timeout: 10_000 });
  });

  it("a model that returns no text because it was cut off (finish_reason length, content_filter) answers the chat with a notice instead of silence; the next message works", async () => {
    const { h, telegram } = await boot();
    h.model.setResponder(() => ({ content: "", finishReason: "length" }));
    await h.app.router.accept(inbound({ text: "think hard" }));
    await vi.waitFor(() => expect(telegram.textsTo("1001")).toEqual(['⚠️ model fake/m returned no answer (finish_reason "length": the model reached its output limit before answering)']));
    h.model.setResponder(() => ({ content: null, finishReason: "content_filter" }));
    await h.app.router.accept(inbound({ text: "again" }));
    await vi.waitFor(() => expect(telegram.textsTo("1001")).toHaveLength(2));
    expect(telegram.textsTo("1001")[1]).toBe('⚠️ model fake/m returned no answer (finish_reason "content_filter": the provider\'s content filter withheld the answer)');
    h.model.setResponder(echoLastUser);
    await h.app.router.accept(inbound({ text: "hello" }));
    await vi.waitFor(() => expect(telegram.textsTo("1001")).toHaveLength(3));
    expect(telegram.textsTo("1001")[2]).toBe("echo: hello");
  });

  it("an empty reply the model chose to end with (finish_reason stop) stays silent, as NO_REPLY does", async () => {
    const { h, telegram } = await boot();
    h.model.setResponder((req, i) => (i === 0 ? { content: "" } : echoLastUser(req, i)));
    await h.app.router.accept(inbound({ text: "nothing to say" }));
    await h.app.router.accept(inbound({ text: "now speak" }));
    await vi.waitFor(() => expect(telegram.textsTo("1001")).toEqual(["echo: now speak"]));
  });

  it("a message finished before a restart is still a duplicate when the platform delivers it again (done ids are kept a day); one finished longer ago is deleted at start and processed again", async () => {
    const recent = inbound({ text: "answered an hour ago" });
    const expired = inbound({ text: "answered two days ago" });
    const stateDir = await stateDirWithPending([]);
    await withInboundStore(stateDir, async (space) => {
      await space.set(inboundId(recent), { id: inboundId(recent), state: "done", receivedAt: Date.now() - 3600_000 });
      await space.set(inboundId(expired), { id: inboundId(expired), state: "done", receivedAt: Date.now() - 2 * DAY_MS });
    });
    const { h, telegram } = await boot({}, stateDir);
    expect(await h.app.kv.space("inbound").get(inboundId(expired))).toBeUndefined();
    expect(await h.app.router.accept(recent)).toEqual({ status: "duplicate" });
    expect(await h.app.router.accept(expired)).toEqual({ status: "accepted" });
    await h.app.router.idle();
    await vi.waitFor(() => expect(telegram.textsTo("1001")).toEqual(["echo: answered two days ago"]));
    expect(h.model.requests).toHaveLength(1);
  });

  it("prune deletes only done records past the dedupe window: a message still being processed is kept however old, a fresh done one is kept", async () => {
    const { h, telegram } = await boot();
    const done = inbound({ text: "done already" });
    await h.app.router.accept(done);
    await h.app.router.idle();
    h.model.setResponder(() => ({ content: "slow answer", delayMs: 1500 }));
    const busy = inbound({ text: "still thinking" });
    await h.app.router.accept(busy);
    await vi.waitFor(() => expect(h.model.requests).toHaveLength(2));
    const space = h.app.kv.space<StoredInbound>("inbound");
    expect(await h.app.router.prune(Date.now())).toBe(0);
    expect(await h.app.router.prune(Date.now() + 2 * DAY_MS)).toBe(1);
    expect(await space.get(inboundId(done))).toBeUndefined();
    expect(await space.get(inboundId(busy))).toMatchObject({ state: "pending" });
    await vi.waitFor(() => expect(telegram.textsTo("1001")).toEqual(["echo: done already", "slow answer"]), { timeout: 5000 });
  });

  it("a message whose accept write failed is neither processed nor remembered: the platform's redelivery is processed, and answered once", async () => {
    const { h, telegram } = await boot();
    const msg = inbound({ text: "deliver me" });
    await whileInboundRefused(h, async () => {
      await expect(h.app.router.accept(msg)).rejects.toThrow(/refused by the test/);
      await h.app.router.idle();
      expect(h.model.requests).toHaveLength(0);
    });
    await expectAnsweredOnce(h, telegram, msg);
  });

  it("a redelivery racing its first delivery, whose accept write then fails, is not told the message is known: it fails too, and a later redelivery is processed and answered once", async () => {
    const { h, telegram } = await boot();
    const msg = inbound({ text: "deliver me" });
    await whileInboundRefused(h, async () => {
      const [first, again] = await Promise.allSettled([h.app.router.accept(msg), h.app.router.accept({ ...msg })]);
      expect(first).toMatchObject({ status: "rejected", reason: expect.objectContaining({ message: expect.stringMatching(/refused by the test/) }) });
      // Resolving would tell the adapter the message is durably accepted (AdapterContext.onInbound): nothing is.
      expect(again.status).toBe("rejected");
      await h.app.router.idle();
    });
    await expectAnsweredOnce(h, telegram, msg);
  });

  it("a failed write of the session entry leaves the message pending and retried, not done; once the store writes again it is done and the entry stored", async () => {
    const { h } = await boot();
    const db = await openStoreDb(h.stateDir);
    // Unmentioned, so nothing but the entry is written to the sessions space on its way to done.
    const msg = inbound({ chatType: "group", peerId: "-100900", to: "-100900", groupName: "Quiet room", wasMentioned: false, text: "just chatting" });
    const space = h.app.kv.space<StoredInbound>("inbound");
    try {
      await db.exec("CREATE TRIGGER test_refuse_entry BEFORE INSERT ON keyv WHEN NEW.key LIKE 'sessions:%' BEGIN SELECT RAISE(ABORT, 'refused by the test'); END");
      await h.app.router.accept(msg);
      await vi.waitFor(() => expect(h.app.router.counts.retrying).toBe(1), { timeout: 5000 });
      expect(await space.get(inboundId(msg))).toMatchObject({ state: "pending" });
      await db.exec("DROP TRIGGER test_refuse_entry");
    } finally {
      await db.close();
    }
    await vi.waitFor(() => expect(h.app.router.counts).toEqual({ pending: 0, retrying: 0, failed: 0, givenUp: 0 }), { timeout: 5000 });
    expect(await space.get(inboundId(msg))).toMatchObject({ state: "done" });
    expect(await h.app.kv.space("sessions").get("agent:main:telegram:group:-100900")).toMatchObject({ displayName: "Quiet room" });
  });

  it("messages accepted in one batch are resumed after a restart in the order they came, even within one millisecond", async () => {
    const { h: first } = await boot();
    const blocked = blockTranscripts(first.stateDir);
    const batch = Array.from({ length: 12 }, (_, i) => inbound({ text: `part ${i + 1}`, messageId: `batch-${i + 1}` }));
    // One clock reading for the whole batch, as for an adapter handing over a burst of updates.
    const now = vi.spyOn(Date, "now").mockReturnValue(Date.now());
    const accepted = Promise.all(batch.map((m) => first.app.router.accept(m)));
    now.mockRestore();
    await accepted;
    await vi.waitFor(() => expect(first.app.router.counts.retrying).toBe(1), { timeout: 5000 });
    h = undefined;
    await first.stop({ keepState: true });
    rmSync(blocked);

    const { h: next } = await boot({}, first.stateDir);
    await vi.waitFor(() => expect(next.app.router.counts.pending).toBe(0), { timeout: 10_000 });
    await next.app.router.idle();
    const said = await next.app.transcripts.readMessages(next.app.sessions.transcriptPath(next.app.sessions.require("agent:main:main")));
    expect(said.flatMap((m) => (m.role === "user" ? [m.content] : []))).toEqual(batch.map((m) => m.text));
  });

  it("/new <text> starts a fresh session and runs <text> as its first message, from a chat message and from a native command", async () => {
    const { h, telegram } = await boot();
    await h.app.router.accept(inbound({ senderId: OWNER, text: "/new tell me a joke" }));
    await vi.waitFor(() => expect(telegram.textsTo("1001")).toEqual([expect.stringMatching(/^⚙️ New session started/), "echo: tell me a joke"]));
    const origin = { channel: "telegram", accountId: "default", chatType: "direct", peerId: OWNER, to: OWNER, senderId: OWNER, messageId: "native-new", timestamp: Date.now() } as const;
    expect(await h.app.router.nativeCommand({ origin, text: "/new and another" })).toMatch(/^⚙️ New session started/);
    await vi.waitFor(() => expect(telegram.textsTo("1001")).toContain("echo: and another"));
    expect(h.model.requests).toHaveLength(2);
    const said = await h.app.transcripts.readMessages(h.app.sessions.transcriptPath(h.app.sessions.require("agent:main:main")));
    expect(said.flatMap((m) => (m.role === "user" ? [m.content] : []))).toEqual(["and another"]);
  });

  it("/new <text> from the owner in a group that requires a mention runs <text>: the command addressed the bot, so its text is not gated", async () => {
    const { h, telegram } = await boot();
    await h.app.router.accept(inbound({ senderId: OWNER, chatType: "group", peerId: "-100400", to: "-100400", wasMentioned: false, text: "/new tell me a joke" }));
    await vi.waitFor(() => expect(telegram.textsTo("-100400")).toEqual([expect.stringMatching(/^⚙️ New session started/), "echo: tell me a joke"]));
  });

  it("R28 an owner's native /send in a chat never seen before records that chat on its session (route, chat type), as a message would", async () => {
    const { h } = await boot({ commands: { owners: [`discord:${OWNER}`] } });
    const origin = { channel: "discord", accountId: "default", chatType: "channel", peerId: "556", to: "556", senderId: OWNER, messageId: "native-send", timestamp: Date.now() } as const;
    expect(await h.app.router.nativeCommand({ origin, text: "/send off" })).toBe("⚙️ Send policy set to off.");
    expect(h.app.sessions.get("agent:main:discord:channel:556")).toMatchObject({ sendPolicy: "deny", chatType: "channel", lastChannel: "discord", lastTo: "556", deliveryContext: { channel: "discord", to: "556" } });
  });

  it("a non-owner's /new, /reset, /stop, /status, /sid and /help are ignored like /send (no reset, no answer, never a prompt); as native commands they are refused", async () => {
    const { h, telegram } = await boot();
    await h.app.router.accept(inbound({ text: "hello" }));
    await vi.waitFor(() => expect(telegram.sent).toHaveLength(1));
    const sessionId = h.app.sessions.require("agent:main:main").sessionId;
    for (const text of ["/new", "/reset start over", "/stop", "/status", "/sid", "/help"]) await h.app.router.accept(inbound({ senderId: STRANGER, text }));
    await h.app.router.idle();
    await vi.waitFor(() => expect(h.app.outbox.pending).toBe(0));
    expect(telegram.textsTo("1001")).toEqual(["echo: hello"]);
    expect(h.model.requests).toHaveLength(1);
    const origin = { channel: "telegram", accountId: "default", chatType: "direct", peerId: STRANGER, to: STRANGER, senderId: STRANGER, timestamp: Date.now() } as const;
    for (const text of ["/new", "/stop", "/status"]) expect(await h.app.router.nativeCommand({ origin: { ...origin, messageId: `native ${text}` }, text }), text).toMatch(/Not allowed/);
    expect(h.app.sessions.require("agent:main:main").sessionId).toBe(sessionId);
  });

  it("R28 a channel's own owners list (channels.telegram.owners) lets that owner use /send; a sender not listed does not (another channel's id there is a config error)", async () => {
    const { h, telegram } = await boot({ channels: { telegram: { enabled: false, requireMention: true, owners: ["telegram:3003"] } } });
    await h.app.router.accept(inbound({ chatType: "group", peerId: "-100601", to: "-100601", wasMentioned: true, senderId: "4004", text: "/send off" }));
    await h.app.router.accept(inbound({ chatType: "group", peerId: "-100602", to: "-100602", wasMentioned: true, senderId: "3003", text: "/send off" }));
    await vi.waitFor(() => expect(telegram.textsTo("-100602")).toEqual(["⚙️ Send policy set to off."]));
    await h.app.router.idle();
    expect(h.app.sessions.get("agent:main:telegram:group:-100602")?.sendPolicy).toBe("deny");
    expect(h.app.sessions.get("agent:main:telegram:group:-100601")?.sendPolicy).toBeUndefined();
    expect(telegram.textsTo("-100601")).toEqual([]);
    expect(h.model.requests).toHaveLength(0);
  });

  it("mention gating covers channel chats (Discord) too, and a channel with no config section requires a mention (the schema's default)", async () => {
    const { h } = await boot({ channels: { telegram: { enabled: false, requireMention: true }, discord: { enabled: false, requireMention: true } } });
    const unmentioned = [
      inbound({ channel: "discord", chatType: "channel", peerId: "555", to: "555", wasMentioned: false, text: "channel chatter" }),
      inbound({ channel: "whatsapp", chatType: "group", peerId: "120363@g.us", to: "120363@g.us", wasMentioned: false, text: "group chatter" }),
    ];
    for (const m of unmentioned) await h.app.router.accept(m);
    await h.app.router.idle();
    expect(h.model.requests).toHaveLength(0);
    for (const m of unmentioned) {
      const entry = h.app.sessions.list().find((e) => e.lastTo === m.to)!;
      expect((await h.app.transcripts.readMessages(h.app.sessions.transcriptPath(entry))).map((x) => x.role === "user" && x.content), m.channel).toEqual([m.text]);
    }
    await h.app.router.accept(inbound({ channel: "discord", chatType: "channel", peerId: "555", to: "555", wasMentioned: true, text: "@bot hi" }));
    await h.app.router.idle();
    expect(h.model.requests).toHaveLength(1);
  });

  it("a message in a forum topic is answered in that topic, and its session keeps the thread as where to reply", async () => {
    const { h, telegram } = await boot();
    await h.app.router.accept(inbound({ chatType: "group", peerId: "-100500", to: "-100500", threadId: "42", wasMentioned: true, text: "in the topic" }));
    await vi.waitFor(() => expect(telegram.textsTo("-100500")).toEqual(["echo: in the topic"]));
    expect(telegram.sent[0].target).toMatchObject({ to: "-100500", threadId: "42" });
    expect(h.app.sessions.get("agent:main:telegram:group:-100500:topic:42")).toMatchObject({ lastTo: "-100500", lastThreadId: "42", deliveryContext: { channel: "telegram", to: "-100500", threadId: "42" } });
  });

  it("an operator's chat.send into a Telegram group's session leaves the group as its route; a session born in web chat takes web chat", async () => {
    const { h, telegram } = await boot();
    const group = "agent:main:telegram:group:-100800";
    await h.app.router.accept(inbound({ chatType: "group", peerId: "-100800", to: "-100800", wasMentioned: true, text: "hi all" }));
    await vi.waitFor(() => expect(telegram.textsTo("-100800")).toHaveLength(1));
    for (const [sessionKey, runId] of [[group, "op-1"], ["agent:main:main", "op-2"]]) {
      const sent = await h.app.router.chatSend({ sessionKey, agentId: "main", text: "operator here", runId });
      expect(sent.kind).toBe("run");
      if (sent.kind === "run") await sent.done;
    }
    expect(h.app.sessions.get(group)).toMatchObject({ lastChannel: "telegram", lastTo: "-100800", deliveryContext: { channel: "telegram", to: "-100800" } });
    expect(h.app.sessions.get("agent:main:main")).toMatchObject({ lastChannel: "webchat", chatType: "direct", deliveryContext: { channel: "webchat", to: "agent:main:main" } });
  });

  it("/status counts only its own session's runs", async () => {
    const { h, telegram } = await boot();
    h.model.setResponder(() => ({ content: "slow", delayMs: 3000 }));
    await h.app.router.accept(inbound({ chatType: "group", peerId: "-100700", to: "-100700", wasMentioned: true, text: "think hard" }));
    await vi.waitFor(() => expect(h.app.runtime.counts().running).toBe(1));
    await h.app.router.accept(inbound({ senderId: OWNER, text: "/status" }));
    await h.app.router.accept(inbound({ chatType: "group", peerId: "-100700", to: "-100700", wasMentioned: true, senderId: OWNER, text: "/status" }));
    await vi.waitFor(() => expect(telegram.textsTo("1001")).toHaveLength(1));
    await vi.waitFor(() => expect(telegram.textsTo("-100700")).toHaveLength(1));
    expect(telegram.textsTo("1001")[0]).toContain("runs: 0 running, 0 queued");
    expect(telegram.textsTo("-100700")[0]).toContain("runs: 1 running, 0 queued");
  });
});

describe("several agents", () => {
  it("an agent whose configured id has upper case (agents.list id \"Ops\") keeps its own model, systemPrompt and name for the chats bound to it", async () => {
    // A second model server, so that which model a run used is visible as where its request went.
    const big = new FakeModelServer(() => ({ content: "from big" }));
    const bigUrl = await big.start();
    try {
      const { h, telegram } = await boot({
        models: { providers: { big: { baseUrl: bigUrl, models: [{ id: "big" }] } } },
        agents: { list: [{ id: "main", default: true }, { id: "Ops", name: "Operations", model: "big/big", systemPrompt: "You are the ops desk." }] },
        bindings: [{ agentId: "Ops", match: { channel: "telegram", peer: { kind: "group", id: "-100300" } } }],
      });
      await h.app.router.accept(inbound({ chatType: "group", peerId: "-100300", to: "-100300", wasMentioned: true, text: "disk full?" }));
      await vi.waitFor(() => expect(telegram.textsTo("-100300")).toEqual(["from big"]));
      expect(h.model.requests).toHaveLength(0);
      expect(big.requests[0].model).toBe("big");
      expect(big.requests[0].messages[0]).toMatchObject({ role: "system", content: expect.stringContaining("You are the ops desk.") });
      expect(h.app.sessions.get("agent:ops:telegram:group:-100300")).toMatchObject({ agentId: "ops", lastModel: "big/big" });
      // The gateway finds the agent's sessions by its id as the config spells it, as `agent` and
      // sessions.resolve do.
      const client = await h.client();
      for (const agentId of ["ops", "Ops"]) {
        const { sessions } = (await client.request("sessions.list", { agentId })) as { sessions: Array<{ key: string }> };
        expect(sessions.map((s) => s.key), agentId).toEqual(["agent:ops:telegram:group:-100300"]);
      }
    } finally {
      await big.stop();
    }
  });
});

describe("no model configured", () => {
  it("a chat gets a clear 'no model configured — see README' reply", async () => {
    const telegram = new RecordingAdapter("telegram");
    h = await startHarness({ adapters: [telegram], noModel: true });
    await h.app.router.accept(inbound({ text: "hello?" }));
    await vi.waitFor(() => expect(telegram.textsTo("1001")[0]).toMatch(/No model configured — see README/));
  });
});

/**
 * The owner's "first question" holds the session's turn (its model call waits for `release`) and
 * "second question", said meanwhile, waits behind it.
 */
async function secondQuestionWaiting() {
  const { held, release } = latch();
  const { h, telegram } = await boot();
  h.model.setResponder(async (req, i) => {
    if (JSON.stringify(req.messages).includes("first question")) await held;
    return echoLastUser(req, i);
  });
  await h.app.router.accept(inbound({ senderId: OWNER, text: "first question" }));
  await vi.waitFor(() => expect(h.app.runtime.counts().running).toBe(1));
  await h.app.router.accept(inbound({ senderId: OWNER, text: "second question" }));
  return { h, telegram, release };
}

/** The model answers "late answer" only once the returned function is called. */
function answerWhenReleased(h: Harness): () => void {
  const { held, release } = latch();
  h.model.setResponder(async () => {
    await held;
    return { content: "late answer" };
  });
  return release;
}

/** A promise (`held`) that settles when `release` is called. */
function latch(): { held: Promise<void>; release: () => void } {
  let release!: () => void;
  const held = new Promise<void>((r) => (release = r));
  return { held, release };
}

/** Runs `during` while the store refuses every inbound record's write; then it writes again. */
async function whileInboundRefused(h: Harness, during: () => Promise<void>): Promise<void> {
  const db = await openStoreDb(h.stateDir);
  try {
    await db.exec("CREATE TRIGGER test_refuse_inbound BEFORE INSERT ON keyv WHEN NEW.key LIKE 'inbound:%' BEGIN SELECT RAISE(ABORT, 'refused by the test'); END");
    await during();
    await db.exec("DROP TRIGGER test_refuse_inbound");
  } finally {
    await db.close();
  }
}

/** `msg` delivered again is accepted, and answered once (one model call). */
async function expectAnsweredOnce(h: Harness, telegram: RecordingAdapter, msg: InboundMessage): Promise<void> {
  expect(await h.app.router.accept(msg)).toEqual({ status: "accepted" });
  await h.app.router.idle();
  await vi.waitFor(() => expect(telegram.textsTo("1001")).toEqual([`echo: ${msg.text}`]));
  expect(h.model.requests).toHaveLength(1);
}
