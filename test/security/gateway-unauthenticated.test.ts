/**
 * What a client that has not authenticated can make the daemon hold: 64 KiB per socket, for the
 * 10 s of the handshake timeout at most, on a bounded number of sockets, and a few hundred bytes
 * per line of log. Real gateway, real sockets (frames written by hand where a well-behaved client
 * library would not write them).
 */
import net from "node:net";
import pino from "pino";
import WebSocket from "ws";
import { afterEach, describe, expect, it } from "vitest";
import { HANDSHAKE_MAX_BYTES, MAX_PENDING_HANDSHAKES } from "../../src/gateway/server.js";
import { startHarness, type Harness } from "../helpers/harness.js";
import { RawGateway } from "../helpers/raw-gateway.js";
import { connectFrame, frameHead, rawSocket, writeRaw, type FrameSocket } from "../helpers/frame-socket.js";

let h: Harness | undefined;
afterEach(async () => {
  await h?.stop();
  h = undefined;
});

/** A socket that has its connect.challenge and has sent nothing yet. */
async function challenged(url: string): Promise<FrameSocket> {
  const s = await rawSocket(url);
  expect((await s.next()).event).toBe("connect.challenge");
  return s;
}

/** A frame padded to `bytes` (JSON allows whitespace before the closing brace). */
function padded(frame: string, bytes: number): string {
  const head = frame.slice(0, -1);
  return `${head}${" ".repeat(bytes - Buffer.byteLength(head) - 1)}}`;
}
const paddedConnect = (bytes: number) => padded(connectFrame(), bytes);
const paddedRequest = (id: string, bytes: number) => padded(JSON.stringify({ type: "req", id, method: "health", params: {} }), bytes);

describe("interfaces §3 before the handshake: frame size", () => {
  it.each([
    ["one frame declaring 4 MiB (under maxPayload)", (ws: WebSocket) => writeRaw(ws, frameHead(4 * 1024 * 1024), " ".repeat(HANDSHAKE_MAX_BYTES + 1))],
    [
      "a message fragmented into 1 KiB frames that never ends",
      (ws: WebSocket) => {
        writeRaw(ws, frameHead(1024, { fin: false }), " ".repeat(1024));
        for (let i = 0; i * 1024 <= HANDSHAKE_MAX_BYTES; i++) writeRaw(ws, frameHead(1024, { fin: false, continuation: true }), " ".repeat(1024));
      },
    ],
  ])("interfaces §3 a first frame over the pre-handshake cap — %s — gets an error response once the cap is passed, then the socket closes (1008); the daemon does not wait for the rest", async (_what, send) => {
    h = await startHarness();
    const s = await challenged(h.url);
    send(s.ws);
    expect(await s.closed).toBe(1008);
    expect(s.frames).toEqual([{ type: "res", id: "", ok: false, error: { code: "INVALID_REQUEST", message: `frame too large: more than ${HANDSHAKE_MAX_BYTES} bytes before the handshake (a connect request is a few hundred)` } }]);
    // The daemon serves the others as before.
    expect(await (await h.client()).request("health", {})).toMatchObject({ ok: true });
  });

  it("interfaces §3 a connect request just under the pre-handshake cap is accepted, and after the handshake maxPayload applies again (a 1 MiB request is served)", async () => {
    h = await startHarness();
    const s = await challenged(h.url);
    s.ws.send(paddedConnect(HANDSHAKE_MAX_BYTES - 1024));
    expect(await s.next()).toMatchObject({ id: "c", ok: true, payload: { type: "hello-ok", policy: { maxPayload: 8 * 1024 * 1024 } } });
    s.ws.send(paddedRequest("big", 1024 * 1024));
    expect(await s.next()).toMatchObject({ id: "big", ok: true });
    s.ws.close();
  });

  it("interfaces §3 a connect that arrives in two reads, the second carrying a large request behind it, is served with that request: bytes after the handshake do not count against the cap", async () => {
    h = await startHarness();
    const s = await challenged(h.url);
    const connect = paddedConnect(HANDSHAKE_MAX_BYTES / 2);
    const split = connect.length - 100;
    writeRaw(s.ws, frameHead(connect.length), connect.slice(0, split));
    // Read by the daemon on its own (on loopback, at once), so that what follows comes in a later read.
    await new Promise((resolve) => setTimeout(resolve, 200));
    const request = paddedRequest("behind", HANDSHAKE_MAX_BYTES);
    writeRaw(s.ws, connect.slice(split), frameHead(request.length), request);
    expect(await s.next()).toMatchObject({ id: "c", ok: true });
    expect(await s.next()).toMatchObject({ id: "behind", ok: true });
    s.ws.close();
  });
});

