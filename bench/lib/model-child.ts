import { FakeModelServer, type Responder } from "../../test/fakes/model-server.js";

/**
 * Echoes the last user message; with SB_MODEL_SKIP_A2A=1 it also ends every agent-to-agent
 * reply-back and announce step at once (REPLY_SKIP / ANNOUNCE_SKIP), so a sessions_send bench
 * measures the call itself rather than the follow-up conversation.
 */
const echo: Responder = (req) => {
  const system = req.messages[0]?.role === "system" ? String(req.messages[0].content) : "";
  if (process.env.SB_MODEL_SKIP_A2A) {
    if (system.includes("Agent-to-agent reply step:")) return { content: "REPLY_SKIP" };
    if (system.includes("Agent-to-agent announce step:")) return { content: "ANNOUNCE_SKIP" };
  }
  const user = [...req.messages].reverse().find((m) => m?.role === "user");
  return { content: `echo: ${typeof user?.content === "string" ? user.content : ""}` };
};

const server = new FakeModelServer(echo, { history: false });
const baseUrl = await server.start();
process.send?.({ baseUrl });
process.on("SIGTERM", () => void server.stop().then(() => process.exit(0)));
process.on("disconnect", () => void server.stop().then(() => process.exit(0)));
