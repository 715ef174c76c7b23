// @vitest-environment jsdom
/**
 * The web chat page itself (src/web/index.html + webchat.js) in jsdom, against the real gateway:
 * what is typed reaches the agent and the reply is rendered, a refused token asks for another,
 * and the session form switches conversations. The page's protocol logic is covered in depth by
 * webchat-client.test.ts; this checks the page wiring around it.
 */
import { readFileSync } from "node:fs";
import path from "node:path";
import { afterEach, beforeAll, expect, it, vi } from "vitest";
import { startHarness, type Harness } from "../helpers/harness.js";

declare const jsdom: import("jsdom").JSDOM;

// The vitest root is the project's: jsdom's URL global cannot make a file path here.
const PAGE = readFileSync(path.resolve("src/web/index.html"), "utf8");
let h: Harness | undefined;

beforeAll(() => {
  // Browser APIs jsdom lacks: the page only needs them to exist.
  window.HTMLDialogElement.prototype.showModal = function (this: HTMLDialogElement) {
    this.open = true;
  };
  window.Element.prototype.scrollIntoView = () => {};
});

afterEach(async () => {
  window.dispatchEvent(new Event("pagehide"));
  await h?.stop();
  h = undefined;
});

/** Load the page as the browser would from the gateway's address. */
async function openPage(harness: Harness, opts: { token?: string; query?: string } = {}) {
  jsdom.reconfigure({ url: `${harness.url.replace("ws://", "http://")}${opts.query ?? ""}` });
  // jsdom's reconfigure moves the document but not the origin its WebSocket sends (the window's,
  // fixed at creation): a browser sends the page's own origin, which the gateway checks.
  (jsdom.window as unknown as { _origin: string })._origin = jsdom.window.location.origin;
  localStorage.clear();
  if (opts.token) localStorage.setItem("sb.token", opts.token);
  const parsed = new DOMParser().parseFromString(PAGE, "text/html");
  parsed.querySelectorAll("script").forEach((s) => s.remove());
  document.body.replaceChildren(...parsed.body.children);
  vi.resetModules();
  await import("../../src/web/webchat.js");
}

const $ = <T extends HTMLElement>(id: string) => document.getElementById(id) as T;
const shown = () => [...$("log").children].map((li) => `${li.className}: ${li.textContent}`);

function type(text: string): void {
  $<HTMLTextAreaElement>("message").value = text;
  $("message").dispatchEvent(new KeyboardEvent("keydown", { key: "Enter", bubbles: true, cancelable: true }));
}

it("what is typed (Enter sends) is shown at once with a placeholder, then the agent's reply in its place", async () => {
  let release!: () => void;
  const held = new Promise<void>((resolve) => (release = resolve));
  h = await startHarness({ responder: async (req, i) => (await held, (await import("../fakes/model-server.js")).echoLastUser(req, i)) });
  await openPage(h);
  await vi.waitFor(() => expect($("status").textContent).toBe("Connected"));
  type("hello page");
  expect($<HTMLTextAreaElement>("message").value).toBe("");
  expect(shown()).toEqual(["user: Youhello page", "assistant pending: Agent…"]);
  release();
  await vi.waitFor(() => expect(shown()).toEqual(["user: Youhello page", "assistant: Agentecho: hello page"]));
});

it("a refused token opens the token dialog; the right token connects, is remembered, and the page loads", async () => {
  const TOKEN = "page-token-0123456789";
  h = await startHarness({ config: { gateway: { auth: { token: TOKEN } } } });
  await openPage(h, { token: "wrong" });
  await vi.waitFor(() => expect($<HTMLDialogElement>("token-dialog").open).toBe(true));
  expect($("status").textContent).toBe("The gateway needs a token");
  expect(localStorage.getItem("sb.token")).toBeNull();
  $<HTMLInputElement>("token").value = TOKEN;
  $<HTMLFormElement>("token-form").requestSubmit();
  await vi.waitFor(() => expect($("status").textContent).toBe("Connected"));
  expect(localStorage.getItem("sb.token")).toBe(TOKEN);
  type("in");
  await vi.waitFor(() => expect(shown()).toEqual(["user: Youin", "assistant: Agentecho: in"]));
});

it("the session form opens another conversation and remembers it; ?session= picks the first one", async () => {
  h = await startHarness();
  const client = await h.client();
  await client.request("agent", { message: "work note", sessionKey: "agent:main:work", idempotencyKey: "w1" }, { expectFinal: true });
  await openPage(h, { query: "?session=agent:main:work" });
  await vi.waitFor(() => expect(shown()).toEqual(["user: Youwork note", "assistant: Agentecho: work note"]));
  $<HTMLInputElement>("session").value = " ";
  $<HTMLFormElement>("session-form").requestSubmit();
  // A blank key means main, which has no history yet.
  await vi.waitFor(() => expect(shown()).toEqual([]));
  expect(localStorage.getItem("sb.session")).toBe("main");
});

it("coming back to the page from the back-forward cache connects again and reloads the conversation", async () => {
  h = await startHarness();
  await openPage(h);
  await vi.waitFor(() => expect($("status").textContent).toBe("Connected"));
  type("before");
  await vi.waitFor(() => expect(shown()).toEqual(["user: Youbefore", "assistant: Agentecho: before"]));
  window.dispatchEvent(new Event("pagehide"));
  $("status").textContent = "";
  window.dispatchEvent(new PageTransitionEvent("pageshow", { persisted: true }));
  await vi.waitFor(() => expect($("status").textContent).toBe("Connected"));
  type("after");
  await vi.waitFor(() => expect(shown()).toEqual(["user: Youbefore", "assistant: Agentecho: before", "user: Youafter", "assistant: Agentecho: after"]));
});

it("Enter that confirms an input method's composition (Japanese, Chinese…) does not send the half-typed text", async () => {
  h = await startHarness();
  await openPage(h);
  await vi.waitFor(() => expect($("status").textContent).toBe("Connected"));
  $<HTMLTextAreaElement>("message").value = "にほん";
  $("message").dispatchEvent(new KeyboardEvent("keydown", { key: "Enter", isComposing: true, bubbles: true, cancelable: true }));
  expect($<HTMLTextAreaElement>("message").value).toBe("にほん");
  expect(shown()).toEqual([]);
  type("日本語");
  await vi.waitFor(() => expect(shown()).toEqual(["user: You日本語", "assistant: Agentecho: 日本語"]));
});

it("a new conversation opened by a plain name in the session form (no agent:… key) takes messages and shows their replies", async () => {
  h = await startHarness();
  await openPage(h);
  await vi.waitFor(() => expect($("status").textContent).toBe("Connected"));
  $<HTMLInputElement>("session").value = "Trip planning";
  $<HTMLFormElement>("session-form").requestSubmit();
  await vi.waitFor(() => expect(localStorage.getItem("sb.session")).toBe("Trip planning"));
  type("where to?");
  await vi.waitFor(() => expect(shown()).toEqual(["user: Youwhere to?", "assistant: Agentecho: where to?"]));
});
