/**
 * The request body is joined from cached JSON pieces (src/agents/models/request-body.ts); whatever
 * the cache holds, the body must equal JSON.stringify of the request.
 */
import { describe, expect, it } from "vitest";
import { chatRequestBody, withJson } from "../../src/agents/models/request-body.js";
import type { ChatMessage, ToolDefinition } from "../../src/agents/models/provider.js";
import { deepFreeze } from "../../src/util/freeze.js";

const plain = (req: { model: string; messages: ChatMessage[]; tools: ToolDefinition[] }) =>
  JSON.stringify({ model: req.model, messages: req.messages, ...(req.tools.length ? { tools: req.tools, tool_choice: "auto" } : {}) });

describe("chat request body", () => {
  it("equals JSON.stringify with and without tools", () => {
    const messages: ChatMessage[] = [deepFreeze({ role: "system", content: "sys" }), { role: "user", content: 'quote " and \u2028' }];
    const tools: ToolDefinition[] = [{ type: "function", function: { name: "a", description: "A", parameters: deepFreeze({ type: "object", properties: {} }) } }];
    for (const req of [{ model: "m", messages, tools }, { model: "m", messages, tools: [] }]) expect(chatRequestBody(req)).toBe(plain(req));
  });

  it("two tools sharing one frozen schema keep their own names and descriptions", () => {
    const parameters = deepFreeze({ type: "object", properties: {} });
    const first: ToolDefinition = { type: "function", function: { name: "same", description: "first", parameters } };
    const second: ToolDefinition = { type: "function", function: { name: "same", description: "second", parameters } };
    const messages: ChatMessage[] = [{ role: "user", content: "x" }];
    expect(chatRequestBody({ model: "m", messages, tools: [first] })).toBe(plain({ model: "m", messages, tools: [first] }));
    expect(chatRequestBody({ model: "m", messages, tools: [second] })).toBe(plain({ model: "m", messages, tools: [second] }));
  });

  it("an unfrozen message or schema changed after one body was built shows its change in the next", () => {
    const message: ChatMessage = { role: "user", content: "before" };
    const parameters: Record<string, unknown> = { type: "object", properties: {} };
    const tools: ToolDefinition[] = [{ type: "function", function: { name: "t", description: "T", parameters } }];
    chatRequestBody({ model: "m", messages: [message], tools });
    message.content = "after";
    parameters.required = ["x"];
    expect(chatRequestBody({ model: "m", messages: [message], tools })).toBe(plain({ model: "m", messages: [message], tools }));
  });
});

describe("withJson: a message carrying its own JSON", () => {
  it("is frozen, and the body built from it equals JSON.stringify (the carried JSON is no property of the message's own)", () => {
    const call: ChatMessage = withJson({ role: "assistant", content: null, tool_calls: [{ id: "c1", type: "function", function: { name: "f", arguments: "{}" } }] });
    expect(Object.isFrozen(call)).toBe(true);
    expect(Object.isFrozen(call.tool_calls)).toBe(true);
    expect(Object.keys(call)).toEqual(["role", "content", "tool_calls"]);
    const messages = [withJson({ role: "user", content: "hi \u2028" }), call];
    expect(chatRequestBody({ model: "m", messages, tools: [] })).toBe(plain({ model: "m", messages, tools: [] }));
  });
});
