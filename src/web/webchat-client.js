// The web chat page's logic without the DOM, so that the same code runs in Node's tests:
// - GatewayConnection speaks the gateway protocol (interfaces §3) and reconnects. A request made
//   while disconnected waits for the next connection, and one left unanswered when a connection
//   drops is sent again on the next: every request the page makes is safe to repeat (`chat.send`
//   carries an idempotencyKey, which the daemon dedupes).
// - ChatView is one session's conversation as the page shows it. After every (re)connect it is
//   rebuilt from the transcript, so what was typed or answered while the page was offline is
//   neither lost nor shown twice.

/** Reconnect delays; the last one repeats. */
const RETRY_MS = [500, 1000, 2000, 5000, 10000];
/** Shown for a failed run whose error says nothing. */
const RUN_FAILED = "The agent failed.";
/** Admin too: the page is its owner's, and the owner's /send, /new and /reset need admin (interfaces §3). */
export const PAGE_SCOPES = ["operator.read", "operator.write", "operator.admin"];

export class GatewayConnection {
  #url;
  #token;
  #WebSocket;
  #retryMs;
  #handlers;
  /** @type {WebSocket | null} */
  #ws = null;
  #connected = false;
  /** Stopped by the page, or refused for its token until a new one is given. */
  #halted = false;
  #attempt = 0;
  /** @type {ReturnType<typeof setTimeout> | undefined} */
  #timer = undefined;
  #nextId = 1;
  /**
   * Requests not yet answered, in the order they were made.
   * @type {Map<string, {frame: string, resolve: (payload: any) => void, reject: (err: Error) => void}>}
   */
  #waiting = new Map();
  /** @type {{defaultAgentId?: string, scope?: string} | undefined} */
  #sessionDefaults = undefined;
  /** The gateway's `policy.maxPayload` from its last handshake: a larger frame is refused. */
  #maxPayload = Infinity;

  /**
   * @param {{url: string, token?: string | null, WebSocket?: any, retryMs?: number[],
   *   onStatus?: (text: string) => void, onReady?: () => void, onEvent?: (name: string, payload: any) => void,
   *   onUnauthorized?: () => void}} options
   */
  constructor({ url, token, WebSocket = globalThis.WebSocket, retryMs = RETRY_MS, onStatus, onReady, onEvent, onUnauthorized }) {
    this.#url = url;
    this.#token = token || undefined;
    this.#WebSocket = WebSocket;
    this.#retryMs = retryMs;
    const ignore = () => {};
    this.#handlers = { onStatus: onStatus ?? ignore, onReady: onReady ?? ignore, onEvent: onEvent ?? ignore, onUnauthorized: onUnauthorized ?? ignore };
  }

  get connected() {
    return this.#connected;
  }

  /**
   * The daemon's session defaults from its last handshake (which agent `main` is, and the scope).
   * @returns {{defaultAgentId?: string, scope?: string} | undefined}
   */
  get sessionDefaults() {
    return this.#sessionDefaults;
  }

  start() {
    this.#halted = false;
    this.#open();
  }

