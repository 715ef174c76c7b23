/**
 * A fake OpenAI-compatible Chat Completions server (interfaces §4) on a real socket, so tests and
 * the benchmark exercise the daemon's actual HTTP client path (SDK, retries, streaming parser,
 * aborts) rather than a stubbed function. Replies are scripted per request by a Responder.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";

export interface ModelRequest {
  model: string;
  messages: any[];
  tools?: any[];
  tool_choice?: unknown;
  stream?: boolean;
  stream_options?: { include_usage?: boolean };
}

export type ModelReply = {
  content?: string | null;
  /** `arguments` is JSON-encoded unless it is already a string (which lets tests send bad JSON). */
  toolCalls?: { name: string; arguments: unknown; id?: string }[];
  usage?: { prompt_tokens: number; completion_tokens: number };
  /** `finish_reason` (default "tool_calls" with tool calls, else "stop"): "length", "content_filter"… */
  finishReason?: string;
  /** Extra fields of the message, as servers add them (`reasoning_content`, `refusal`…). */
  messageExtra?: Record<string, unknown>;
  /** Wait this long before answering; a client that disconnects meanwhile gets nothing. */
  delayMs?: number;
  /** An HTTP error status (default 500 when only `error` is given). */
  status?: number;
  /** Error message for the OpenAI-shaped error body. */
  error?: string;
  /** The error body's `code` (default by status: invalid_api_key, rate_limit_exceeded, else null). */
  errorCode?: string;
  /** Extra headers on an error answer (`retry-after`, `x-should-retry`…). */
  headers?: Record<string, string>;
};

/** `index` is the request's position in `requests` (0 for the first request ever received). */
export type Responder = (req: ModelRequest, index: number) => ModelReply | Promise<ModelReply>;

const MODEL_ID = "fake-model";

/** The default responder: `echo: <the last user message>` (tests wrap it, e.g. to add a delay). */
export const echoLastUser: Responder = (req) => {
  const lastUser = [...req.messages].reverse().find((m) => m?.role === "user");
  return { content: `echo: ${textOf(lastUser?.content)}` };
};

/**
 * A model with a context window of `chars` characters of message text (about chars/4 tokens):
 * a longer request is refused as OpenAI refuses it (400, code context_length_exceeded); others
 * go to `inner`.
 */
export function withContextWindow(chars: number, inner: Responder = echoLastUser): Responder {
  return (req, index) => {
    const used = req.messages.reduce((n: number, m) => n + textOf(m?.content).length, 0);
    if (used <= chars) return inner(req, index);
    return {
      status: 400,
      errorCode: "context_length_exceeded",
      error: `This model's maximum context length is ${roughTokens(chars)} tokens. However, your messages resulted in ${roughTokens(used)} tokens. Please reduce the length of the messages.`,
    };
  };
}

export class FakeModelServer {
  /** Every request body received, in order. */
  requests: ModelRequest[] = [];
  private responder: Responder;
  private server: Server | undefined;
  private readonly waiters = new Set<() => void>();
  private received = 0;
  private readonly history: boolean;
  private readonly parsesToolArguments: boolean;

  /**
   * `history: false` (benchmarks) keeps no `requests`: a fake that remembers every body grows its
   * heap, and its collection pauses would be measured as the daemon's latency.
   */
  /**
   * `parsesToolArguments`: like llama.cpp's server (--jinja), which parses every tool call's
   * `arguments` in the history and answers 500 "Failed to parse tool call arguments as JSON".
   */
  constructor(responder: Responder = echoLastUser, opts: { history?: boolean; parsesToolArguments?: boolean } = {}) {
    this.responder = responder;
    this.history = opts.history ?? true;
    this.parsesToolArguments = opts.parsesToolArguments ?? false;
  }

  setResponder(r: Responder): void {
    this.responder = r;
  }

