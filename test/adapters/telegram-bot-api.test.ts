/**
 * The Bot API's per-message calls (adapters/telegram/bot-api.ts) bypass telegraf's callApi for
 * speed, so they must fail the way telegraf does — a TelegramError carrying the API's error
 * envelope, which errors.ts classifies — and never put the token in an error. The POST under
 * them (src/util/http-post.ts) bounds the response and the wait. Real HTTP on 127.0.0.1.
 */
import http from "node:http";
import type { AddressInfo } from "node:net";
import { TelegramError } from "telegraf";
import { afterEach, describe, expect, it } from "vitest";
import { createBotApi } from "../../adapters/telegram/bot-api.js";
import { classify, toPlatformError } from "../../adapters/telegram/errors.js";
import { postBody, reachedServer } from "../../src/util/http-post.js";

const TOKEN = "123456:SECRET-token_value";
/** "hang" never answers; `write` answers by hand (a body in pieces, a connection cut). */
type Reply = { status: number; body: string; headers?: http.OutgoingHttpHeaders } | "hang" | { write: (res: http.ServerResponse) => void };

const servers: http.Server[] = [];
const agents: http.Agent[] = [];
afterEach(async () => {
  for (const a of agents.splice(0)) a.destroy();
  for (const s of servers.splice(0)) {
    s.closeAllConnections();
    await new Promise((r) => s.close(r));
  }
});

/** A server answering each request with `reply(path, body)`; returns its root URL and what it saw. */
async function server(reply: (path: string, body: string) => Reply): Promise<{ root: string; seen: Array<{ path: string; body: string; headers: http.IncomingHttpHeaders }> }> {
  const seen: Array<{ path: string; body: string; headers: http.IncomingHttpHeaders }> = [];
  const s = http.createServer((req, res) => {
    let body = "";
    req.on("data", (c: Buffer) => (body += c.toString()));
    req.on("end", () => {
      seen.push({ path: req.url ?? "", body, headers: req.headers });
      const r = reply(req.url ?? "", body);
      if (r === "hang") return;
      if ("write" in r) return r.write(res);
      res.writeHead(r.status, { "content-type": "application/json", ...r.headers }).end(r.body);
    });
  });
  servers.push(s);
  await new Promise<void>((r) => s.listen(0, "127.0.0.1", r));
  return { root: `http://127.0.0.1:${(s.address() as AddressInfo).port}/`, seen };
}

function agent(): http.Agent {
  const a = new http.Agent({ keepAlive: true });
  agents.push(a);
  return a;
}

async function failure(p: Promise<unknown>): Promise<unknown> {
  return p.then(
    (v) => {
      throw new Error(`expected a failure, got ${JSON.stringify(v)}`);
    },
    (err: unknown) => err,
  );
}

