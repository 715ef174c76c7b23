/**
 * What the daemon's own code needs of an abort signal, and a controller that provides it without
 * creating a Node AbortSignal.
 *
 * On Node 20 every AbortSignal costs ~1.7 µs to create and, however briefly it lives, is promoted
 * to the old generation with three hidden classes of its own (its EventTarget is given a new
 * prototype, then three symbol keys): measured in bench/, one per agent run and one per Telegram
 * poll made the collector's full passes — the inbound path's worst latency spikes — come a
 * third more often. A run needs a signal for its whole life but rarely an AbortSignal: its model
 * call, tools and slot wait only listen. `RunAbort` serves those, and makes a real AbortSignal
 * only for an API that takes nothing else (`toSignal`: p-queue, while a run waits for a slot).
 */

/** A real AbortSignal is one too. */
export interface AbortLike {
  readonly aborted: boolean;
  readonly reason: unknown;
  addEventListener(type: "abort", listener: () => void, options?: { once?: boolean }): void;
  removeEventListener(type: "abort", listener: () => void): void;
}

export class RunAbort implements AbortLike {
  private abortedWith: { reason: unknown } | undefined;
  private listeners: Array<() => void> = [];
  private real: AbortController | undefined;

  get aborted(): boolean {
    return this.abortedWith !== undefined;
  }

  get reason(): unknown {
    return this.abortedWith?.reason;
  }

  /** Aborts once (later calls are ignored, as AbortController's), then calls each listener once. */
  abort(reason: unknown = new DOMException("This operation was aborted", "AbortError")): void {
    if (this.abortedWith) return;
    this.abortedWith = { reason };
    this.real?.abort(reason);
    const listeners = this.listeners;
    this.listeners = [];
    for (const listener of listeners) listener();
  }

  /** As EventTarget: a listener added twice is called once, and one added after the abort never. */
  addEventListener(_type: "abort", listener: () => void, _options?: { once?: boolean }): void {
    if (this.abortedWith || this.listeners.includes(listener)) return;
    this.listeners.push(listener);
  }

  removeEventListener(_type: "abort", listener: () => void): void {
    const at = this.listeners.indexOf(listener);
    if (at >= 0) this.listeners.splice(at, 1);
  }

  /** A real AbortSignal that follows this one, made on first use. */
  toSignal(): AbortSignal {
    if (!this.real) {
      this.real = new AbortController();
      if (this.abortedWith) this.real.abort(this.abortedWith.reason);
    }
    return this.real.signal;
  }
}

/** Resolves after `ms`, or at once when `signal` aborts; never rejects. */
export function sleepUnlessAborted(ms: number, signal: AbortLike | undefined): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const done = (): void => {
      clearTimeout(timer);
      signal?.removeEventListener("abort", done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal?.addEventListener("abort", done, { once: true });
  });
}
