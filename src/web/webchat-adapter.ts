/**
 * The `webchat` channel: the browser page talks to the gateway; deliveries to web chat (replies
 * to `chat.send`, announces, `send`) reach the page as `chat` events, still through the outbox.
 * `to` is the session key the page shows; `replyToMessageId` carries the runId being answered.
 */
import { randomUUID } from "node:crypto";
import { displayKey } from "../sessions/keys.js";
import type { ChannelAdapter, ChannelHealth, OutboundTarget, SendReceipt } from "../channels/types.js";

export function createWebchatAdapter(broadcast: (event: string, payload: unknown) => void): ChannelAdapter {
  return {
    channel: "webchat",
    accountId: "default",
    // A reply is one `chat` event, its run's one `final`: a page has no message size to respect.
    textChunkLimit: Number.MAX_SAFE_INTEGER,
    async start() {},
    async stop() {},
    async send(target: OutboundTarget, text: string): Promise<SendReceipt> {
      const messageId = randomUUID();
      broadcast("chat", {
        ...(target.replyToMessageId ? { runId: target.replyToMessageId } : {}),
        // As callers see keys: `global` (session.scope "global") is shown as `main` (R6).
        sessionKey: displayKey(target.to),
        state: "final",
        messageId,
        message: { role: "assistant", content: [{ type: "text", text }], timestamp: Date.now() },
      });
      return { messageId };
    },
    health(): ChannelHealth {
      // Web chat has no platform connection; inbound arrives as gateway calls.
      return { connected: true, lastInboundAt: null, lastError: null };
    },
  };
}
