/**
 * `api: "openai-chat"`: any OpenAI-compatible Chat Completions server (OpenAI, Ollama, vLLM,
 * llama.cpp, LM Studio…) through the official SDK pointed at `baseUrl`.
 */
import OpenAI from "openai";
import { ModelError, type CompletionRequest, type CompletionResult, type ModelProvider } from "./provider.js";

export interface OpenAiChatOptions {
  id: string;
  baseUrl: string;
  apiKey?: string;
  timeoutMs: number;
}

export function createOpenAiChatProvider(opts: OpenAiChatOptions): ModelProvider {
  // Local servers need no key, but the SDK insists on one.
  const client = new OpenAI({ baseURL: opts.baseUrl, apiKey: opts.apiKey || "not-needed", timeout: opts.timeoutMs, maxRetries: 2 });
  return {
    id: opts.id,
    async complete(req: CompletionRequest): Promise<CompletionResult> {
      try {
        const res = await client.chat.completions.create(
          {
            model: req.model,
            messages: req.messages as OpenAI.Chat.Completions.ChatCompletionMessageParam[],
            ...(req.tools.length ? { tools: req.tools, tool_choice: "auto" as const } : {}),
          },
          { signal: req.signal },
        );
        const choice = res.choices?.[0];
        if (!choice) throw new ModelError(`model ${req.model} returned no choices`);
        const toolCalls = (choice.message.tool_calls ?? []).flatMap((c) =>
          c.type === "function" ? [{ id: c.id, name: c.function.name, arguments: c.function.arguments ?? "{}" }] : [],
        );
        return {
          content: choice.message.content ?? "",
          toolCalls,
          usage: { input: res.usage?.prompt_tokens ?? 0, output: res.usage?.completion_tokens ?? 0 },
          finishReason: choice.finish_reason ?? "stop",
        };
      } catch (err) {
        if (err instanceof ModelError) throw err;
        if (req.signal?.aborted) throw err;
        const status = err instanceof OpenAI.APIError ? err.status : undefined;
        const detail = err instanceof Error ? err.message : String(err);
        throw new ModelError(`model call failed (${opts.id}/${req.model}${status ? `, HTTP ${status}` : ""}): ${detail}`, { cause: err });
      }
    },
  };
}
