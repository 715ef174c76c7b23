// Web chat client: speaks the gateway protocol (interfaces §3) over the page's own origin.
const $ = (id) => document.getElementById(id);
const log = $("log");
const statusEl = $("status");
let ws;
let nextId = 1;
const pending = new Map();
let sessionKey = new URLSearchParams(location.search).get("session") || localStorage.getItem("sb.session") || "main";
$("session").value = sessionKey;

function setStatus(text) { statusEl.textContent = text; }

function textOf(message) {
  if (typeof message?.content === "string") return message.content;
  return (message?.content || []).filter((b) => b.type === "text").map((b) => b.text).join("");
}

function addMessage(role, text, extra = {}) {
  const li = document.createElement("li");
  li.className = role + (extra.pending ? " pending" : "");
  if (extra.id) li.dataset.id = extra.id;
  const meta = document.createElement("span");
  meta.className = "meta";
  meta.textContent = role === "user" ? "You" : role === "error" ? "Error" : "Agent";
  li.append(meta, document.createTextNode(text));
  log.append(li);
  li.scrollIntoView({ block: "end" });
  return li;
}

function request(method, params) {
  const id = String(nextId++);
  ws.send(JSON.stringify({ type: "req", id, method, params }));
  return new Promise((resolve, reject) => pending.set(id, { resolve, reject }));
}

async function loadHistory() {
  log.replaceChildren();
  try {
    const res = await request("chat.history", { sessionKey, limit: 200 });
    for (const m of res.messages) {
      if (m.role === "user") addMessage("user", textOf(m));
      else if (m.role === "assistant" && textOf(m)) addMessage("assistant", textOf(m));
    }
  } catch (err) {
    if (err.code !== "NOT_FOUND") addMessage("error", err.message);
  }
}

function connect(token) {
  setStatus("Connecting…");
  const proto = location.protocol === "https:" ? "wss" : "ws";
  ws = new WebSocket(`${proto}://${location.host}/`);
  ws.onmessage = (ev) => {
    const frame = JSON.parse(ev.data);
    if (frame.type === "event" && frame.event === "connect.challenge") {
      ws.send(JSON.stringify({ type: "req", id: "connect", method: "connect", params: {
        minProtocol: 3, maxProtocol: 4, role: "operator", scopes: ["operator.read", "operator.write"],
        client: { id: "switchboard-webchat", version: "1", platform: "browser", mode: "webchat" },
        auth: token ? { token } : {},
      } }));
      return;
    }
    if (frame.type === "res" && frame.id === "connect") {
      if (frame.ok) { setStatus("Connected"); loadHistory(); }
      else if (frame.error.code === "UNAUTHORIZED") { localStorage.removeItem("sb.token"); $("token-dialog").showModal(); }
      else setStatus(`Refused: ${frame.error.message}`);
      return;
    }
    if (frame.type === "res") {
      const p = pending.get(frame.id);
      if (!p) return;
      pending.delete(frame.id);
      frame.ok ? p.resolve(frame.payload) : p.reject(Object.assign(new Error(frame.error.message), frame.error));
      return;
    }
    if (frame.type === "event" && frame.event === "chat") onChat(frame.payload);
  };
  ws.onclose = () => {
    setStatus("Disconnected — reconnecting…");
    for (const p of pending.values()) p.reject(new Error("connection closed"));
    pending.clear();
    setTimeout(() => connect(localStorage.getItem("sb.token")), 1500);
  };
}

function sameSession(key) {
  return key === sessionKey || (sessionKey === "main" && /^agent:[^:]+:main$/.test(key)) || key === "main" && /^agent:[^:]+:main$/.test(sessionKey);
}

function onChat(p) {
  if (!sameSession(p.sessionKey)) return;
  const placeholder = p.runId && log.querySelector(`li.pending[data-id="${CSS.escape(p.runId)}"]`);
  if (placeholder) placeholder.remove();
  if (p.state === "final") addMessage("assistant", textOf(p.message));
  else if (p.state === "error") addMessage("error", p.errorMessage || "The agent failed.");
}

$("composer").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const box = $("message");
  const text = box.value.trim();
  if (!text) return;
  box.value = "";
  addMessage("user", text);
  const idempotencyKey = crypto.randomUUID();
  const waiting = addMessage("assistant", "…", { pending: true, id: idempotencyKey });
  try {
    await request("chat.send", { sessionKey, message: text, idempotencyKey });
  } catch (err) {
    waiting.remove();
    addMessage("error", err.message);
  }
});

$("message").addEventListener("keydown", (ev) => {
  if (ev.key === "Enter" && !ev.shiftKey) { ev.preventDefault(); $("composer").requestSubmit(); }
});

$("session-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  sessionKey = $("session").value.trim() || "main";
  localStorage.setItem("sb.session", sessionKey);
  loadHistory();
});

$("token-form").addEventListener("submit", () => {
  const token = $("token").value;
  localStorage.setItem("sb.token", token);
  ws.onclose = null;
  ws.close();
  connect(token);
});

connect(localStorage.getItem("sb.token"));
