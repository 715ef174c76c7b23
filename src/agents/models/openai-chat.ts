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
import { sleepUnlessAborted as sleep, type AbortLike } from "../../util/run-abort.js";
import { alternating } from "./alternating.js";
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
    /** The refusal is of a request longer than the model's context window. */
    readonly contextOverflow = false,
  ) {
    super(message);
  }
}

/**
 * How servers refuse a request longer than the context window: OpenAI, Groq, OpenRouter and vLLM
 * ("maximum context length is N tokens", code context_length_exceeded), llama.cpp ("exceeds the
 * available context size", exceed_context_size_error), LM Studio ("context length of only N
 * tokens"), Mistral ("too large for model with N maximum context length"), Anthropic through a
 * proxy ("prompt is too long"), newer vLLM ("longer than the maximum model length").
 */
const CONTEXT_OVERFLOW = /context_length_exceeded|exceed_context_size|context (?:length|size|window)|prompt is too long|maximum model length|reduce the length of the (?:messages|prompt|input)/i;

interface ChatCompletion {
  choices?: Array<{
    message?: { content?: string | null | unknown[]; tool_calls?: Array<{ id: string; type?: string; function?: { name: string; arguments?: string } }> };
    finish_reason?: string | null;
  }>;
  usage?: { prompt_tokens?: number; completion_tokens?: number };
  /** Some servers answer 200 with an error instead of choices (LM Studio on an unknown path). */
  error?: unknown;
}

export function createOpenAiChatProvider(opts: OpenAiChatOptions): ModelProvider {
  const endpoint = new URL(`${opts.baseUrl.replace(/\/+$/, "")}/chat/completions`);
  const agent = new (endpoint.protocol === "https:" ? https.Agent : http.Agent)({ keepAlive: true, maxSockets: 64 });
  const headers: http.OutgoingHttpHeaders = { "content-type": "application/json", accept: "application/json", ...(opts.apiKey ? { authorization: `Bearer ${opts.apiKey}` } : {}) };
  const maxRetries = opts.maxRetries ?? 2;
  // Ollama's and LM Studio's OpenAI endpoints are under /v1: a baseUrl without it gets a 404, or
  // from LM Studio a 200 with an error. Said beside such an error (path only: no credentials).
  const baseUrlHint = /\/v\d/.test(endpoint.pathname) ? "" : ` (POST ${endpoint.pathname}: baseUrl has no /v1, under which OpenAI-compatible servers answer)`;
  // Servers and proxies echo a rejected key in their error ("Incorrect API key provided: sk-…");
  // the message ends up in logs and, as the run's error notice, in the chat.
  const scrub = (text: string) => (opts.apiKey && opts.apiKey.length >= 6 ? text.split(opts.apiKey).join("[redacted]") : text);

  async function attempt(body: Buffer, signal: AbortLike | undefined): Promise<ChatCompletion> {
    const res = await postBody(endpoint, body, { agent, headers, signal, timeoutMs: opts.timeoutMs, maxResponseBytes: MAX_RESPONSE_BYTES });
    if (res.status < 200 || res.status > 299) {
      const overflow = (res.status === 400 || res.status === 413) && CONTEXT_OVERFLOW.test(res.text.slice(0, 2000));
      throw new StatusError(res.status, `${res.status} ${scrub(errorMessageOf(res.text) ?? "status code (no body)")}`, res.headers, overflow);
    }
    try {
      return JSON.parse(res.text) as ChatCompletion;
    } catch {
      // Scrubbed before it is cut: a key across the cut would leave its start in the message.
      throw new ModelError(`model returned invalid JSON: ${scrub(res.text).slice(0, 200)}`);
    }
  }

  // Models whose server refused the tools, or turns that do not alternate: later calls ask them
  // without tools, or with alternating turns (see refusesTools, refusesRoles).
  const toolless = new Set<string>();
  const strictRoles = new Set<string>();

  return {
    id: opts.id,
    async complete(req: CompletionRequest): Promise<CompletionResult> {
      const shaped = (): Buffer => {
        const tools = toolless.has(req.model) ? [] : req.tools;
        const strict = strictRoles.has(req.model);
        return Buffer.from(chatRequestBody(tools === req.tools && !strict ? req : { ...req, tools, messages: strict ? alternating(req.messages) : req.messages }), "utf8");
      };
      // What the server refused that the chat can do without: each is learnt once per model.
      const adapted = (err: unknown): boolean => {
        if (req.tools.length > 0 && !toolless.has(req.model) && refusesTools(err)) toolless.add(req.model);
        else if (!strictRoles.has(req.model) && refusesRoles(err)) strictRoles.add(req.model);
        else return false;
        return true;
      };
      let body = shaped();
      for (let retry = 0; ; retry++) {
        try {
          const res = await attempt(body, req.signal);
          const choice = res.choices?.[0];
          if (!choice) {
            const serverError = res.error === undefined ? undefined : errorMessageOf(JSON.stringify({ error: res.error }));
            if (serverError) throw new ModelError(`model call failed (${opts.id}/${req.model}): ${scrub(serverError)}${baseUrlHint}`);
            throw new ModelError(`model ${req.model} returned no choices`);
          }
          const toolCalls = (choice.message?.tool_calls ?? []).flatMap((c) =>
            (c.type ?? "function") === "function" && c.function ? [{ id: c.id, name: c.function.name, arguments: c.function.arguments ?? "{}" }] : [],
          );
          return {
            content: withoutThinking(textOf(choice.message?.content)),
            toolCalls,
            usage: { input: res.usage?.prompt_tokens ?? 0, output: res.usage?.completion_tokens ?? 0 },
            finishReason: choice.finish_reason ?? "stop",
          };
        } catch (err) {
          if (req.signal?.aborted) throw req.signal.reason ?? err;
          if (err instanceof ModelError) throw err;
          // A model or server without tool calling refuses every request that offers tools, and a
          // strict chat template every conversation whose turns do not alternate: the chat still
          // works without tools (sessions_* unavailable to that model), and with joined turns.
          if (adapted(err)) {
            body = shaped();
            retry--;
            continue;
          }
          const delay = retry < maxRetries ? retryDelay(err, retry) : undefined;
          if (delay !== undefined) {
            await sleep(delay, req.signal);
            if (req.signal?.aborted) throw req.signal.reason ?? err;
            continue;
          }
          const status = err instanceof StatusError ? err.status : undefined;
          const detail = err instanceof StatusError ? `${err.message}${status === 404 ? baseUrlHint : ""}` : `Connection error: ${err instanceof Error ? err.message : String(err)}`;
          const contextOverflow = err instanceof StatusError && err.contextOverflow;
          throw new ModelError(`model call failed (${opts.id}/${req.model}${status ? `, HTTP ${status}` : ""}): ${detail}`, { cause: err, contextOverflow });
        }
      }
    },
  };
}