describe("Bot API calls without telegraf's fetch stack", () => {
  it("S1 sendMessage posts the payload as JSON to /bot<token>/sendMessage and returns the result", async () => {
    const { root, seen } = await server(() => ({ status: 200, body: '{"ok":true,"result":{"message_id":7}}' }));
    const call = createBotApi(root, TOKEN);
    const result = await call<{ message_id: number }>("sendMessage", { chat_id: "42", text: "héllo 👋" }, { agent: agent() });
    expect(result).toEqual({ message_id: 7 });
    expect(seen[0].path).toBe(`/bot${TOKEN}/sendMessage`);
    expect(JSON.parse(seen[0].body)).toEqual({ chat_id: "42", text: "héllo 👋" });
    expect(seen[0].headers["content-type"]).toBe("application/json");
    expect(Number(seen[0].headers["content-length"])).toBe(Buffer.byteLength(seen[0].body));
  });

  it("S3 an API refusal is telegraf's TelegramError with the envelope: 429 keeps retry_after, 403 is forbidden", async () => {
    const { root } = await server((path) =>
      path.endsWith("/a")
        ? { status: 429, body: '{"ok":false,"error_code":429,"description":"Too Many Requests: retry after 3","parameters":{"retry_after":3}}' }
        : { status: 403, body: '{"ok":false,"error_code":403,"description":"Forbidden: bot was blocked by the user"}' },
    );
    const call = createBotApi(root, TOKEN);
    const limited = await failure(call("a", {}, { agent: agent() }));
    expect(limited).toBeInstanceOf(TelegramError);
    expect(classify(limited)).toEqual({ code: "rate_limited", retryAfterMs: 3000 });
    const blocked = await failure(call("b", {}, { agent: agent() }));
    expect((blocked as TelegramError).response).toEqual({ error_code: 403, description: "Forbidden: bot was blocked by the user" });
    expect(classify(blocked).code).toBe("forbidden");
  });

  it("R3 a proxy's 5xx page is an error by its status (transport, retryable), whatever the body", async () => {
    const { root } = await server(() => ({ status: 502, body: "<html>Bad Gateway</html>", headers: { "content-type": "text/html" } }));
    const err = await failure(createBotApi(root, TOKEN)("sendMessage", {}, { agent: agent() }));
    expect((err as TelegramError).response).toEqual({ error_code: 502, description: "Bad Gateway" });
    expect(classify(err).code).toBe("transport");
  });

  it("R3 a 500 is an error by its status even when a broken proxy's body claims success", async () => {
    const { root } = await server(() => ({ status: 500, body: '{"ok":true,"result":{"message_id":1}}' }));
    const err = await failure(createBotApi(root, TOKEN)("sendMessage", {}, { agent: agent() }));
    expect((err as TelegramError).response).toEqual({ error_code: 500, description: "Internal Server Error" });
    expect(classify(err).code).toBe("transport");
  });

  it("R3 a 2xx body that is not JSON fails with the method and an excerpt, not a parser's message", async () => {
    const { root } = await server(() => ({ status: 200, body: "<html>captive portal</html>", headers: { "content-type": "text/html" } }));
    const err = await failure(createBotApi(root, TOKEN)("sendMessage", {}, { agent: agent() }));
    expect(String(err)).toContain('sendMessage: HTTP 200 answered with a body that is not JSON: "<html>captive portal</html>"');
    expect(classify(err).code).toBe("transport");
  });

  it("R3 a proxy's 4xx page that is not JSON is a refusal by its status: a 413 is not retried, a 429 is a rate limit", async () => {
    const { root } = await server((path) => {
      const status = path.endsWith("/a") ? 413 : 429;
      return { status, body: `<html>${status}</html>`, headers: { "content-type": "text/html" } };
    });
    const call = createBotApi(root, TOKEN);
    const tooLarge = await failure(call("a", {}, { agent: agent() }));
    expect(String(tooLarge)).toContain('413: HTTP 413 answered with a body that is not JSON: "<html>413</html>"');
    expect(toPlatformError(tooLarge, "sendMessage", TOKEN)).toMatchObject({ code: "invalid", retryable: false });
    expect(classify(await failure(call("b", {}, { agent: agent() }))).code).toBe("rate_limited");
  });

  it("R3 a redirect (a proxy, a mistyped root) is a clear error that is not retried, and hides the token in the new address", async () => {
    const { root } = await server(() => ({ status: 301, body: "", headers: { location: `https://elsewhere.example/bot${TOKEN}/sendMessage` } }));
    const err = await failure(createBotApi(root, TOKEN)("sendMessage", {}, { agent: agent() }));
    expect(String(err)).toContain("the API root answered with a redirect to https://elsewhere.example/bot<redacted>/sendMessage: set channels.telegram.apiRoot to the final address");
    expect(String(err)).not.toContain("SECRET");
    expect(classify(err).code).toBe("invalid");
  });

  it("R3 a refusal without an error code or description still says what happened", async () => {
    const { root } = await server(() => ({ status: 400, body: '{"ok":false}' }));
    const err = await failure(createBotApi(root, TOKEN)("sendMessage", {}, { agent: agent() }));
    expect((err as TelegramError).response).toEqual({ error_code: 400, description: "HTTP 400 without an error description" });
  });

  it("R3 a bare refusal keeps its HTTP status as the error code: a 403 (bot kicked) stays forbidden, not retried", async () => {
    const { root } = await server(() => ({ status: 403, body: '{"ok":false}' }));
    const err = await failure(createBotApi(root, TOKEN)("sendMessage", {}, { agent: agent() }));
    expect((err as TelegramError).response.error_code).toBe(403);
    expect(toPlatformError(err, "sendMessage", TOKEN)).toMatchObject({ code: "forbidden", retryable: false });
  });

  it("R3 a refused connection is a transport error whose message and stack hold no token; it never reached Telegram, so it may be repeated", async () => {
    const { root } = await server(() => ({ status: 200, body: "{}" }));
    servers[0].close();
    await new Promise((r) => setTimeout(r, 10));
    const err = await failure(createBotApi(root, TOKEN)("sendMessage", {}, { agent: agent() }));
    const perr = toPlatformError(err, "sendMessage", TOKEN);
    expect(perr.code).toBe("transport");
    expect(perr.outcomeUnknown).toBe(false);
    expect(`${perr.message} ${perr.stack} ${String(err)}`).not.toContain("SECRET");
  });

  it("a connection cut after Telegram had the whole request, before any answer, leaves the outcome unknown: the send may have gone", async () => {
    const { root, seen } = await server(() => ({ write: (res) => res.socket?.destroy() }));
    const err = await failure(createBotApi(root, TOKEN)("sendMessage", { chat_id: 1, text: "hi" }, { agent: agent() }));
    expect(seen).toHaveLength(1);
    expect(toPlatformError(err, "sendMessage", TOKEN)).toMatchObject({ code: "transport", outcomeUnknown: true, message: expect.stringContaining("outcome is unknown") });
  });

  it("a 504 (the gateway in front of the Bot API gave up waiting for it) leaves a send's outcome unknown; a 500, 502 or 503 is a failure that may be repeated", async () => {
    for (const [status, unknown] of [[504, true], [500, false], [502, false], [503, false]] as const) {
      const { root } = await server(() => ({ status, body: "<html>proxy page</html>" }));
      const err = await failure(createBotApi(root, TOKEN)("sendMessage", { chat_id: 1, text: "hi" }, { agent: agent() }));
      expect(toPlatformError(err, "sendMessage", TOKEN), `HTTP ${status}`).toMatchObject({ code: "transport", outcomeUnknown: unknown });
    }
  });

  it("a kept-alive connection reset before any answer is the server having closed it while idle: the outcome is known (not carried out), the send may be repeated", async () => {
    let calls = 0;
    const { root } = await server(() => (++calls === 1 ? { status: 200, body: '{"ok":true,"result":{"message_id":1}}' } : { write: (res) => res.socket?.resetAndDestroy() }));
    const api = createBotApi(root, TOKEN);
    const kept = agent();
    await api("sendMessage", { chat_id: 1, text: "one" }, { agent: kept });
    const err = await failure(api("sendMessage", { chat_id: 1, text: "two" }, { agent: kept }));
    expect((err as NodeJS.ErrnoException).code).toBe("ECONNRESET");
    expect(toPlatformError(err, "sendMessage", TOKEN)).toMatchObject({ code: "transport", outcomeUnknown: false });
  });

  it("T2 an aborted call (the poller stopping) rejects with the signal's reason and leaves no request hanging", async () => {
    const { root, seen } = await server(() => "hang");
    const stop = new AbortController();
    const pending = createBotApi(root, TOKEN)("getUpdates", { timeout: 30 }, { agent: agent(), signal: stop.signal });
    while (seen.length === 0) await new Promise((r) => setTimeout(r, 5));
    stop.abort(new Error("poller stopped"));
    await expect(pending).rejects.toThrow("poller stopped");
  });
});

