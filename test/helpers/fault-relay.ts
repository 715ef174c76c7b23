/**
 * A TCP relay on 127.0.0.1 in front of a port, for connection faults a real network makes: the
 * far side unreachable (`down`), or a connection that still carries the client's bytes but loses
 * every answer (`deaf`: a request reached the server, its response never comes back).
 */
import net from "node:net";

export class FaultRelay {
  private server?: net.Server;
  private readonly pairs = new Set<[net.Socket, net.Socket]>();
  private mode: "up" | "down" | "deaf" = "up";
  /** Connections accepted while up or deaf (each reached the target). */
  connections = 0;

  constructor(private readonly targetPort: number) {}

  async start(): Promise<number> {
    this.server = net.createServer((client) => this.accept(client));
    await new Promise<void>((resolve) => this.server!.listen(0, "127.0.0.1", resolve));
    return (this.server!.address() as net.AddressInfo).port;
  }

  /** Cut every connection and refuse new ones until `up()`. */
  down(): void {
    this.mode = "down";
    for (const [client, upstream] of this.pairs) {
      client.destroy();
      upstream.destroy();
    }
    this.pairs.clear();
  }

  /** Let the client's bytes through but drop the server's, on open and new connections alike. */
  deaf(): void {
    this.mode = "deaf";
  }

  up(): void {
    this.mode = "up";
  }

  async stop(): Promise<void> {
    this.down();
    await new Promise<void>((resolve) => this.server?.close(() => resolve()) ?? resolve());
  }

  private accept(client: net.Socket): void {
    if (this.mode === "down") {
      client.destroy();
      return;
    }
    this.connections++;
    const upstream = net.connect(this.targetPort, "127.0.0.1");
    const pair: [net.Socket, net.Socket] = [client, upstream];
    this.pairs.add(pair);
    client.on("data", (chunk) => upstream.write(chunk));
    upstream.on("data", (chunk) => this.mode === "up" && client.write(chunk));
    const end = () => {
      this.pairs.delete(pair);
      client.destroy();
      upstream.destroy();
    };
    client.on("close", end).on("error", end);
    upstream.on("close", end).on("error", end);
  }
}
