/**
 * `api: "openai-chat"`: any OpenAI-compatible Chat Completions server (OpenAI, Ollama, vLLM,
 * llama.cpp, LM Studio…): `POST {baseUrl}/chat/completions` (interfaces §4).
 *
 * A small client on node:http(s) with keep-alive (util/http-post.ts), not the `openai` SDK: the
 * SDK and the fetch stack under it would have capped the daemon below 1,500 messages/s on one
 * core (bench/). Behaviour kept from the SDK: a timeout per attempt, two
 * retries with backoff on connection errors, 408/409/429/5xx (honouring `retry-after-ms`,
 * `retry-after` and `x-should-retry`), abort through the run's signal, and error messages of the
 * form `<status> <server message>`.
 */
import http from "node:http";
import https from "node:https";
import { postBody } from "../../util/http-post.js";
import { chatRequestBody } from "./request-body.js";
import { ModelError, type CompletionRequest, type CompletionResult, type ModelProvider } from "./provider.js";

export interface OpenAiChatOptions {
  id: string;
  baseUrl: string;
  apiKey?: string;
  timeoutMs: number;
  /** Retries after the first attempt (default 2, like the SDK). */
  maxRetries?: number;
}

const INITIAL_RETRY_MS = 500;
const MAX_RETRY_MS = 8000;
const MAX_RESPONSE_BYTES = 64 * 1024 * 1024;

/** An HTTP answer that is not a 2xx, with the server's error message. */
class StatusError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly headers: http.IncomingHttpHeaders,
  ) {
    super(message);
  }
}

interface ChatCompletion {
  choices?: Array<{
    message?: { content?: string | null; tool_calls?: Array<{ id: string; type?: string; function?: { name: string; arguments?: string } }> };
    finish_reason?: string | null;
  }>;
  usage?: { prompt_tokens?: number; completion_tokens?: number };
}

export function createOpenAiChatProvider(opts: OpenAiChatOptions): ModelProvider {
  const endpoint = new URL(`${opts.baseUrl.replace(/\/+$/, "")}/chat/completions`);
  const agent = new (endpoint.protocol === "https:" ? https.Agent : http.Agent)({ keepAlive: true, maxSockets: 64 });
  const headers: http.OutgoingHttpHeaders = { "content-type": "application/json", accept: "application/json", ...(opts.apiKey ? { authorization: `Bearer ${opts.apiKey}` } : {}) };
  const maxRetries = opts.maxRetries ?? 2;
  // Servers and proxies echo a rejected key in their error ("Incorrect API key provided: sk-…");
  // the message ends up in logs and, as the run's error notice, in the chat.
  const scrub = (text: string) => (opts.apiKey && opts.apiKey.length >= 6 ? text.split(opts.apiKey).join("[redacted]") : text);

  async function attempt(body: Buffer, signal: AbortSignal | undefined): Promise<ChatCompletion> {
    const res = await postBody(endpoint, body, { agent, headers, signal, timeoutMs: opts.timeoutMs, maxResponseBytes: MAX_RESPONSE_BYTES });
    if (res.status < 200 || res.status > 299) throw new StatusError(res.status, `${res.status} ${scrub(errorMessageOf(res.text) ?? "status code (no body)")}`, res.headers);
    try {
      return JSON.parse(res.text) as ChatCompletion;
    } catch {
      throw new ModelError(`model returned invalid JSON: ${res.text.slice(0, 200)}`);
    }
  }

  return {
    id: opts.id,
    async complete(req: CompletionRequest): Promise<CompletionResult> {
      const body = Buffer.from(chatRequestBody(req), "utf8");
      for (let retry = 0; ; retry++) {
        try {
          const res = await attempt(body, req.signal);
          const choice = res.choices?.[0];
          if (!choice) throw new ModelError(`model ${req.model} returned no choices`);
          const toolCalls = (choice.message?.tool_calls ?? []).flatMap((c) =>
            (c.type ?? "function") === "function" && c.function ? [{ id: c.id, name: c.function.name, arguments: c.function.arguments ?? "{}" }] : [],
          );
          return {
            content: choice.message?.content ?? "",
            toolCalls,
            usage: { input: res.usage?.prompt_tokens ?? 0, output: res.usage?.completion_tokens ?? 0 },
            finishReason: choice.finish_reason ?? "stop",
          };
        } catch (err) {
          if (req.signal?.aborted) throw req.signal.reason ?? err;
          if (err instanceof ModelError) throw err;
          const delay = retry < maxRetries ? retryDelay(err, retry) : undefined;
          if (delay !== undefined) {
            await sleep(delay, req.signal);
            if (req.signal?.aborted) throw req.signal.reason ?? err;
            continue;
          }
          const status = err instanceof StatusError ? err.status : undefined;
          const detail = err instanceof StatusError ? err.message : `Connection error: ${err instanceof Error ? err.message : String(err)}`;
          throw new ModelError(`model call failed (${opts.id}/${req.model}${status ? `, HTTP ${status}` : ""}): ${detail}`, { cause: err });
        }
      }
    },
  };
}

/** The SDK's retry rule: connection errors and 408/409/429/5xx, unless the server says otherwise. */
function retryDelay(err: unknown, retry: number): number | undefined {
  if (err instanceof StatusError) {
    const should = header(err.headers, "x-should-retry");
    if (should === "false") return undefined;
    if (should !== "true" && !(err.status === 408 || err.status === 409 || err.status === 429 || err.status >= 500)) return undefined;
    const ms = Number(header(err.headers, "retry-after-ms"));
    if (Number.isFinite(ms) && ms >= 0 && ms < 60_000) return ms;
    const after = header(err.headers, "retry-after");
    if (after !== undefined) {
      const s = Number(after);
      const fromHeader = Number.isFinite(s) ? s * 1000 : Date.parse(after) - Date.now();
      if (Number.isFinite(fromHeader) && fromHeader >= 0 && fromHeader < 60_000) return fromHeader;
    }
  }
  const base = Math.min(INITIAL_RETRY_MS * 2 ** retry, MAX_RETRY_MS);
  return base * (1 - Math.random() * 0.25);
}

function header(headers: http.IncomingHttpHeaders, name: string): string | undefined {
  const v = headers[name];
  return Array.isArray(v) ? v[0] : v;
}

/** `{"error":{"message":…}}` (OpenAI), `{"error":"…"}` or `{"message":…}` (other servers), else the text. */
function errorMessageOf(text: string): string | undefined {
  if (!text) return undefined;
  try {
    const body = JSON.parse(text) as { error?: unknown; message?: unknown };
    if (typeof body.error === "object" && body.error && typeof (body.error as { message?: unknown }).message === "string") return (body.error as { message: string }).message;
    if (typeof body.error === "string") return body.error;
    if (typeof body.message === "string") return body.message;
    return text.slice(0, 500);
  } catch {
    return text.slice(0, 500);
  }
}

function sleep(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal?.removeEventListener("abort", done);
      resolve();
    }
    signal?.addEventListener("abort", done, { once: true });
  });
}
