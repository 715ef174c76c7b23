/**
 * The model seam: one small interface the runtime calls, so tests and benchmarks can point the
 * real OpenAI-compatible client at a fake server (interfaces §4).
 */
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
  signal?: AbortSignal;
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
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "ModelError";
  }
}
