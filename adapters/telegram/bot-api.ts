/**
 * The Bot API calls on the per-message path — sendMessage (one per reply), getUpdates (the long
 * poll) and sendChatAction (typing) — made with a plain POST (src/util/http-post.ts) instead of
 * telegraf's callApi, whose node-fetch stack (Request, Headers, body streams) cost about twice the
 * CPU of the request itself; without it the daemon drained ~11 % more messages a second (bench/).
 * telegraf stays the transport of the start-up calls, and failures are telegraf's own
 * TelegramError with the same fields, so errors.ts treats both alike.
 */
import http from "node:http";
import { TelegramError } from "telegraf";
import { postBody } from "../../src/util/http-post.js";
import type { AbortLike } from "../../src/util/run-abort.js";
import { redactToken } from "./errors.js";

/** telegraf's request timeout, kept: the poller's own watchdog ends a silent long poll sooner. */
const REQUEST_TIMEOUT_MS = 500_000;
/** A getUpdates batch is at most 100 updates; anything near this is not the Bot API. */
const MAX_RESPONSE_BYTES = 32 * 1024 * 1024;
const HEADERS: http.OutgoingHttpHeaders = { "content-type": "application/json", connection: "keep-alive" };

export interface BotApiCallOptions {
  agent: http.Agent;
  signal?: AbortLike;
  /** See PostOptions.onWire: runs just before the request's bytes go to the socket. */
  onWire?: () => void;
}

export type BotApiCall = <T>(method: string, payload: object, opts: BotApiCallOptions) => Promise<T>;

/** `apiRoot` ends with "/". The token is part of every URL, never of an error message. */
export function createBotApi(apiRoot: string, token: string): BotApiCall {
  const urls = new Map<string, URL>();
  const urlFor = (method: string) => {
    let url = urls.get(method);
    if (!url) urls.set(method, (url = new URL(`./bot${token}/${method}`, apiRoot)));
    return url;
  };
  return async <T>(method: string, payload: object, opts: BotApiCallOptions): Promise<T> => {
    const body = Buffer.from(JSON.stringify(payload), "utf8");
    // Spelt out, not `{ ...opts, headers, … }` (a new hidden class per call on Node 20: src/util/http-post.ts).
    const res = await postBody(urlFor(method), body, { agent: opts.agent, signal: opts.signal, onWire: opts.onWire, headers: HEADERS, timeoutMs: REQUEST_TIMEOUT_MS, maxResponseBytes: MAX_RESPONSE_BYTES });
    // As telegraf: a 5xx is an error by its status, whatever the body (often a proxy's HTML page).
    if (res.status >= 500) throw new TelegramError({ error_code: res.status, description: http.STATUS_CODES[res.status] ?? "server error" }, { method });
    // The Bot API never redirects; a proxy or a mistyped root does, and repeating the call cannot help.
    if (res.status >= 300 && res.status < 400) {
      const to = res.headers.location ? ` to ${redactToken(res.headers.location, token)}` : "";
      throw new TelegramError({ error_code: res.status, description: `the API root answered with a redirect${to}: set channels.telegram.apiRoot to the final address` }, { method });
    }
    let data: { ok?: unknown; result?: unknown; error_code?: unknown; description?: unknown; parameters?: unknown };
    try {
      data = JSON.parse(res.text) as typeof data;
    } catch {
      const what = `HTTP ${res.status} answered with a body that is not JSON: ${JSON.stringify(res.text.slice(0, 100))}`;
      // A proxy's 4xx page (413 body too large, 404 wrong root…) refuses the call as surely as the
      // API would; as a plain Error it would count as transport and be retried in vain.
      if (res.status >= 400) throw new TelegramError({ error_code: res.status, description: what }, { method });
      throw new Error(`${method}: ${what}`);
    }
    if (data?.ok === true) return data.result as T;
    const code = typeof data?.error_code === "number" ? data.error_code : res.status;
    const description = typeof data?.description === "string" ? data.description : `HTTP ${res.status} without an error description`;
    const parameters = typeof data?.parameters === "object" && data.parameters !== null ? (data.parameters as TelegramError["response"]["parameters"]) : undefined;
    throw new TelegramError({ error_code: code, description, ...(parameters ? { parameters } : {}) }, { method });
  };
}
