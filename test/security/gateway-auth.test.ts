/**
 * The gateway's door: with a token configured, a connection without it — or with anything but
 * exactly it — is refused (an UNAUTHORIZED answer, then the socket closes), and nothing but
 * `connect` is served before a successful handshake.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startHarness, type Harness } from "../helpers/harness.js";
import { RawGateway, type ConnectAuth } from "../helpers/raw-gateway.js";

const TOKEN = "gw-secret-4f1c9a7e2b6d";
let h: Harness;
beforeAll(async () => {
  h = await startHarness({ config: { gateway: { auth: { token: TOKEN } } } });
});
afterAll(async () => {
  await h?.stop();
});

describe("gateway authentication", () => {
  const wrong: Array<[string, ConnectAuth]> = [
    ["no auth field at all", undefined],
    ["an auth object without a token", {}],
    ["an empty token", ""],
    ["a different token", "not-the-token-at-all!!"],
    ["the token minus its last character", TOKEN.slice(0, -1)],
    ["the token plus one character", `${TOKEN}x`],
    ["the token with a trailing space", `${TOKEN} `],
    ["the token in upper case", TOKEN.toUpperCase()],
    ["a same-length token differing in one character", `${TOKEN.slice(0, -1)}f`],
    ["the token's environment placeholder", "${SWITCHBOARD_GATEWAY_TOKEN}"],
  ];

  it.each(wrong)("security: a connect with %s is refused with UNAUTHORIZED and the socket is closed", async (_what, token) => {
    const gw = await RawGateway.open(h.url);
    const res = await gw.handshake(token);
    expect(res.ok).toBe(false);
    expect(res.error?.code).toBe("UNAUTHORIZED");
    await gw.until(() => gw.closed !== undefined, 5000);
    expect(gw.closed?.code).toBe(1008);
  });

  it("security: no method is served before the handshake, and a refused socket served nothing", async () => {
    const gw = await RawGateway.open(h.url);
    gw.send(JSON.stringify({ type: "req", id: "early", method: "sessions.list", params: {} }));
    const res = await gw.response("early", 5000);
    expect(res.ok).toBe(false);
    expect(res.error?.message).toMatch(/first frame must be a "connect" request/);
    await gw.until(() => gw.closed !== undefined, 5000);
    expect(gw.responses.filter((r) => r.ok)).toEqual([]);
  });

  it("security: requests sent right behind a refused connect, before its answer, are not served", async () => {
    const key = h.app.canonicalKey("main", "main");
    await h.app.sessions.upsert(key, "main");
    const modelCalls = h.model.requests.length;
    const gw = await RawGateway.open(h.url);
    gw.sendConnect("not-the-token-at-all!!");
    const behind = [
      { type: "req", id: "patch", method: "sessions.patch", params: { key, label: "pwned" } },
      { type: "req", id: "chat", method: "chat.send", params: { sessionKey: key, message: "pwned", idempotencyKey: "pwned-1" } },
      { type: "req", id: "list", method: "sessions.list", params: {} },
    ];
    for (const frame of behind) gw.send(JSON.stringify(frame));
    await gw.until(() => gw.closed !== undefined, 5000);
    expect(gw.responses.filter((r) => r.ok)).toEqual([]);
    await h.app.router.idle();
    expect(h.app.sessions.get(key)?.label).toBeUndefined();
    expect(h.model.requests.length).toBe(modelCalls);
  });

  it("security: token in the wrong place (params.token, client.id, query string) does not authenticate", async () => {
    const gw = await RawGateway.open(`${h.url}?token=${TOKEN}`);
    gw.send(JSON.stringify({ type: "req", id: "c", method: "connect", params: { minProtocol: 3, maxProtocol: 4, token: TOKEN, client: { id: TOKEN, version: "1", platform: "p", mode: "m" }, auth: { password: TOKEN } } }));
    const res = await gw.response("c", 5000);
    expect(res.ok).toBe(false);
    expect(res.error?.code).toBe("UNAUTHORIZED");
  });

  it("security: exactly the token is accepted (the control case)", async () => {
    const gw = await RawGateway.open(h.url);
    const res = await gw.handshake(TOKEN);
    expect(res.ok).toBe(true);
    gw.close();
  });
});

describe("gateway authentication: browsers", () => {
  it("security: with a token, a page of another origin (a reverse proxy's name) is let through to the token check", async () => {
    const refused = await RawGateway.open(h.url, { origin: "https://chat.example.com" });
    expect((await refused.handshake("wrong-token")).error?.code).toBe("UNAUTHORIZED");
    const gw = await RawGateway.open(h.url, { origin: "https://chat.example.com" });
    expect((await gw.handshake(TOKEN)).ok).toBe(true);
    gw.close();
  });
});

/**
 * Browsers let any web page open a WebSocket to 127.0.0.1; only the `Origin` header they always
 * send tells the gateway that a page of another site is asking. Without a token (the embedded
 * defaults on loopback) such a page would be a full operator: read every transcript, patch send
 * policies, make the bots speak (cross-site WebSocket hijacking).
 */
describe("gateway: browsers on other sites (no token, loopback)", () => {
  let open: Harness;
  beforeAll(async () => {
    open = await startHarness();
  });
  afterAll(async () => {
    await open?.stop();
  });
  const port = () => new URL(open.url).port;

  it.each([
    ["a page of another site", () => ({ origin: "https://evil.example" })],
    ["a page of another port on this host", () => ({ origin: "http://127.0.0.1:1" })],
    ["a page of a DNS-rebound name (its origin and Host header agree)", () => ({ origin: `http://rebind.evil.example:${port()}`, headers: { host: `rebind.evil.example:${port()}` } })],
    ["a page with an opaque origin (sandboxed iframe, file://)", () => ({ origin: "null" })],
  ])("security: a WebSocket from %s is refused at the upgrade (403), before any method is served", async (_what, options) => {
    await expect(RawGateway.open(open.url, options())).rejects.toThrow(/403/);
  });

  it.each([
    ["the web chat page served by the gateway itself (same origin)", () => ({ origin: `http://127.0.0.1:${port()}` })],
    ["the page opened as localhost", () => ({ origin: `http://localhost:${port()}`, headers: { host: `localhost:${port()}` } })],
    ["a non-browser client (no Origin header: the CLI, scripts)", () => ({})],
  ])("security: %s is served (the control case)", async (_what, options) => {
    const gw = await RawGateway.open(open.url, options());
    const res = await gw.handshake(undefined);
    expect(res.ok).toBe(true);
    gw.close();
  });
});

/**
 * A blank token (whitespace from an env file or a template) is no secret: a page of any site
 * could present it. It is no token, so browsers of other sites are refused as without one.
 */
describe("gateway: a blank configured token", () => {
  let blank: Harness;
  beforeAll(async () => {
    blank = await startHarness({ config: { gateway: { auth: { token: "  " } } } });
  });
  afterAll(async () => {
    await blank?.stop();
  });

  it("security: a page of another site is refused at the upgrade (403), not let in with the blank token", async () => {
    await expect(RawGateway.open(blank.url, { origin: "https://evil.example" })).rejects.toThrow(/403/);
  });
});
