/**
 * A chat command sent through `chat.send` (operator.write) must not give a client the effect of a
 * method its scopes do not reach: `/send …` is `sessions.patch {sendPolicy}`, `/new` and `/reset`
 * are `sessions.reset` — operator.admin methods (interfaces §3). Real gateway, real SQLite.
 */
import { afterEach, describe, expect, it } from "vitest";
import { startHarness, type Harness } from "../helpers/harness.js";

let h: Harness | undefined;
afterEach(async () => {
  await h?.stop();
  h = undefined;
});

const WRITE_ONLY = ["operator.read", "operator.write"];

/** The main session, denied (so `/send on` has something to change), with a known sessionId. */
async function deniedMain(harness: Harness) {
  const key = harness.app.canonicalKey("main", "main");
  const entry = await harness.app.sessions.upsert(key, "main", { sendPolicy: "deny" });
  return { key, sessionId: entry.sessionId };
}

describe("interfaces §3 scopes: chat commands through chat.send", () => {
  it.each(["/send off", "/send on", "/send inherit", "/send", "/new", "/reset", "/new hello there", "/reset\nhello there"])(
    "interfaces §3 scopes: chat.send of %j from an operator.write client is FORBIDDEN with missingScope operator.admin, as sessions.patch/sessions.reset are, and changes nothing",
    async (message) => {
      h = await startHarness();
      const { key, sessionId } = await deniedMain(h);
      const writer = await h.client({ scopes: WRITE_ONLY });
      await expect(writer.request("chat.send", { sessionKey: "main", message, idempotencyKey: "cmd" })).rejects.toMatchObject({ code: "FORBIDDEN", details: { missingScope: "operator.admin" } });
      expect(h.app.sessions.get(key)).toMatchObject({ sendPolicy: "deny", sessionId });
      expect(h.model.requests).toHaveLength(0);
      // The same request from an admin is served (the refusal is the scope's, nothing else's)…
      const admin = await h.client({ scopes: ["operator.admin"] });
      expect(await admin.request("chat.send", { sessionKey: "main", message, idempotencyKey: "cmd" })).toMatchObject({ status: "ok", command: true });
      // …and a write client repeating the admin's idempotencyKey is still refused, not answered from the cache.
      await expect(writer.request("chat.send", { sessionKey: "main", message, idempotencyKey: "cmd" })).rejects.toMatchObject({ code: "FORBIDDEN" });
    },
  );

  it.each([
    ["/status", /send policy: deny/],
    ["/sid", /^key: agent:main:main/],
    ["/help", /^Commands:/],
    ["/stop", /^⚙️ Stopped 0 run\(s\)/],
  ])("interfaces §3 scopes: %s (reads the session, or stops its runs as operator.write may) is answered for an operator.write client", async (message, reply) => {
    h = await startHarness();
    const { key, sessionId } = await deniedMain(h);
    const writer = await h.client({ scopes: WRITE_ONLY });
    expect(await writer.request("chat.send", { sessionKey: "main", message, idempotencyKey: `k${message}` })).toMatchObject({ status: "ok", command: true, reply: expect.stringMatching(reply) });
    expect(h.app.sessions.get(key)).toMatchObject({ sendPolicy: "deny", sessionId });
  });

  it("interfaces §3 scopes: ordinary text from an operator.write client still starts a run (the control case)", async () => {
    h = await startHarness();
    const writer = await h.client({ scopes: WRITE_ONLY });
    expect(await writer.request("chat.send", { sessionKey: "main", message: "hello", idempotencyKey: "text" })).toMatchObject({ status: "started" });
    expect(await writer.request("agent.wait", { runId: "text", timeoutMs: 5000 })).toMatchObject({ status: "ok" });
  });
});
