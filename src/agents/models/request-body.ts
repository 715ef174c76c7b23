/**
 * The Chat Completions request body, built from cached JSON pieces.
 *
 * A run sends the whole history window (up to 60 messages) and every tool's JSON schema on each
 * model call, yet between two calls of a session only the newest messages differ. Serialising
 * each message and tool definition once and joining the pieces halves the body's cost and most of
 * its garbage on the inbound path (bench/). The messages come from context.ts, which hands out the
 * same frozen message, carrying its JSON (withJson), for a transcript message every time; tool
 * parameter schemas are built and frozen once per schema (tools/schemas.ts) and their JSON cached
 * by identity. Other pieces are serialised afresh: they could change after their JSON was taken.
 */
import { deepFreeze } from "../../util/freeze.js";
import type { ChatMessage, CompletionRequest, ToolDefinition } from "./provider.js";

/** A message's JSON, carried by the message itself (see withJson). */
const JSON_OF = Symbol("json");
/** parameters object → `${name}\u0000${description}` → the definition's JSON. */
const toolJson = new WeakMap<object, Map<string, string>>();

/**
 * `m`, frozen, carrying its own JSON: for messages kept and sent again and again (context.ts's,
 * one per transcript message). Carried rather than looked up in a WeakMap by identity, whose
 * table, sized for every cached message of every session, was regrown and shrunk as they came and
 * went — a large allocation in the old generation each time (bench/).
 */
export function withJson<T extends ChatMessage>(m: T): T {
  Object.defineProperty(m, JSON_OF, { value: JSON.stringify(m) });
  return deepFreeze(m);
}

function serializeMessage(m: ChatMessage): string {
  return (m as ChatMessage & { [JSON_OF]?: string })[JSON_OF] ?? JSON.stringify(m);
}

function serializeTool(t: ToolDefinition): string {
  const { name, description, parameters } = t.function;
  if (!Object.isFrozen(parameters)) return JSON.stringify(t);
  let byName = toolJson.get(parameters);
  if (!byName) toolJson.set(parameters, (byName = new Map()));
  const key = `${name}\u0000${description}`;
  let json = byName.get(key);
  if (json === undefined) {
    json = JSON.stringify(t);
    byName.set(key, json);
  }
  return json;
}

/** Same JSON as `JSON.stringify({model, messages, tools?, tool_choice?})`. */
export function chatRequestBody(req: Pick<CompletionRequest, "model" | "messages" | "tools">): string {
  let body = `{"model":${JSON.stringify(req.model)},"messages":[`;
  for (let i = 0; i < req.messages.length; i++) body += (i ? "," : "") + serializeMessage(req.messages[i]);
  body += "]";
  if (req.tools.length) {
    body += ',"tools":[';
    for (let i = 0; i < req.tools.length; i++) body += (i ? "," : "") + serializeTool(req.tools[i]);
    body += '],"tool_choice":"auto"';
  }
  return `${body}}`;
}
