/**
 * How fast this host runs a fixed piece of CPU work right now. A VM's speed moves with its
 * neighbours: on the 2-core VM these figures come from, the daemon's CPU per message went from
 * ~500 to ~900 µs within minutes, with the same code. Run before and after the timed groups, this
 * tells a slow invocation (the host was busy) from a slow daemon.
 */
const HISTORY = {
  model: "bench",
  messages: Array.from({ length: 60 }, (_, i) => ({ role: i % 2 ? "assistant" : "user", content: `message ${i}: ${"lorem ipsum dolor sit amet ".repeat(4)}` })),
};

/** Milliseconds for 2,000 JSON round trips of a 60-message request body (~90 ms on a calm host here). */
export function hostCheckMs(): number {
  const started = performance.now();
  let size = 0;
  for (let i = 0; i < 2000; i++) size += (JSON.parse(JSON.stringify(HISTORY)) as typeof HISTORY).messages.length;
  if (size !== 2000 * HISTORY.messages.length) throw new Error("host check: unexpected result");
  return performance.now() - started;
}
