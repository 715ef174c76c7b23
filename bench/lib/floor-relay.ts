/**
 * The wire alone: a relay with none of Switchboard's pipeline in it — it long-polls the Telegram
 * Bot API fake, makes one model call per update and one sendMessage per reply, over a keep-alive
 * node:http agent and the daemon's POST helper; no store, no policy, no crash safety.
 * What it costs per message is the floor any daemon doing this workload in Node pays on this
 * host; the daemon's figures beside it show what the rest of the pipeline adds.
 *
 * Run as a child process with one JSON argument (RelayOptions). `modelBodyBytes` pads the model
 * request to the daemon's size (its system prompt, tools and history: ~5 KB in the bench);
 * `appendsPerMessage` writes that many synchronous JSONL lines per message to a per-chat file in
 * `dir` (the daemon's three transcript lines and one send-journal line are four).
 */
import { openSync, writeSync } from "node:fs";
import http from "node:http";
import path from "node:path";
import { postBody } from "../../src/util/http-post.js";

export interface RelayOptions {
  apiRoot: string;
  token: string;
  modelBaseUrl: string;
  modelBodyBytes: number;
  appendsPerMessage: number;
  dir: string;
}

interface Update {
  update_id: number;
  message?: { chat: { id: number }; text?: string };
}

const o = JSON.parse(process.argv[2]) as RelayOptions;
const agent = new http.Agent({ keepAlive: true, maxSockets: 64 });
const method = (name: string) => new URL(`./bot${o.token}/${name}`, o.apiRoot);
const completions = new URL(`${o.modelBaseUrl}/chat/completions`);
const padding = "x".repeat(o.modelBodyBytes);
const files = new Map<number, number>();

/** The daemon's own POST helper, so the floor and the daemon pay the same HTTP client per call. */
async function post(url: URL, body: unknown): Promise<unknown> {
  const res = await postBody(url, Buffer.from(JSON.stringify(body)), { agent, headers: { "content-type": "application/json" }, timeoutMs: 60_000, maxResponseBytes: 16 * 2 ** 20 });
  try {
    return JSON.parse(res.text);
  } catch (err) {
    throw new Error(`${url}: unparseable answer (${res.status})`, { cause: err });
  }
}

function append(chat: number, text: string): void {
  let fd = files.get(chat);
  if (fd === undefined) {
    fd = openSync(path.join(o.dir, `${chat}.jsonl`), "a");
    files.set(chat, fd);
  }
  for (let i = 0; i < o.appendsPerMessage; i++) {
    writeSync(fd, `${JSON.stringify({ type: "message", id: String(i), timestamp: new Date().toISOString(), message: { role: "user", content: text } })}\n`);
  }
}

async function relay(u: Update): Promise<void> {
  const text = u.message?.text;
  if (!u.message || text === undefined) return;
  if (o.appendsPerMessage > 0) append(u.message.chat.id, text);
  const messages = [...(padding ? [{ role: "system", content: padding }] : []), { role: "user", content: text }];
  const completion = (await post(completions, { model: "fake", messages })) as { choices: Array<{ message: { content: string } }> };
  await post(method("sendMessage"), { chat_id: u.message.chat.id, text: completion.choices[0].message.content });
}

let offset = 0;
process.send?.({ ready: true });
for (;;) {
  const res = (await post(method("getUpdates"), { offset, timeout: 30, allowed_updates: ["message"] })) as { result?: Update[] };
  if (!Array.isArray(res.result)) throw new Error(`floor relay: getUpdates answered ${JSON.stringify(res)}`);
  for (const u of res.result) {
    offset = Math.max(offset, u.update_id + 1);
    relay(u).catch((err: unknown) => console.error(`floor relay: update ${u.update_id}: ${err instanceof Error ? err.message : String(err)}`));
  }
}
