/**
 * The OpenAI-compatible client (src/agents/models/openai-chat.ts replaced the `openai` SDK for
 * speed, see bench/): it must keep the SDK's robustness — retry transient failures (connection
 * errors, 408/409/429/5xx) honouring the server's retry-after, not retry permanent ones, stop on
 * abort, time out a silent server, and report errors as "<status> <server message>" without the
 * API key a server may echo back.
 */
import http from "node:http";
import type { AddressInfo } from "node:net";
import { afterEach, describe, expect, it, vi } from "vitest";
import { createOpenAiChatProvider } from "../../src/agents/models/openai-chat.js";
import type { ChatMessage } from "../../src/agents/models/provider.js";
import { FakeModelServer, type ModelReply, type ModelRequest } from "../fakes/model-server.js";

const servers: Array<{ stop(): Promise<void> }> = [];
afterEach(async () => {
  for (const s of servers.splice(0)) await s.stop();
});

async function fake(responder: ConstructorParameters<typeof FakeModelServer>[0]): Promise<{ model: FakeModelServer; baseUrl: string }> {
  const model = new FakeModelServer(responder);
  const baseUrl = await model.start();
  servers.push(model);
  return { model, baseUrl };
}

/** A bare HTTP server for answers the fake model server cannot give (non-JSON bodies, redirects). */
async function raw(status: number, body: string): Promise<{ baseUrl: string; hits: () => number; lastHeaders: () => http.IncomingHttpHeaders | undefined }> {
  let hits = 0;
  let lastHeaders: http.IncomingHttpHeaders | undefined;
  const server = http.createServer((req, res) => {
    hits++;
    lastHeaders = req.headers;
    res.writeHead(status, { "content-type": "text/plain" }).end(body);
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  servers.push({ stop: () => new Promise<void>((r) => (server.closeAllConnections(), server.close(() => r()))) });
  return { baseUrl: `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`, hits: () => hits, lastHeaders: () => lastHeaders };
}

/**
 * Under fake timers: waits until the client has scheduled its retry wait, runs it, and returns
 * how long it was on the fake clock (exact, unlike a wall-clock measurement).
 */
async function nextRetryWait(): Promise<number> {
  while (vi.getTimerCount() === 0) await new Promise((r) => setImmediate(r));
  const before = Date.now();
  vi.advanceTimersToNextTimer();
  return Date.now() - before;
}

const ask = (baseUrl: string, extra: Partial<Parameters<typeof createOpenAiChatProvider>[0]> = {}, signal?: AbortSignal) =>
  createOpenAiChatProvider({ id: "p", baseUrl, timeoutMs: 5000, ...extra }).complete({ model: "m", messages: [{ role: "user", content: "hi" }], tools: [], signal });

describe("model client robustness", () => {
  it("model-client: retries a 500 and a 429 with backoff and then succeeds", async () => {
    const { model, baseUrl } = await fake((_req, i) => (i === 0 ? { status: 500, error: "boom" } : i === 1 ? { status: 429, error: "slow down" } : { content: "fine" }));
    const res = await ask(baseUrl);
    expect(res.content).toBe("fine");
    expect(model.requests).toHaveLength(3);
  });

  it("model-client: a 400 is not retried and reads '<status> <message>'", async () => {
    const { model, baseUrl } = await fake(() => ({ status: 400, error: "context too long" }));
    await expect(ask(baseUrl)).rejects.toThrow("model call failed (p/m, HTTP 400): 400 context too long");
    expect(model.requests).toHaveLength(1);
  });

  it("model-client: gives up after two retries", async () => {
    const { model, baseUrl } = await fake(() => ({ status: 503, error: "overloaded" }));
    await expect(ask(baseUrl, { maxRetries: 2 })).rejects.toThrow(/HTTP 503/);
    expect(model.requests).toHaveLength(3);
  }, 10_000);

  it("model-client: a connection refused is retried, then reported as a connection error", async () => {
    const closed = http.createServer();
    await new Promise<void>((r) => closed.listen(0, "127.0.0.1", r));
    const port = (closed.address() as AddressInfo).port;
    await new Promise((r) => closed.close(r));
    await expect(ask(`http://127.0.0.1:${port}/v1`, { maxRetries: 1 })).rejects.toThrow(/Connection error/);
  });

  it("model-client: an abort ends the call at once, also during a retry wait", async () => {
    // An answer a minute away: a call that waited for it instead would outlast the test's timeout.
    const { baseUrl } = await fake(() => ({ content: "late", delayMs: 60_000 }));
    const ac = new AbortController();
    setTimeout(() => ac.abort(new Error("stop")), 50);
    await expect(ask(baseUrl, {}, ac.signal)).rejects.toThrow("stop");
  });

  it("model-client: a server that never answers times out", async () => {
    const { baseUrl } = await fake(() => ({ content: "never", delayMs: 10_000 }));
    await expect(ask(baseUrl, { timeoutMs: 200, maxRetries: 0 })).rejects.toThrow(/timed out/);
  });

  it("model-client: an API key echoed in the server's error never reaches the error message", async () => {
    const key = "sk-test-echoed-key-123456";
    const { model, baseUrl } = await fake(() => ({ status: 401, error: `Incorrect API key provided: ${key} (key ${key} is revoked)` }));
    const err = await ask(baseUrl, { apiKey: key }).catch((e: Error) => e);
    expect(String(err)).toMatch(/401 Incorrect API key provided: \[redacted\]/);
    expect(String(err)).not.toContain(key);
    expect(model.requests).toHaveLength(1);
  });

  it("model-client: an API key echoed in a 200 page that is not JSON (a proxy's) never reaches the error message, however long the page", async () => {
    const key = "sk-test-echoed-key-123456";
    // The key straddles the 200 characters the error quotes: cutting first would leave its start.
    const { baseUrl } = await raw(200, `<html>${"x".repeat(175)} your key ${key} was used</html>`);
    const err = await ask(baseUrl, { apiKey: key, maxRetries: 0 }).catch((e: Error) => e);
    expect(String(err)).toMatch(/model returned invalid JSON: <html>x+ your key \[redact/);
    expect(String(err)).not.toContain(key.slice(0, 3));
  });

  it("model-client: tool calls, usage and finish reason are read from the reply", async () => {
    const { baseUrl } = await fake(() => ({ content: null, toolCalls: [{ name: "sessions_list", arguments: { limit: 2 } }], usage: { prompt_tokens: 7, completion_tokens: 3 } }));
    const res = await ask(baseUrl);
    expect(res).toMatchObject({ content: "", toolCalls: [{ name: "sessions_list", arguments: '{"limit":2}' }], usage: { input: 7, output: 3 }, finishReason: "tool_calls" });
  });

  it("model-client: x-should-retry: false stops the retry of a 503", async () => {
    const { model, baseUrl } = await fake(() => ({ status: 503, error: "overloaded", headers: { "x-should-retry": "false" } }));
    await expect(ask(baseUrl)).rejects.toThrow("HTTP 503");
    expect(model.requests).toHaveLength(1);
  });

  it("model-client: waits exactly what retry-after-ms and retry-after ask for", async () => {
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout", "Date"] });
    try {
      // retry-after may also be an HTTP date (RFC 9110): whole seconds, so the wait is what is left until then.
      let untilDate = 0;
      const httpDate = () => {
        const at = Math.ceil(Date.now() / 1000) * 1000 + 3000;
        untilDate = at - Date.now();
        return { "retry-after": new Date(at).toUTCString() };
      };
      const replies: Array<() => ModelReply> = [() => ({ status: 429, error: "slow down", headers: { "retry-after-ms": "1234" } }), () => ({ status: 503, error: "busy", headers: { "retry-after": "7" } }), () => ({ status: 503, error: "busy", headers: httpDate() }), () => ({ content: "fine" })];
      const { baseUrl } = await fake((_req, i) => replies[i]());
      const call = ask(baseUrl, { maxRetries: 3 });
      expect(await nextRetryWait()).toBe(1234);
      expect(await nextRetryWait()).toBe(7000);
      expect(await nextRetryWait()).toBe(untilDate);
      expect(untilDate).toBeGreaterThan(2000);
      expect((await call).content).toBe("fine");
    } finally {
      vi.useRealTimers();
    }
  });

  it.each<Record<string, string>>([{ "retry-after": "3600" }, { "retry-after-ms": "3600000" }])("model-client: a retry-after of an hour (%o) is not waited out; the normal backoff applies", async (headers) => {
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout", "Date"] });
    try {
      const { model, baseUrl } = await fake((_req, i) => (i === 0 ? { status: 429, error: "quota", headers } : { content: "fine" }));
      const call = ask(baseUrl);
      expect(await nextRetryWait()).toBeLessThanOrEqual(500);
      expect((await call).content).toBe("fine");
      expect(model.requests).toHaveLength(2);
    } finally {
      vi.useRealTimers();
    }
  });

  it("model-client: the backoff doubles from 0.5 s with each retry up to 8 s", async () => {
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout", "Date"] });
    // No jitter: the waits are then the backoff's full steps.
    vi.spyOn(Math, "random").mockReturnValue(0);
    try {
      const { model, baseUrl } = await fake((_req, i) => (i < 6 ? { status: 503, error: "busy" } : { content: "fine" }));
      const call = ask(baseUrl, { maxRetries: 6 });
      const waits: number[] = [];
      for (let i = 0; i < 6; i++) waits.push(await nextRetryWait());
      expect(waits).toEqual([500, 1000, 2000, 4000, 8000, 8000]);
      expect((await call).content).toBe("fine");
      expect(model.requests).toHaveLength(7);
    } finally {
      vi.restoreAllMocks();
      vi.useRealTimers();
    }
  });

  it("model-client: 408, 409 and a 400 the server marks x-should-retry: true are retried", async () => {
    const replies: ModelReply[] = [
      { status: 408, error: "request timeout", headers: { "retry-after-ms": "0" } },
      { status: 409, error: "conflict", headers: { "retry-after-ms": "0" } },
      { status: 400, error: "try again", headers: { "x-should-retry": "true", "retry-after-ms": "0" } },
      { content: "fine" },
    ];
    const { model, baseUrl } = await fake((_req, i) => replies[i]);
    expect((await ask(baseUrl, { maxRetries: 3 })).content).toBe("fine");
    expect(model.requests).toHaveLength(4);
  });

  it("model-client: an abort during a retry wait ends the call without waiting it out", async () => {
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout", "Date"] });
    try {
      const { model, baseUrl } = await fake(() => ({ status: 503, error: "busy", headers: { "retry-after-ms": "30000" } }));
      const ac = new AbortController();
      const call = ask(baseUrl, {}, ac.signal);
      const settled = call.catch((e: Error) => e);
      while (vi.getTimerCount() === 0) await new Promise((r) => setImmediate(r));
      ac.abort(new Error("stopped while waiting"));
      // The fake clock never moves: a call that slept on would never settle.
      expect(await settled).toMatchObject({ message: "stopped while waiting" });
      expect(model.requests).toHaveLength(1);
    } finally {
      vi.useRealTimers();
    }
  });

  it("model-client: an abort during the last allowed attempt is reported as the abort, not as a connection error", async () => {
    const { model, baseUrl } = await fake(() => ({ content: "late", delayMs: 60_000 }));
    const ac = new AbortController();
    const call = ask(baseUrl, { maxRetries: 0 }, ac.signal).catch((e: Error) => e);
    await model.waitForRequests(1);
    ac.abort(new Error("stop"));
    expect(await call).toMatchObject({ message: "stop" });
  });

  it("model-client: the API key is sent as a bearer token", async () => {
    const { baseUrl, lastHeaders } = await raw(200, JSON.stringify({ choices: [{ message: { content: "ok" } }] }));
    expect((await ask(baseUrl, { apiKey: "sk-test-sent-key-123456" })).content).toBe("ok");
    expect(lastHeaders()?.authorization).toBe("Bearer sk-test-sent-key-123456");
  });

  it("model-client: an answer without choices fails at once with a clear error instead of being retried", async () => {
    const { baseUrl, hits } = await raw(200, JSON.stringify({ choices: [] }));
    await expect(ask(baseUrl)).rejects.toThrow(/^model m returned no choices$/);
    expect(hits()).toBe(1);
  });

  it.each([
    { body: JSON.stringify({ message: "bad request body" }), reads: "400 bad request body" },
    { body: "", reads: "400 status code (no body)" },
  ])("model-client: an error body $body reads as $reads", async ({ body, reads }) => {
    const { baseUrl } = await raw(400, body);
    await expect(ask(baseUrl)).rejects.toThrow(`model call failed (p/m, HTTP 400): ${reads}`);
  });

  it("model-client: an answer that is not JSON fails at once instead of being retried", async () => {
    const { baseUrl, hits } = await raw(200, "<html>proxy login</html>");
    await expect(ask(baseUrl)).rejects.toThrow("model returned invalid JSON: <html>proxy login</html>");
    expect(hits()).toBe(1);
  });

  it("model-client: a redirect is an error with its status, not a reply to parse", async () => {
    const { baseUrl, hits } = await raw(301, "Moved Permanently");
    await expect(ask(baseUrl)).rejects.toThrow("model call failed (p/m, HTTP 301): 301 Moved Permanently");
    expect(hits()).toBe(1);
  });

  it("model-client: an Ollama-style {\"error\": \"…\"} body reads as '<status> <message>'", async () => {
    const { baseUrl } = await raw(404, JSON.stringify({ error: "model 'm' not found" }));
    await expect(ask(baseUrl)).rejects.toThrow(/\): 404 model 'm' not found$/);
  });

  it("model-client: a call whose signal is already aborted sends nothing", async () => {
    const { model, baseUrl } = await fake(() => ({ content: "should not be asked" }));
    const ac = new AbortController();
    ac.abort(new Error("stopped before the call"));
    await expect(ask(baseUrl, {}, ac.signal)).rejects.toThrow("stopped before the call");
    // A request that reached the server would cost tokens for a run the user already stopped.
    expect(model.requests).toHaveLength(0);
  });

  it.each([
    { server: "Ollama, a model without tool support", status: 400, error: "registry.ollama.ai/library/deepseek-r1:8b does not support tools" },
    { server: "vLLM started without --enable-auto-tool-choice", status: 400, error: '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set' },
  ])("model-client: a server that refuses the tools ($server) is asked again without them, and later calls of that model skip them", async ({ status, error }) => {
    const { model, baseUrl } = await fake((req) => (req.tools?.length ? { status, error } : { content: "plain answer" }));
    const provider = createOpenAiChatProvider({ id: "p", baseUrl, timeoutMs: 5000 });
    const tools = [{ type: "function" as const, function: { name: "sessions_list", description: "list", parameters: { type: "object", properties: {} } } }];
    const call = () => provider.complete({ model: "m", messages: [{ role: "user", content: "hi" }], tools });
    expect(await call()).toMatchObject({ content: "plain answer", toolCalls: [] });
    expect(await call()).toMatchObject({ content: "plain answer" });
    expect(model.requests.map((r) => r.tools?.length ?? 0)).toEqual([1, 0, 0]);
    expect(model.requests[1].tool_choice).toBeUndefined();
  });

  it("model-client: a strict chat template's 400 (roles must alternate: Mistral, Gemma on vLLM or llama.cpp) is answered by joining consecutive user turns; later calls of that model join them at once", async () => {
    const strictTemplate = (req: ModelRequest) => {
      const roles = req.messages.filter((m) => m.role !== "system").map((m) => m.role);
      const alternates = roles.every((role, i) => role === (i % 2 === 0 ? "user" : "assistant"));
      return alternates ? { content: `answered ${roles.length} turns` } : { status: 400, error: "After the optional system message, conversation roles must alternate user/assistant/user/assistant/..." };
    };
    const { model, baseUrl } = await fake(strictTemplate);
    const provider = createOpenAiChatProvider({ id: "p", baseUrl, timeoutMs: 5000 });
    // A group's transcript: an answer at the window's start, two unmentioned messages, then a mention.
    const messages: ChatMessage[] = [
      { role: "system", content: "be brief" },
      { role: "assistant", content: "an older answer" },
      { role: "user", content: "[Alice] lunch?" },
      { role: "user", content: "[Bob] sure" },
      { role: "user", content: "[Alice] @bot where?" },
    ];
    expect(await provider.complete({ model: "m", messages, tools: [] })).toMatchObject({ content: "answered 1 turns" });
    expect(model.requests[1].messages).toEqual([
      { role: "system", content: "be brief" },
      { role: "user", content: "[Alice] lunch?\n\n[Bob] sure\n\n[Alice] @bot where?" },
    ]);
    expect(await provider.complete({ model: "m", messages, tools: [] })).toMatchObject({ content: "answered 1 turns" });
    expect(model.requests).toHaveLength(3);
    // Another model of the same server is not assumed strict.
    await expect(provider.complete({ model: "other", messages, tools: [] })).resolves.toMatchObject({ content: "answered 1 turns" });
    expect(model.requests.map((r) => r.messages.length)).toEqual([5, 2, 2, 5, 2]);
  });

  it("model-client: another 400 with tools is not mistaken for a tool refusal", async () => {
    const { model, baseUrl } = await fake(() => ({ status: 400, error: "Invalid schema for function 'sessions_list'" }));
    const provider = createOpenAiChatProvider({ id: "p", baseUrl, timeoutMs: 5000 });
    const tools = [{ type: "function" as const, function: { name: "sessions_list", description: "list", parameters: { type: "object", properties: {} } } }];
    await expect(provider.complete({ model: "m", messages: [{ role: "user", content: "hi" }], tools })).rejects.toThrow("HTTP 400): 400 Invalid schema for function 'sessions_list'");
    expect(model.requests).toHaveLength(1);
  });

  it("model-client: LM Studio's 200 with an error body (baseUrl without /v1) reads as the server's error with a baseUrl hint, not 'no choices'", async () => {
    const { baseUrl, hits } = await raw(200, JSON.stringify({ error: "Unexpected endpoint or method. (POST /chat/completions)" }));
    await expect(ask(baseUrl.replace(/\/v1$/, ""))).rejects.toThrow(
      "model call failed (p/m): Unexpected endpoint or method. (POST /chat/completions) (POST /chat/completions: baseUrl has no /v1, under which OpenAI-compatible servers answer)",
    );
    expect(hits()).toBe(1);
  });

  it("model-client: a 404 from a baseUrl without /v1 (Ollama's '404 page not found') says to check baseUrl; with /v1 a 404 (unknown model) says only what the server said", async () => {
    const { baseUrl } = await raw(404, "404 page not found");
    await expect(ask(baseUrl.replace(/\/v1$/, ""))).rejects.toThrow(/^model call failed \(p\/m, HTTP 404\): 404 404 page not found \(POST \/chat\/completions: baseUrl has no \/v1, under which OpenAI-compatible servers answer\)$/);
    await expect(ask(baseUrl)).rejects.toThrow(/^model call failed \(p\/m, HTTP 404\): 404 404 page not found$/);
  });
});
