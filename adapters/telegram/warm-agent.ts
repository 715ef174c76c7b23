/**
 * The HTTP agent of Telegram sends: keep-alive, plus connected spare sockets on request, so that a
 * send goes on the wire the moment it is made.
 *
 * The outbox writes a chunk's journal line the instant before the platform call (send-journal.ts):
 * after a crash, a chunk with a line may have reached Telegram and is never sent again (Telegram
 * has no idempotency key), so any delay between the line and the request's bytes reaching the
 * kernel is a window in which a kill costs a user their reply. Opening a connection is such a
 * delay — a turn of the event loop at least, many ms on a busy one — and every send needs a new
 * connection right after a restart, exactly when kills in a crash loop land. `prepare()` (the
 * adapter's `prepareSend`) waits, before the line is written, until a connected socket waits for
 * each prepared send; the request then takes a pooled socket (`reuseSocket`) or a spare
 * (`createConnection`) without connecting, and its bytes are written before the event loop turns.
 *
 * One agent per adapter, used by sends only, so that every request on it was prepared (and a
 * long poll never takes a socket meant for a send).
 */
import http from "node:http";
import https from "node:https";
import type { Socket } from "node:net";
import type { Duplex } from "node:stream";

/** A spare nobody took is closed after this long (Telegram closes idle connections itself). */
const SPARE_IDLE_MS = 30_000;
/** A spare still connecting after this long: the send goes ahead and connects on its own. */
const CONNECT_WAIT_MS = 5_000;
/**
 * A prepared send whose request has not taken a socket after this long was abandoned (the outbox
 * stopped, the send failed before its request): it no longer holds a socket back.
 */
const PREPARED_TTL_MS = 10_000;

export interface WarmAgent extends http.Agent {
  /**
   * Resolves once a connected socket waits for the caller's next request — or warming failed or
   * took longer than CONNECT_WAIT_MS, in which case that request connects as usual (and fails as
   * usual if the API is down). Never rejects.
   */
  prepare(): Promise<void>;
}

export function createWarmAgent(apiRoot: string): WarmAgent {
  const url = new URL(apiRoot);
  const secure = url.protocol === "https:";
  const target: http.ClientRequestArgs = {
    host: url.hostname,
    port: Number(url.port) || (secure ? 443 : 80),
    ...(secure ? { servername: url.hostname } : {}),
  };
  const Base: typeof http.Agent = secure ? https.Agent : http.Agent;

  class Warm extends Base implements WarmAgent {
    /** Connected sockets no request has used yet, with what undoes their waiting (listeners, idle timer, unref). */
    private readonly spares: Array<{ socket: Socket; adopt: () => void }> = [];
    /** When each prepared caller whose request has not taken a socket yet prepared, oldest first. */
    private readonly prepared: number[] = [];

    prepare(): Promise<void> {
      const now = Date.now();
      while (this.prepared.length && now - this.prepared[0] > PREPARED_TTL_MS) this.prepared.shift();
      this.prepared.push(now);
      if (this.idle() >= this.prepared.length) return Promise.resolve();
      return this.openSpare();
    }

    override createConnection(options: http.ClientRequestArgs, callback?: (err: Error | null, stream: Duplex) => void): Duplex | null | undefined {
      this.taken();
      const spare = this.spares.shift();
      if (!spare) return super.createConnection(options, callback);
      spare.adopt();
      return spare.socket;
    }

    override reuseSocket(socket: Socket, request: http.ClientRequest): void {
      this.taken();
      super.reuseSocket(socket, request);
    }

    override destroy(): void {
      for (const spare of this.spares.splice(0)) spare.socket.destroy();
      super.destroy();
    }

    private taken(): void {
      this.prepared.shift();
    }

    /** Pooled keep-alive sockets plus spares. */
    private idle(): number {
      let n = this.spares.length;
      for (const sockets of Object.values(this.freeSockets)) n += sockets?.length ?? 0;
      return n;
    }

    private openSpare(): Promise<void> {
      return new Promise((resolve) => {
        const socket = super.createConnection({ ...target }) as Socket;
        const timer = setTimeout(resolve, CONNECT_WAIT_MS);
        const done = () => {
          clearTimeout(timer);
          resolve();
        };
        const drop = () => {
          const i = this.spares.findIndex((s) => s.socket === socket);
          if (i >= 0) this.spares.splice(i, 1);
          done();
        };
        const expire = () => socket.destroy();
        const connected = () => {
          this.spares.push({ socket, adopt });
          done();
        };
        // From here on the request and the agent own the socket's errors, timeouts and lifetime.
        const adopt = () => {
          socket.off("error", drop).off("close", drop).off("timeout", expire);
          socket.setTimeout(0);
          socket.ref();
        };
        socket.once(secure ? "secureConnect" : "connect", connected);
        // Failures surface on the send's own request; here they only end the wait.
        socket.on("error", drop);
        socket.once("close", drop);
        socket.setTimeout(SPARE_IDLE_MS);
        socket.on("timeout", expire);
        // A spare alone must not keep the process alive.
        socket.unref();
      });
    }
  }

  return new Warm({ keepAlive: true, keepAliveMsecs: 10_000 });
}
