/**
 * A conversation as strict chat templates take it. Pure.
 *
 * Mistral's and Gemma's templates refuse a conversation whose turns do not alternate
 * user/assistant, starting with the user, and a session's transcript often does not: a group's
 * unmentioned messages are recorded without an answer, and so is a message whose run failed; the
 * history window may begin with an answer. Consecutive user turns are joined into one (the
 * transcript keeps them apart), and leading turns before the first user turn are left out.
 * Assistant tool calls and their results stay as they are: templates that take tools take them.
 */
import type { ChatMessage } from "./provider.js";

export function alternating(messages: readonly ChatMessage[]): ChatMessage[] {
  const lead = messages.findIndex((m) => m.role !== "system");
  if (lead < 0) return [...messages];
  const out: ChatMessage[] = messages.slice(0, lead);
  let started = false;
  for (const m of messages.slice(lead)) {
    if (!started && m.role !== "user") continue;
    started = true;
    const prev = out[out.length - 1];
    if (m.role === "user" && prev?.role === "user") out[out.length - 1] = { role: "user", content: `${prev.content ?? ""}\n\n${m.content ?? ""}` };
    else out.push(m);
  }
  return out;
}
