// Web chat page: renders a ChatView (webchat-client.js holds the protocol and the conversation).
import { ChatView, GatewayConnection } from "./webchat-client.js";

/** @returns {any} the page's element with this id (index.html has every one asked for) */
const $ = (/** @type {string} */ id) => document.getElementById(id);
const log = $("log");
const tokenDialog = $("token-dialog");
const initialKey = new URLSearchParams(location.search).get("session") || localStorage.getItem("sb.session") || "main";
$("session").value = initialKey;

const META = { user: "You", assistant: "Agent", error: "Error" };

function render() {
  log.replaceChildren(
    ...view.items.map((item) => {
      const li = document.createElement("li");
      li.className = item.role + (item.pending ? " pending" : "");
      const meta = document.createElement("span");
      meta.className = "meta";
      meta.textContent = META[item.role];
      li.append(meta, document.createTextNode(item.text));
      return li;
    }),
  );
  log.lastElementChild?.scrollIntoView({ block: "end" });
}

const conn = new GatewayConnection({
  url: `${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/`,
  token: localStorage.getItem("sb.token"),
  onStatus: (text) => { $("status").textContent = text; },
  onReady: () => view.reload(),
  onEvent: (name, payload) => name === "chat" && view.onChat(payload),
  onUnauthorized: () => {
    localStorage.removeItem("sb.token");
    if (!tokenDialog.open) tokenDialog.showModal();
  },
});
const view = new ChatView(conn, { sessionKey: initialKey, onChange: render });

$("composer").addEventListener("submit", (/** @type {SubmitEvent} */ ev) => {
  ev.preventDefault();
  const box = $("message");
  const text = box.value;
  box.value = "";
  view.send(text);
});

// An Enter that confirms an input method's composition (Japanese, Chinese…) is not a send.
$("message").addEventListener("keydown", (/** @type {KeyboardEvent} */ ev) => {
  if (ev.key === "Enter" && !ev.shiftKey && !ev.isComposing) { ev.preventDefault(); $("composer").requestSubmit(); }
});

$("session-form").addEventListener("submit", (/** @type {SubmitEvent} */ ev) => {
  ev.preventDefault();
  const key = $("session").value.trim() || "main";
  localStorage.setItem("sb.session", key);
  view.open(key);
});

$("token-form").addEventListener("submit", () => {
  const token = $("token").value;
  localStorage.setItem("sb.token", token);
  conn.setToken(token);
});

// Leaving the page (or entering the back-forward cache) closes the connection; coming back reopens it.
window.addEventListener("pagehide", () => conn.stop());
window.addEventListener("pageshow", (ev) => ev.persisted && conn.start());

conn.start();
