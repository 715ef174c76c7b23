import OpenAI, { APIConnectionError, APIError, APIUserAbortError } from "openai";
import type { ChatCompletionMessageParam, ChatCompletionTool } from "openai/resources/chat/completions";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { FakeModelServer } from "./model-server.js";

const WEATHER_TOOL: ChatCompletionTool = {
  type: "function",
  function: {
    name: "get_weather",
    description: "Current weather for a city",
    parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
  },
};

let server: FakeModelServer;
let client: OpenAI;

beforeEach(async () => {
  server = new FakeModelServer();
  // No retries: a scripted error must reach the test once, not be retried into the next reply.
  client = new OpenAI({ baseURL: await server.start(), apiKey: "x", maxRetries: 0 });
});

afterEach(async () => {
  await server.stop();
});

describe("FakeModelServer with the real openai SDK", () => {
  it("echoes the last user message by default, with a real-shaped completion", async () => {
    const res = await client.chat.completions.create({
      model: "test-model",
      messages: [
        { role: "system", content: "be brief" },
        { role: "user", content: "first" },
        { role: "assistant", content: "ok" },
        { role: "user", content: [{ type: "text", text: "hello there" }] },
      ],
    });
    expect(res.object).toBe("chat.completion");
    expect(res.model).toBe("test-model");
    expect(res.choices[0].message).toMatchObject({ role: "assistant", content: "echo: hello there" });
    expect(res.choices[0].finish_reason).toBe("stop");
    // "be brief" + "first" + "ok" + "hello there" = 26 chars → 7 tokens; "echo: hello there" = 17 → 5.
    expect(res.usage).toEqual({ prompt_tokens: 7, completion_tokens: 5, total_tokens: 12 });
    expect(server.requests).toHaveLength(1);
    expect(server.requests[0].messages[1]).toEqual({ role: "user", content: "first" });
  });

  it("passes scripted usage through and adds total_tokens", async () => {
    server.setResponder(() => ({ content: "hi", usage: { prompt_tokens: 100, completion_tokens: 3 } }));
    const res = await client.chat.completions.create({ model: "m", messages: [{ role: "user", content: "x" }] });
    expect(res.usage).toEqual({ prompt_tokens: 100, completion_tokens: 3, total_tokens: 103 });
  });

  it("runs a tool call round trip and records the tool result request", async () => {
    server.setResponder((req, index) =>
      index === 0
        ? { toolCalls: [{ name: "get_weather", arguments: { city: "Paris" }, id: "call_w1" }] }
        : { content: `It is ${req.messages.at(-1).content} in Paris.` },
    );
    const messages: ChatCompletionMessageParam[] = [{ role: "user", content: "weather in Paris?" }];

    const first = await client.chat.completions.create({ model: "m", messages, tools: [WEATHER_TOOL], tool_choice: "auto" });
    const choice = first.choices[0];
    expect(choice.finish_reason).toBe("tool_calls");
    expect(choice.message.content).toBeNull();
    const call = choice.message.tool_calls![0];
    expect(call.type).toBe("function");
    if (call.type !== "function") throw new Error("expected a function tool call");
    expect(call).toMatchObject({ id: "call_w1", function: { name: "get_weather" } });
    expect(JSON.parse(call.function.arguments)).toEqual({ city: "Paris" });

    messages.push(choice.message, { role: "tool", tool_call_id: call.id, content: "sunny" });
    const second = await client.chat.completions.create({ model: "m", messages, tools: [WEATHER_TOOL] });
    expect(second.choices[0].message.content).toBe("It is sunny in Paris.");

    expect(server.requests[0].tools).toEqual([WEATHER_TOOL]);
    expect(server.requests[0].tool_choice).toBe("auto");
    expect(server.requests[1].messages.at(-1)).toEqual({ role: "tool", tool_call_id: "call_w1", content: "sunny" });
  });

  it("sends string tool arguments verbatim so malformed JSON can be scripted", async () => {
    server.setResponder(() => ({ toolCalls: [{ name: "get_weather", arguments: "{not json" }] }));
    const res = await client.chat.completions.create({ model: "m", messages: [{ role: "user", content: "x" }] });
    const call = res.choices[0].message.tool_calls![0];
    if (call.type !== "function") throw new Error("expected a function tool call");
    expect(call.function.arguments).toBe("{not json");
    expect(call.id).toBe("call_0_0");
  });

  it("streams content deltas that add up to the reply, ending the stream cleanly", async () => {
    server.setResponder(() => ({ content: "Streaming works, piece by piece 😀." }));
    const stream = await client.chat.completions.create({
      model: "m",
      messages: [{ role: "user", content: "go" }],
      stream: true,
      stream_options: { include_usage: true },
    });
    let text = "";
    let deltas = 0;
    let finish: string | null = null;
    let usage: unknown;
    for await (const chunk of stream) {
      expect(chunk.object).toBe("chat.completion.chunk");
      const choice = chunk.choices[0];
      if (choice?.delta.content) {
        text += choice.delta.content;
        deltas++;
      }
      if (choice?.finish_reason) finish = choice.finish_reason;
      if (chunk.usage) usage = chunk.usage;
    }
    expect(text).toBe("Streaming works, piece by piece 😀.");
    expect(deltas).toBeGreaterThan(1);
    expect(finish).toBe("stop");
    expect(usage).toMatchObject({ total_tokens: expect.any(Number) });
    expect(server.requests[0].stream).toBe(true);
  });

  it("streams tool calls that the SDK's stream helper assembles into a final completion", async () => {
    server.setResponder(() => ({
      content: "Checking.",
      toolCalls: [
        { name: "get_weather", arguments: { city: "Reykjavík" } },
        { name: "get_weather", arguments: { city: "Lima" } },
      ],
    }));
    const final = await client.chat.completions
      .stream({ model: "m", messages: [{ role: "user", content: "two cities" }], tools: [WEATHER_TOOL] })
      .finalChatCompletion();
    const message = final.choices[0].message;
    expect(final.choices[0].finish_reason).toBe("tool_calls");
    expect(message.content).toBe("Checking.");
    const args = (message.tool_calls ?? []).map((c) => (c.type === "function" ? JSON.parse(c.function.arguments) : null));
    expect(args).toEqual([{ city: "Reykjavík" }, { city: "Lima" }]);
  });

  it.each([
    ["429 rate limit", { status: 429, error: "slow down" }, 429, "slow down", "rate_limit_exceeded"],
    ["401 bad key", { status: 401, error: "bad key" }, 401, "bad key", "invalid_api_key"],
    ["error without status is a 500", { error: "boom" }, 500, "boom", null],
    ["status without message", { status: 503 }, 503, "HTTP 503", null],
  ])("answers a scripted error (%s) with an OpenAI-shaped error body", async (_case, reply, status, message, code) => {
    server.setResponder(() => reply);
    const err = await client.chat.completions
      .create({ model: "m", messages: [{ role: "user", content: "x" }] })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(APIError);
    expect(err).toMatchObject({ status, code, error: { message } });
  });

  it("turns a throwing responder into a visible 500", async () => {
    server.setResponder(() => {
      throw new Error("script bug");
    });
    const err = await client.chat.completions.create({ model: "m", messages: [{ role: "user", content: "x" }] }).catch((e: unknown) => e);
    expect(err).toMatchObject({ status: 500, error: { message: expect.stringContaining("script bug") } });
  });

  it("delays a reply by delayMs", async () => {
    server.setResponder(() => ({ content: "late", delayMs: 150 }));
    const started = Date.now();
    const res = await client.chat.completions.create({ model: "m", messages: [{ role: "user", content: "x" }] });
    expect(res.choices[0].message.content).toBe("late");
    expect(Date.now() - started).toBeGreaterThanOrEqual(140);
  });

  it("lets a client abort during a delay and keeps serving afterwards", async () => {
    server.setResponder((_req, index) => (index === 0 ? { content: "never", delayMs: 30_000 } : { content: "next" }));
    const controller = new AbortController();
    const pending = client.chat.completions
      .create({ model: "m", messages: [{ role: "user", content: "x" }] }, { signal: controller.signal })
      .catch((e: unknown) => e);
    await server.waitForRequests(1);
    controller.abort();
    expect(await pending).toBeInstanceOf(APIUserAbortError);
    const res = await client.chat.completions.create({ model: "m", messages: [{ role: "user", content: "y" }] });
    expect(res.choices[0].message.content).toBe("next");
  });

  it("stop() cuts off a reply parked in a delay instead of waiting for it", async () => {
    server.setResponder(() => ({ content: "never", delayMs: 30_000 }));
    const pending = client.chat.completions.create({ model: "m", messages: [{ role: "user", content: "x" }] }).catch((e: unknown) => e);
    await server.waitForRequests(1);
    // The parked reply is 30 s away, beyond the test's timeout: stop() must not wait for it.
    await server.stop();
    expect(await pending).toBeInstanceOf(APIConnectionError);
  });

  it("serves several requests over kept-alive connections and still stops promptly", async () => {
    for (const word of ["a", "b", "c"]) {
      const res = await client.chat.completions.create({ model: "m", messages: [{ role: "user", content: word }] });
      expect(res.choices[0].message.content).toBe(`echo: ${word}`);
    }
    await server.stop();
    await expect(client.chat.completions.create({ model: "m", messages: [{ role: "user", content: "d" }] })).rejects.toBeInstanceOf(APIConnectionError);
  });

  it("passes each request's index to the responder", async () => {
    server.setResponder((_req, index) => ({ content: `#${index}` }));
    const replies = [];
    for (let i = 0; i < 3; i++) {
      const res = await client.chat.completions.create({ model: "m", messages: [{ role: "user", content: "x" }] });
      replies.push(res.choices[0].message.content);
    }
    expect(replies).toEqual(["#0", "#1", "#2"]);
  });

  it("lists one model", async () => {
    const models = [];
    for await (const model of client.models.list()) models.push(model.id);
    expect(models).toEqual(["fake-model"]);
  });

  it("waitForRequests resolves once enough requests arrived and rejects with the count on timeout", async () => {
    const waiting = server.waitForRequests(2, 2_000);
    await client.chat.completions.create({ model: "m", messages: [{ role: "user", content: "1" }] });
    await client.chat.completions.create({ model: "m", messages: [{ role: "user", content: "2" }] });
    await expect(waiting).resolves.toBeUndefined();
    await expect(server.waitForRequests(3, 50)).rejects.toThrow(/expected 3 model request\(s\) within 50 ms, got 2/);
  });
});
