/**
 * The gateway's HTTP side as anyone who can reach its port sees it, before any token: raw
 * requests on a socket (no client library that would tidy them up), each answer awaited with a
 * bound, so a request left unanswered fails instead of hanging the test.
 */
import net from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startHarness, type Harness } from "../helpers/harness.js";

let h: Harness;
let port: number;
beforeAll(async () => {
  h = await startHarness({ config: { gateway: { auth: { token: "gw-http-surface-7c1e" } }, hooks: { enabled: true, token: "hook-http-surface-4b2d" } } });
  port = Number(new URL(h.url).port);
});
afterAll(async () => {
  await h?.stop();
});

/** Sends `head` as written; resolves with the status line of the answer, or rejects after `ms`. */
function rawRequest(head: string, ms = 5000): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = net.connect({ host: "127.0.0.1", port }, () => socket.write(head));
    let answer = "";
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error(`no answer within ${ms} ms to ${JSON.stringify(head.split("\r\n")[0])}`));
    }, ms);
    socket.on("data", (d) => {
      answer += d.toString("latin1");
      if (!answer.includes("\r\n")) return;
      clearTimeout(timer);
      socket.destroy();
      resolve(answer.slice(0, answer.indexOf("\r\n")));
    });
    socket.on("error", (err) => {
      clearTimeout(timer);
      reject(err);
    });
  });
}

describe("HTTP requests anyone can send", () => {
  // Node's parser accepts these request-targets; the WHATWG URL parser does not.
  it.each(["//[", "http://[", "http://a:99999/", "http://%zz/"])("security: a request-target %j no URL parser takes is answered 400, not left hanging", async (target) => {
    for (const method of ["GET", "POST"]) {
      expect(await rawRequest(`${method} ${target} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n\r\n`)).toBe("HTTP/1.1 400 Bad Request");
    }
  });

  it("security: the gateway still answers afterwards (the control case)", async () => {
    expect(await rawRequest("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")).toBe("HTTP/1.1 200 OK");
  });
});

describe("the web chat page's headers", () => {
  it.each(["/", "/webchat.js", "/webchat-client.js", "/webchat.css"])("security: %s may not be framed by another site (clickjacking) nor sniffed as another type", async (asset) => {
    const res = await fetch(`http://127.0.0.1:${port}${asset}`);
    expect(res.status).toBe(200);
    expect(res.headers.get("x-frame-options")).toBe("DENY");
    expect(res.headers.get("content-security-policy")).toBe("frame-ancestors 'none'");
    expect(res.headers.get("x-content-type-options")).toBe("nosniff");
  });
});