describe("postBody bounds", () => {
  it("R3 a response over the limit fails instead of filling memory", async () => {
    const { root } = await server(() => ({ status: 200, body: "x".repeat(10_000) }));
    await expect(postBody(new URL(root), Buffer.from("{}"), { agent: agent(), headers: {}, timeoutMs: 5000, maxResponseBytes: 1000 })).rejects.toThrow("response larger than 1000 bytes");
  });

  it("R3 a server that never answers times out", async () => {
    const { root } = await server(() => "hang");
    await expect(postBody(new URL(root), Buffer.from("{}"), { agent: agent(), headers: {}, timeoutMs: 100, maxResponseBytes: 1000 })).rejects.toThrow("Request timed out.");
  });

  it("a character whose bytes arrive in two reads of the response is decoded whole", async () => {
    const bytes = Buffer.from('{"text":"😀"}');
    const cut = bytes.indexOf(0xf0) + 2;
    const { root } = await server(() => ({
      write: (res) => {
        res.writeHead(200, { "content-length": bytes.length });
        // The rest later, so that the client reads the two parts separately.
        res.write(bytes.subarray(0, cut), () => setTimeout(() => res.end(bytes.subarray(cut)), 20));
      },
    }));
    const res = await postBody(new URL(root), Buffer.from("{}"), { agent: agent(), headers: {}, timeoutMs: 5000, maxResponseBytes: 1000 });
    expect(JSON.parse(res.text)).toEqual({ text: "😀" });
  });

  it("a response cut off mid-body fails the call instead of hanging it; the request had been acted on", async () => {
    let calls = 0;
    const { root } = await server(() =>
      ++calls === 1
        ? { status: 200, body: "{}" }
        : {
            write: (res) => {
              res.writeHead(200, { "content-length": 1000 });
              res.write('{"ok":true,', () => res.socket?.resetAndDestroy());
            },
          },
    );
    // On a kept-alive connection too: an answer had begun, so the server had the request.
    const kept = agent();
    const post = () => postBody(new URL(root), Buffer.from("{}"), { agent: kept, headers: {}, timeoutMs: 5000, maxResponseBytes: 10_000 });
    await post();
    const err = await failure(post());
    expect(reachedServer(err)).toBe(true);
  });

  it("a server that never answers a whole request times out with the outcome unknown", async () => {
    const { root } = await server(() => "hang");
    const err = await failure(postBody(new URL(root), Buffer.from("{}"), { agent: agent(), headers: {}, timeoutMs: 100, maxResponseBytes: 1000 }));
    expect(reachedServer(err)).toBe(true);
  });

  it("S6 onWire runs once, before the server sees the request, even when the call then fails", async () => {
    const order: string[] = [];
    const { root } = await server(() => {
      order.push("server");
      return { status: 500, body: "" };
    });
    const res = await postBody(new URL(root), Buffer.from("{}"), { agent: agent(), headers: {}, timeoutMs: 5000, maxResponseBytes: 1000, onWire: () => order.push("wire") });
    expect(res.status).toBe(500);
    expect(order).toEqual(["wire", "server"]);
  });
});