  /** Listens on an ephemeral port; returns the base URL to give the OpenAI client. */
  async start(): Promise<string> {
    const server = createServer((req, res) => void this.handle(req, res));
    await new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      server.listen(0, "127.0.0.1", () => resolve());
    });
    this.server = server;
    return `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`;
  }

  async stop(): Promise<void> {
    const server = this.server;
    if (!server) return;
    this.server = undefined;
    const closed = new Promise<void>((resolve, reject) => server.close((err) => (err ? reject(err) : resolve())));
    // Kept-alive client sockets and replies parked in a delay would otherwise hold close() open.
    server.closeAllConnections();
    await closed;
  }

  waitForRequests(n: number, timeoutMs = 5_000): Promise<void> {
    return new Promise((resolve, reject) => {
      const check = () => {
        if (this.requests.length < n) return;
        done();
        resolve();
      };
      const timer = setTimeout(() => {
        done();
        reject(new Error(`expected ${n} model request(s) within ${timeoutMs} ms, got ${this.requests.length}`));
      }, timeoutMs);
      const done = () => {
        clearTimeout(timer);
        this.waiters.delete(check);
      };
      this.waiters.add(check);
      check();
    });
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    try {
      const path = new URL(req.url ?? "/", "http://localhost").pathname;
      if (req.method === "GET" && path === "/v1/models") {
        sendJson(res, 200, {
          object: "list",
          data: [{ id: MODEL_ID, object: "model", created: nowSeconds(), owned_by: "switchboard-test" }],
        });
      } else if (req.method === "POST" && path === "/v1/chat/completions") {
        await this.complete(req, res);
      } else {
        sendError(res, 404, `No route for ${req.method} ${path}`);
      }
    } catch (err) {
      // A throwing responder must fail the test visibly, not leave the client hanging.
      if (!res.headersSent) sendError(res, 500, `fake model server: ${err instanceof Error ? err.message : String(err)}`);
      else res.destroy();
    }
  }

  private async complete(req: IncomingMessage, res: ServerResponse): Promise<void> {
    let body: ModelRequest;
    try {
      body = JSON.parse(await readBody(req)) as ModelRequest;
    } catch {
      sendError(res, 400, "Request body is not valid JSON");
      return;
    }
    const index = this.received++;
    if (this.history) this.requests.push(body);
    for (const waiter of [...this.waiters]) waiter();
    // OpenAI refuses an assistant turn that has neither content nor tool calls.
    const at = (body.messages ?? []).findIndex((m) => m?.role === "assistant" && (m.content === null || m.content === undefined) && !m.tool_calls?.length);
    if (at >= 0) {
      sendError(res, 400, "Invalid value for 'content': expected a string, got null.", undefined, `messages.[${at}].content`);
      return;
    }
    if (this.parsesToolArguments) {
      for (const m of body.messages ?? []) {
        for (const call of m?.tool_calls ?? []) {
          try {
            JSON.parse(call?.function?.arguments);
          } catch (err) {
            sendError(res, 500, `Failed to parse tool call arguments as JSON: ${err instanceof Error ? err.message : String(err)}`);
            return;
          }
        }
      }
    }

    const reply = await this.responder(body, index);
    if (reply.delayMs && !(await waitWhileConnected(res, reply.delayMs))) return;
    if (reply.error !== undefined || (reply.status !== undefined && reply.status >= 400)) {
      const status = reply.status ?? 500;
      sendError(res, status, reply.error ?? `HTTP ${status}`, reply.headers, null, reply.errorCode);
      return;
    }
    const completion = buildCompletion(body, reply, index);
    if (body.stream) streamCompletion(res, completion, body.stream_options?.include_usage === true);
    else sendJson(res, 200, completion);
  }
}

interface Completion {
  id: string;
  object: "chat.completion";
  created: number;
  model: string;
  choices: [
    {
      index: 0;
      message: { role: "assistant"; content: string | null; tool_calls?: ToolCall[] };
      finish_reason: string;
    },
  ];
  usage: { prompt_tokens: number; completion_tokens: number; total_tokens: number };
}

interface ToolCall {
  id: string;
  type: "function";
  function: { name: string; arguments: string };
}