/**
 * The answer's text. Most servers send a string (null beside tool calls); some send an array of
 * parts (Mistral's reasoning models: a `thinking` part, then `text` parts), of which the text
 * parts are the answer.
 */
function textOf(content: unknown): string {
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) return "";
  return content.map((p) => (p && typeof p === "object" && (p as { type?: unknown }).type === "text" && typeof (p as { text?: unknown }).text === "string" ? (p as { text: string }).text : "")).join("");
}

/**
 * The answer without a reasoning model's thoughts. Servers without a reasoning parser (Ollama's
 * and LM Studio's OpenAI endpoints, vLLM without `--reasoning-parser`…) put DeepSeek-R1's or
 * Qwen3's `<think>…</think>` in `content`, or only its `</think>` when the chat template opened
 * the block; the thoughts would be sent to the chat and fed back as history. A `<think>` never
 * closed (the answer cut off while thinking) leaves no answer.
 */
function withoutThinking(content: string): string {
  const open = /^\s*<(think|thinking)>/i.exec(content);
  if (open) {
    const rest = content.slice(open[0].length);
    const close = new RegExp(`</${open[1]}>`, "i").exec(rest);
    return close ? rest.slice(close.index + close[0].length).trimStart() : "";
  }
  const close = content.indexOf("</think>");
  return close < 0 ? content : content.slice(close + "</think>".length).trimStart();
}

/**
 * A 400 that refuses tool calling itself, not one call's tools: Ollama's "<model> does not
 * support tools", vLLM's '"auto" tool choice requires --enable-auto-tool-choice…'.
 */
function refusesTools(err: unknown): boolean {
  return err instanceof StatusError && err.status === 400 && /does not support tools|tool choice requires|tools? (?:is|are) not supported/i.test(err.message);
}

/**
 * A 400 of a strict chat template (Mistral's, Gemma's, served by vLLM or llama.cpp): "After the
 * optional system message, conversation roles must alternate user/assistant/user/assistant...".
 */
function refusesRoles(err: unknown): boolean {
  return err instanceof StatusError && err.status === 400 && /roles must alternate/i.test(err.message);
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
