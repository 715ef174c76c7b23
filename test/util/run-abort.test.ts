import PQueue from "p-queue";
import { describe, expect, it, vi } from "vitest";
import { SlotLease } from "../../src/agents/slots.js";
import { RunAbort } from "../../src/util/run-abort.js";

describe("RunAbort: an AbortController's signal behaviour, without a Node AbortSignal", () => {
  it("calls each listener once, keeps the first reason, and later aborts change nothing", () => {
    const a = new RunAbort();
    const calls: string[] = [];
    a.addEventListener("abort", () => calls.push("one"));
    a.addEventListener("abort", () => calls.push("two"), { once: true });
    expect([a.aborted, a.reason]).toEqual([false, undefined]);
    const first = new Error("first");
    a.abort(first);
    a.abort(new Error("second"));
    expect(calls).toEqual(["one", "two"]);
    expect(a.aborted).toBe(true);
    expect(a.reason).toBe(first);
  });

  it.each([
    ["added twice: called once", (a: RunAbort, l: () => void) => (a.addEventListener("abort", l), a.addEventListener("abort", l)), 1],
    ["removed: not called", (a: RunAbort, l: () => void) => (a.addEventListener("abort", l), a.removeEventListener("abort", l)), 0],
    ["removed though never added: harmless", (a: RunAbort, l: () => void) => a.removeEventListener("abort", l), 0],
  ])("a listener %s", (_what, arrange, expected) => {
    const a = new RunAbort();
    const listener = vi.fn();
    arrange(a, listener);
    a.abort();
    expect(listener).toHaveBeenCalledTimes(expected);
  });

  it("a listener added after the abort is never called, as EventTarget's", () => {
    const a = new RunAbort();
    a.abort();
    const listener = vi.fn();
    a.addEventListener("abort", listener);
    a.abort();
    expect(listener).not.toHaveBeenCalled();
  });

  it("aborts with an AbortError when given no reason, as AbortController does", () => {
    const a = new RunAbort();
    a.abort();
    expect(a.reason).toBeInstanceOf(DOMException);
    expect((a.reason as DOMException).name).toBe("AbortError");
  });

  it("toSignal: one real AbortSignal, following an abort before or after it was made", () => {
    const before = new RunAbort();
    const signal = before.toSignal();
    expect(signal).toBeInstanceOf(AbortSignal);
    expect(before.toSignal()).toBe(signal);
    expect(signal.aborted).toBe(false);
    const reason = new Error("stopped");
    before.abort(reason);
    expect([signal.aborted, signal.reason]).toEqual([true, reason]);

    const after = new RunAbort();
    after.abort(reason);
    expect([after.toSignal().aborted, after.toSignal().reason]).toEqual([true, reason]);
  });
});

describe("SlotLease: a run's pool slot under its RunAbort", () => {
  it("aborted while it holds the slot, the slot is free at once — before the run gives it back", async () => {
    const pool = new PQueue({ concurrency: 1 });
    const holder = new RunAbort();
    const held = new SlotLease(pool, holder);
    await held.take();
    const next = new SlotLease(pool, new RunAbort());
    let gotIt = false;
    const taking = next.take().then(() => (gotIt = true));
    await new Promise((r) => setTimeout(r, 10));
    expect(gotIt).toBe(false);
    holder.abort(new Error("/stop"));
    await taking;
    expect(gotIt).toBe(true);
    held.give();
    next.give();
  });

  it("a free slot is taken without making an AbortSignal; one that must wait makes one, so p-queue drops it on abort", async () => {
    const pool = new PQueue({ concurrency: 1 });
    const first = new RunAbort();
    const firstSignal = vi.spyOn(first, "toSignal");
    const holding = new SlotLease(pool, first);
    await holding.take();
    expect(firstSignal).not.toHaveBeenCalled();

    const second = new RunAbort();
    const secondSignal = vi.spyOn(second, "toSignal");
    const waiting = new SlotLease(pool, second).take();
    expect(secondSignal).toHaveBeenCalledTimes(1);
    second.abort(new Error("/stop"));
    await waiting;
    expect(pool.size).toBe(0);
    holding.give();
  });
});
