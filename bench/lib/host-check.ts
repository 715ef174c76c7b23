/**
 * How fast this host runs a fixed piece of CPU work right now, on both cores at once. A VM's
 * speed moves with its neighbours: on the 2-core VM these figures come from, the daemon's CPU per
 * message went from ~500 to ~900 µs within minutes, with the same code. Run between the timed
 * groups, this tells a slow invocation (the host was busy) from a slow daemon. Both cores, because
 * a VM that gets less than its two cores' worth still runs one thread at full speed.
 */
import net from "node:net";
import { Worker } from "node:worker_threads";

/** 2,000 JSON round trips of a 60-message request body; returns its milliseconds. */
const WORK = `
  const body = { model: "bench", messages: Array.from({ length: 60 }, (_, i) => ({ role: i % 2 ? "assistant" : "user", content: "message " + i + ": " + "lorem ipsum dolor sit amet ".repeat(4) })) };
  const started = performance.now();
  let n = 0;
  for (let i = 0; i < 2000; i++) n += JSON.parse(JSON.stringify(body)).messages.length;
  if (n !== 120000) throw new Error("host check: unexpected result " + n);
  return performance.now() - started;
`;

const work = new Function(WORK) as () => number;

/** The same work on this thread and a worker thread at once; the slower one's milliseconds. */
export async function hostCheckMs(): Promise<number> {
  const worker = new Worker(
    `const { parentPort } = require("node:worker_threads");
     const work = () => {${WORK}};
     work(); // warms this thread's JIT: not counted
     parentPort.once("message", () => parentPort.postMessage(work()));
     parentPort.postMessage("ready");`,
    { eval: true },
  );
  try {
    await nextMessage(worker);
    const other = nextMessage(worker);
    worker.postMessage("go");
    const here = work();
    return Math.max(here, Number(await other));
  } finally {
    await worker.terminate();
  }
}

/**
 * How fast this host passes messages between threads over loopback TCP right now: 2,000
 * sequential 200-byte round trips to an echo server on a worker thread; returns the
 * milliseconds. The daemon's path is mostly such hops (long poll, model call, sendMessage, SQLite
 * thread), and a VM's syscall and cross-CPU wake-up costs move independently of its raw CPU speed:
 * on the day it was added the CPU check read as on a calm host while the daemon's figures were a
 * third slower than on an earlier host.
 */
export async function hostIoCheckMs(): Promise<number> {
  const worker = new Worker(
    `const net = require("node:net");
     const { parentPort } = require("node:worker_threads");
     const server = net.createServer((s) => { s.setNoDelay(true); s.on("data", (d) => s.write(d)); });
     server.listen(0, "127.0.0.1", () => parentPort.postMessage(server.address().port));`,
    { eval: true },
  );
  try {
    const port = Number(await nextMessage(worker));
    const socket = net.connect(port, "127.0.0.1");
    socket.setNoDelay(true);
    await new Promise<void>((resolve, reject) => socket.once("connect", resolve).once("error", reject));
    const payload = Buffer.alloc(200, 120);
    const roundTrip = () =>
      new Promise<void>((resolve) => {
        let got = 0;
        const onData = (d: Buffer) => {
          got += d.length;
          if (got >= payload.length) {
            socket.off("data", onData);
            resolve();
          }
        };
        socket.on("data", onData);
        socket.write(payload);
      });
    for (let i = 0; i < 200; i++) await roundTrip(); // warms both threads: not counted
    const started = performance.now();
    for (let i = 0; i < 2000; i++) await roundTrip();
    const ms = performance.now() - started;
    socket.destroy();
    return ms;
  } finally {
    await worker.terminate();
  }
}

/** The worker's next message, or its error. */
function nextMessage(worker: Worker): Promise<unknown> {
  return new Promise((resolve, reject) => {
    worker.once("message", resolve);
    worker.once("error", reject);
  });
}