function buildCompletion(body: ModelRequest, reply: ModelReply, index: number): Completion {
  const toolCalls: ToolCall[] = (reply.toolCalls ?? []).map((call, i) => ({
    id: call.id ?? `call_${index}_${i}`,
    type: "function",
    function: {
      name: call.name,
      arguments: typeof call.arguments === "string" ? call.arguments : JSON.stringify(call.arguments ?? {}),
    },
  }));
  // The real API sends content null on a pure tool-call turn and a string otherwise.
  const content = reply.content !== undefined ? reply.content : toolCalls.length ? null : "";
  const usage = reply.usage ?? {
    prompt_tokens: roughTokens(body.messages.reduce((n: number, m) => n + textOf(m?.content).length, 0)),
    completion_tokens: roughTokens(content?.length ?? 0),
  };
  return {
    id: `chatcmpl-fake-${index}`,
    object: "chat.completion",
    created: nowSeconds(),
    model: body.model,
    choices: [
      {
        index: 0,
        message: { role: "assistant", content, ...(toolCalls.length ? { tool_calls: toolCalls } : {}), ...reply.messageExtra },
        finish_reason: reply.finishReason ?? (toolCalls.length ? "tool_calls" : "stop"),
      },
    ],
    usage: { ...usage, total_tokens: usage.prompt_tokens + usage.completion_tokens },
  };
}

/**
 * Streams the completion the way the real API does: a role delta, content in small pieces, each
 * tool call as a header delta then argument fragments, a finish delta, an optional usage chunk
 * (only with stream_options.include_usage), then `[DONE]`. Small pieces make clients prove they
 * accumulate deltas instead of reading one.
 */
function streamCompletion(res: ServerResponse, completion: Completion, includeUsage: boolean): void {
  const { id, created, model, usage } = completion;
  const { message, finish_reason } = completion.choices[0];
  res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache", connection: "keep-alive" });
  const send = (choices: unknown[], extra: object = {}) =>
    res.write(`data: ${JSON.stringify({ id, object: "chat.completion.chunk", created, model, choices, ...extra })}\n\n`);
  const delta = (d: object, finish: string | null = null) =>
    send([{ index: 0, delta: d, logprobs: null, finish_reason: finish }]);

  delta({ role: "assistant", content: message.content === null ? null : "" });
  for (const piece of pieces(message.content ?? "")) delta({ content: piece });
  (message.tool_calls ?? []).forEach((call, i) => {
    delta({ tool_calls: [{ index: i, id: call.id, type: "function", function: { name: call.function.name, arguments: "" } }] });
    for (const piece of pieces(call.function.arguments)) delta({ tool_calls: [{ index: i, function: { arguments: piece } }] });
  });
  delta({}, finish_reason);
  if (includeUsage) send([], { usage });
  res.end("data: [DONE]\n\n");
}

/** Splits by code point so no streamed fragment carries half a surrogate pair. */
function pieces(text: string, size = 8): string[] {
  const chars = Array.from(text);
  const out: string[] = [];
  for (let i = 0; i < chars.length; i += size) out.push(chars.slice(i, i + size).join(""));
  return out;
}

/** Resolves true after `ms`, or false as soon as the client goes away. */
function waitWhileConnected(res: ServerResponse, ms: number): Promise<boolean> {
  if (res.destroyed || res.socket?.destroyed) return Promise.resolve(false);
  return new Promise((resolve) => {
    const onClose = () => {
      clearTimeout(timer);
      resolve(false);
    };
    const timer = setTimeout(() => {
      res.off("close", onClose);
      resolve(true);
    }, ms);
    res.once("close", onClose);
  });
}

function sendJson(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { ...headers, "content-type": "application/json", "content-length": Buffer.byteLength(text) });
  res.end(text);
}

function sendError(res: ServerResponse, status: number, message: string, headers?: Record<string, string>, param: string | null = null, errorCode?: string): void {
  const code = errorCode ?? (status === 401 ? "invalid_api_key" : status === 429 ? "rate_limit_exceeded" : null);
  const type = status >= 500 ? "server_error" : status === 429 ? "rate_limit_error" : "invalid_request_error";
  sendJson(res, status, { error: { message, type, code, param } }, headers);
}

async function readBody(req: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString("utf8");
}

/** Message content is a string, null, or an array of parts of which text parts count. */
function textOf(content: unknown): string {
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) return "";
  return content.map((part) => (typeof part?.text === "string" ? part.text : "")).join("");
}

/** About four characters per token, never zero, like a real tokenizer's order of magnitude. */
function roughTokens(chars: number): number {
  return Math.max(1, Math.ceil(chars / 4));
}

function nowSeconds(): number {
  return Math.floor(Date.now() / 1000);
}