describe("interfaces §3 before the handshake: how many sockets", () => {
  it(`at most ${MAX_PENDING_HANDSHAKES} sockets wait in their handshake: one more drops the oldest, the others stay, and the newcomer's handshake succeeds`, async () => {
    h = await startHarness();
    const waiting: FrameSocket[] = [];
    for (let i = 0; i < MAX_PENDING_HANDSHAKES; i++) waiting.push(await challenged(h.url));
    const newcomer = await challenged(h.url);
    // Dropped at once (1006, no close handshake): a flood must not leave sockets closing slowly behind it.
    expect(await waiting[0].closed).toBe(1006);
    newcomer.ws.send(connectFrame());
    expect(await newcomer.next()).toMatchObject({ id: "c", ok: true });
    expect(waiting.slice(1).map((s) => s.ws.readyState)).toEqual(waiting.slice(1).map(() => WebSocket.OPEN));
    // One that finished its handshake no longer counts: two more make 65 waiting, and the oldest
    // of those is dropped, not the newcomer.
    const more = [await challenged(h.url), await challenged(h.url)];
    expect(await waiting[1].closed).toBe(1006);
    expect([newcomer, waiting[2]].map((s) => s.ws.readyState)).toEqual([WebSocket.OPEN, WebSocket.OPEN]);
    for (const s of [...waiting, newcomer, ...more]) s.ws.close();
  });
});

describe("before the WebSocket upgrade", () => {
  it("an HTTP request whose headers never end (slowloris) is answered 408 and closed once the handshake timeout (10 s) is up, as a silent WebSocket is", async () => {
    h = await startHarness();
    const socket = net.connect({ host: "127.0.0.1", port: Number(new URL(h.url).port) });
    socket.write("GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n");
    let answer = "";
    socket.on("data", (d) => (answer += d.toString("latin1")));
    await new Promise((resolve) => socket.once("close", resolve));
    expect(answer.split("\r\n")[0]).toBe("HTTP/1.1 408 Request Timeout");
  }, 30_000);
});

describe("what an unauthenticated client gets into the log", () => {
  const LONG = "x".repeat(16 * 1024);

  /** A harness whose warnings are kept, as written. */
  async function logged(config: Parameters<typeof startHarness>[0] = {}) {
    const lines: string[] = [];
    h = await startHarness({ ...config, log: pino({ level: "warn" }, { write: (line: string) => void lines.push(line) }) });
    return lines;
  }

  it.each(["id", "instanceId"])("security: a connect whose client.%s is longer than a nodeId may be (128) is refused as INVALID_REQUEST naming it, and the refused login does not write it to the log", async (field) => {
    const lines = await logged({ config: { gateway: { auth: { token: "gw-unauth-log-3d9a" } } } });
    const s = await challenged(h!.url);
    s.ws.send(connectFrame({ auth: { token: "wrong" }, client: { id: "t", version: "1", platform: "test", mode: "test", [field]: LONG } }));
    expect(await s.next()).toMatchObject({ ok: false, error: { code: "INVALID_REQUEST", message: expect.stringContaining(`client.${field}`) } });
    expect(await s.closed).toBe(1008);
    expect(lines.join("")).not.toContain("x".repeat(200));
  });

  it("security: a WebSocket from another site refused at the upgrade logs its Origin and Host cut short, not as long as the client made them", async () => {
    const lines = await logged();
    // Each within Node's 16 KiB of headers, which answers 431 beyond.
    const name = LONG.slice(0, 6 * 1024);
    await expect(RawGateway.open(h!.url, { origin: `https://${name}.example`, headers: { host: `${name}.example` } })).rejects.toThrow(/403/);
    expect(lines.join("")).toMatch(/gateway connection refused/);
    expect(lines.join("")).not.toContain("x".repeat(300));
  });
});
