/**
 * A recording ChannelAdapter: the edge seen by the core tests (outbox, router, policy). Platform
 * SDKs are exercised against their own wire fakes in test/adapters and test/contract.
 */
import type { ChannelAdapter, ChannelHealth, ChannelId, OutboundTarget, RateLimit, SendOptions, SendReceipt } from "../../src/channels/types.js";
import { PlatformError } from "../../src/channels/types.js";

export interface SentMessage {
  target: OutboundTarget;
  text: string;
  at: number;
}

export class RecordingAdapter implements ChannelAdapter {
  readonly sent: SentMessage[] = [];
  readonly typingCalls: OutboundTarget[] = [];
  /** The idempotency key of every send attempt, in order. */
  readonly idempotencyKeys: string[] = [];
  /** Errors to throw from the next send calls, in order. */
  failures: PlatformError[] = [];
  /** Called before a send resolves (e.g. to kill a process mid-send). */
  beforeResolve?: (target: OutboundTarget, text: string) => Promise<void> | void;
  limits: RateLimit[] = [];
  private next = 1;

  constructor(
    readonly channel: ChannelId = "telegram",
    readonly accountId = "default",
    readonly textChunkLimit = 4000,
  ) {}

  async start(): Promise<void> {}
  async stop(): Promise<void> {}

  async send(target: OutboundTarget, text: string, opts?: SendOptions): Promise<SendReceipt> {
    this.idempotencyKeys.push(opts?.idempotencyKey ?? "");
    const failure = this.failures.shift();
    if (failure) throw failure;
    await this.beforeResolve?.(target, text);
    this.sent.push({ target, text, at: Date.now() });
    return { messageId: String(this.next++) };
  }

  async typing(target: OutboundTarget): Promise<void> {
    this.typingCalls.push(target);
  }

  rateLimitsFor(): RateLimit[] {
    return this.limits;
  }

  health(): ChannelHealth {
    return { connected: true, lastInboundAt: null, lastError: null };
  }

  textsTo(to: string): string[] {
    return this.sent.filter((m) => m.target.to === to).map((m) => m.text);
  }
}