  stop() {
    this.#halted = true;
    clearTimeout(this.#timer);
    this.#drop();
  }

  /**
   * Connect again, now with this token (after the gateway refused the previous one).
   * @param {string | null | undefined} token
   */
  setToken(token) {
    this.#token = token || undefined;
    clearTimeout(this.#timer);
    this.#drop();
    this.start();
  }

  /**
   * @param {string} method
   * @param {Record<string, unknown>} params
   * @returns {Promise<any>}
   */
  request(method, params) {
    const id = String(this.#nextId++);
    const frame = JSON.stringify({ type: "req", id, method, params });
    return new Promise((resolve, reject) => {
      this.#waiting.set(id, { frame, resolve, reject });
      if (this.#connected && this.#ws) this.#send(this.#ws, id);
    });
  }

  /**
   * Send a waiting request, unless it is larger than the gateway takes: one far larger makes the
   * gateway close the connection, and sending it again on every reconnect would never end.
   * @param {WebSocket} ws
   * @param {string} id
   */
  #send(ws, id) {
    const request = /** @type {{frame: string, reject: (err: Error) => void}} */ (this.#waiting.get(id));
    const bytes = new TextEncoder().encode(request.frame).length;
    if (bytes > this.#maxPayload) {
      this.#waiting.delete(id);
      request.reject(new Error(`message too large: ${bytes} bytes (the gateway takes at most ${this.#maxPayload})`));
      return;
    }
    ws.send(request.frame);
  }

  #open() {
    this.#handlers.onStatus("Connecting…");
    const ws = new this.#WebSocket(this.#url);
    this.#ws = ws;
    ws.onmessage = (/** @type {MessageEvent} */ ev) => this.#onFrame(ws, ev.data);
    ws.onclose = () => this.#onClose(ws);
    // A failed connection is followed by its close, which schedules the retry.
    ws.onerror = () => {};
  }

  /** Forget the current socket without reacting to its close. */
  #drop() {
    const ws = /** @type {WebSocket | null} */ (this.#ws);
    this.#ws = null;
    this.#connected = false;
    // Its close and any late frame are ignored: it is no longer the current socket.
    ws?.close();
  }

  /**
   * @param {WebSocket} ws
   * @param {unknown} data
   */
  #onFrame(ws, data) {
    if (ws !== this.#ws) return;
    let frame;
    try {
      frame = JSON.parse(String(data));
    } catch {
      return;
    }
    if (frame.type === "event" && frame.event === "connect.challenge") {
      ws.send(JSON.stringify({ type: "req", id: "connect", method: "connect", params: {
        minProtocol: 3, maxProtocol: 4, role: "operator", scopes: PAGE_SCOPES,
        client: { id: "switchboard-webchat", version: "1", platform: "browser", mode: "webchat" },
        auth: this.#token ? { token: this.#token } : {},
      } }));
    } else if (frame.type === "res" && frame.id === "connect") {
      this.#onConnectAnswer(ws, frame);
    } else if (frame.type === "res") {
      const waiting = this.#waiting.get(frame.id);
      if (!waiting) return;
      this.#waiting.delete(frame.id);
      if (frame.ok) waiting.resolve(frame.payload);
      else waiting.reject(Object.assign(new Error(frame.error?.message ?? "request failed"), frame.error));
    } else if (frame.type === "event") {
      this.#handlers.onEvent(frame.event, frame.payload);
    }
  }

  /**
   * @param {WebSocket} ws
   * @param {{ok: boolean, payload?: {snapshot?: {sessionDefaults?: {defaultAgentId?: string, scope?: string}}, policy?: {maxPayload?: number}}, error?: {code?: string, message?: string}}} frame
   */
  #onConnectAnswer(ws, frame) {
    if (frame.ok) {
      this.#sessionDefaults = frame.payload?.snapshot?.sessionDefaults;
      this.#maxPayload = frame.payload?.policy?.maxPayload ?? Infinity;
      this.#connected = true;
      this.#attempt = 0;
      this.#handlers.onStatus("Connected");
      for (const id of [...this.#waiting.keys()]) this.#send(ws, id);
      this.#handlers.onReady();
    } else if (frame.error?.code === "UNAUTHORIZED") {
      // Retrying the same token cannot succeed: wait for the page to supply another.
      this.#halted = true;
      this.#handlers.onStatus("The gateway needs a token");
      this.#handlers.onUnauthorized();
    } else {
      this.#handlers.onStatus(`Refused: ${frame.error?.message ?? "unknown error"}`);
    }
  }

  /** @param {WebSocket} ws */
  #onClose(ws) {
    if (ws !== this.#ws) return;
    this.#connected = false;
    if (this.#halted) return;
    const delay = this.#retryMs[Math.min(this.#attempt++, this.#retryMs.length - 1)];
    this.#handlers.onStatus("Disconnected — reconnecting…");
    this.#timer = setTimeout(() => this.#open(), delay);
  }
}

/**
 * Do two keys name the same session? As the daemon resolves them: keys are lowercase, and `main`
 * is the *default* agent's `agent:<id>:main` only — another agent's main session is another
 * conversation (R1). Under `session.scope` "global" every agent's main is the one `main` (R6).
 * @param {string} a
 * @param {string} b
 * @param {{defaultAgentId?: string, scope?: string} | undefined} defaults the daemon's, from its handshake
 */
function sameSession(a, b, defaults) {
  const canonical = (/** @type {string} */ key) => {
    const k = key.trim().toLowerCase();
    if (defaults?.scope === "global" && (k === "main" || k === "global" || /^agent:[^:]+:main$/.test(k))) return "main";
    return k === "main" ? `agent:${defaults?.defaultAgentId ?? "main"}:main` : k;
  };
  return canonical(a) === canonical(b);
}

/**
 * The text of a transcript message: its string content, or its text blocks joined.
 * @param {{content?: string | Array<{type: string, text?: string}>} | undefined} message
 * @returns {string}
 */
function textOf(message) {
  if (typeof message?.content === "string") return message.content;
  return (message?.content || []).filter((b) => b.type === "text").map((b) => b.text ?? "").join("");
}

/**
 * A reply the agent chose not to give: a silence token (src/util/skip-token.ts), bare or dressed in
 * marks. The transcript keeps it; no chat is sent it, so the page does not show it either.
 */
const SILENT = /^[\s\p{P}`~^>]*(?:NO_REPLY|REPLY_SKIP|ANNOUNCE_SKIP)[\s\p{P}`~^>]*$/u;

/**
 * @typedef {{role: "user" | "assistant" | "error", text: string, pending?: boolean, runId?: string}} ChatItem
 * @typedef {{runId?: string, sessionKey: string, state: "delta" | "final" | "error", message?: {content?: any}, errorMessage?: string}} ChatEvent
 */
export class ChatView {
  #conn;
  #onChange;
  #sessionKey;
  /** @type {ChatItem[]} */
  items = [];
  /**
   * Runs whose reply is not shown yet: runId → the message sent, whether the gateway has answered
   * its `chat.send`, and whether it was already waiting when the last reload began.
   * @type {Map<string, {text: string, accepted: boolean, carried: boolean}>}
   */
  #awaiting = new Map();
  /**
   * Runs whose reply is shown already, read from the transcript by the last reloads or given in a
   * command's answer: their `chat` event is a repeat.
   */
  #shown = new Set();
  /** `chat.send` requests not yet answered. */
  #sends = new Set();
  #generation = 0;
  #reloading = false;
  /**
   * `chat` events that came during a reload, applied once it has rendered.
   * @type {ChatEvent[]}
   */
  #buffered = [];

  /** @param {GatewayConnection} conn */
  constructor(conn, { sessionKey = "main", onChange = () => {} } = {}) {
    this.#conn = conn;
    this.#sessionKey = sessionKey;
    this.#onChange = onChange;
  }

  /**
   * Show another session.
   * @param {string} sessionKey
   */
  open(sessionKey) {
    this.#sessionKey = sessionKey;
    this.#awaiting.clear();
    this.#shown.clear();
    this.#buffered = [];
    return this.reload();
  }

  /**
   * Rebuild from the transcript: on every (re)connect, and on opening a session. Sends still
   * unanswered are answered first (the connection sends them again), so their messages are in it.
   */
  async reload() {
    const generation = ++this.#generation;
    this.#reloading = true;
    for (const run of this.#awaiting.values()) run.carried = true;
    await Promise.allSettled([...this.#sends]);
    // Asked before the history is read: a run finished by then has its reply in what is read.
    // Only a send the gateway has answered has a run to ask about: one refused has its error event
    // coming, one made meanwhile may not have started yet.
    const started = [...this.#awaiting].filter(([, run]) => run.accepted).map(([runId]) => runId);
    const runs = await Promise.all(started.map((runId) => this.#conn.request("agent.wait", { runId, timeoutMs: 0 }).catch(() => undefined)));
    const failed = [];
    for (const run of runs) {
      // A "timeout" without an end is a run still queued or going: its `chat` event is to come.
      if (!run || (run.status === "timeout" && !run.endedAt && !run.unknown)) continue;
      this.#awaiting.delete(run.runId);
      // A run the daemon no longer knows (it restarted, or the run ended long ago) left in the
      // transcript all there is of it.
      if (run.status === "ok" || run.unknown) this.#shown.add(run.runId);
      else failed.push({ role: "error", text: run.error || RUN_FAILED });
    }
    // A send answered by now is in the history read next; one made meanwhile is shown from here.
    const accepted = new Set([...this.#awaiting].filter(([, run]) => run.accepted).map(([runId]) => runId));
    let items;
    let sessionKey = this.#sessionKey;
    try {
      const history = await this.#conn.request("chat.history", { sessionKey, limit: 200 });
      // The key as the daemon resolved it: a sessionId (or another spelling) typed into the page
      // names the session, but its `chat` events carry the key, and a `/new` changes the sessionId.
      sessionKey = history.sessionKey;
      items = history.messages.flatMap((/** @type {{role: string, content: any}} */ m) => (m.role === "user" || (m.role === "assistant" && textOf(m) && !SILENT.test(textOf(m))) ? [{ role: m.role, text: textOf(m) }] : []));
    } catch (caught) {
      const err = /** @type {Error & {code?: string}} */ (caught);
      items = err.code === "NOT_FOUND" ? [] : [{ role: "error", text: err.message }];
    }
    if (generation !== this.#generation) return;
    this.#sessionKey = sessionKey;
    const waiting = [...this.#awaiting].flatMap(([runId, run]) => [
      ...(accepted.has(runId) ? [] : [{ role: "user", text: run.text }]),
      { role: "assistant", text: "…", pending: true, runId },
    ]);
    this.items = [...items, ...failed, ...waiting];
    this.#reloading = false;
    this.#onChange();
    for (const event of this.#buffered.splice(0)) this.onChat(event);
  }

  /**
   * Send a message; its reply arrives as a `chat` event.
   * @param {string} text
   */
  async send(text) {
    const message = text.trim();
    if (!message) return;
    const runId = crypto.randomUUID();
    this.#awaiting.set(runId, { text: message, accepted: false, carried: false });
    this.items.push({ role: "user", text: message }, { role: "assistant", text: "…", pending: true, runId });
    this.#onChange();
    const sending = this.#conn.request("chat.send", { sessionKey: this.#sessionKey, message, idempotencyKey: runId });
    this.#sends.add(sending);
    try {
      const answer = await sending;
      const run = this.#awaiting.get(runId);
      if (run && answer?.command) {
        // A command is answered at once, with its reply, and has no run to wait for; its `chat`
        // event follows the answer but may be lost with a connection (a repeat after a reconnect
        // is answered from the first time), so the answer shows it. A reload in progress rebuilds
        // the conversation without it (commands are not in the transcript): the event shows it.
        this.#awaiting.delete(runId);
        if (!this.#reloading) {
          this.#shown.add(runId);
          this.items = this.items.map((item) => (item.pending && item.runId === runId ? { role: "assistant", text: answer.reply ?? "" } : item));
          this.#onChange();
        }
      } else if (run) run.accepted = true;
    } catch (err) {
      // Not when another session was opened meanwhile: the error belongs to the one it was sent in.
      if (this.#awaiting.has(runId)) this.onChat({ runId, sessionKey: this.#sessionKey, state: "error", errorMessage: /** @type {Error} */ (err).message });
    } finally {
      this.#sends.delete(sending);
    }
  }

  /**
   * A `chat` event from the gateway.
   * @param {ChatEvent} event
   */
  onChat(event) {
    if (!sameSession(event.sessionKey, this.#sessionKey, this.#conn.sessionDefaults)) return;
    if (this.#reloading) {
      this.#buffered.push(event);
      return;
    }
    const { runId } = event;
    if (runId && this.#shown.has(runId)) return;
    if (event.state === "final" && runId && this.#awaiting.get(runId)?.carried) {
      // Waiting since before the last reload: whether that read had the reply is unknown, and the
      // transcript has it now. Reading it again shows it exactly once.
      this.#awaiting.delete(runId);
      void this.reload();
      return;
    }
    if (runId) this.#awaiting.delete(runId);
    this.items = this.items.filter((item) => !(item.pending && item.runId === runId));
    // A `final` without a message ends a run that stays silent (NO_REPLY): its placeholder goes.
    if (event.state === "final" && event.message) this.items.push({ role: "assistant", text: textOf(event.message) });
    else if (event.state === "error") this.items.push({ role: "error", text: event.errorMessage || RUN_FAILED });
    this.#onChange();
  }
}
