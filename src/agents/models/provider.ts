/**
 * The model seam: one small interface the runtime calls, so tests and benchmarks can point the
 * real OpenAI-compatible client at a fake server (interfaces §4).
 */
import type { AbortLike } from "../../util/run-abort.js";

export interface ChatMessage {
  role: "system" | "user" | "assistant" | "tool";
  content: string | null;
  tool_calls?: Array<{ id: string; type: "function"; function: { name: string; arguments: string } }>;
  tool_call_id?: string;
}

export interface ToolDefinition {
  type: "function";
  function: { name: string; description: string; parameters: Record<string, unknown> };
}

export interface CompletionRequest {
  model: string;
  messages: ChatMessage[];
  tools: ToolDefinition[];
  signal?: AbortLike;
}

export interface CompletionResult {
  content: string;
  toolCalls: Array<{ id: string; name: string; arguments: string }>;
  usage: { input: number; output: number };
  finishReason: string;
}

export interface ModelProvider {
  readonly id: string;
  complete(req: CompletionRequest): Promise<CompletionResult>;
}

export class ModelError extends Error {
  /** The server refused the request as longer than the model's context window. */
  readonly contextOverflow: boolean;

  constructor(message: string, options?: { cause?: unknown; contextOverflow?: boolean }) {
    super(message, options);
    this.name = "ModelError";
    this.contextOverflow = options?.contextOverflow ?? false;
  }
}
