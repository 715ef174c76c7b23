/**
 * sessions_list (R6–R9): rows of the sessions the requester may see, newest first. The limit is
 * applied after every filter (kinds, visibility, agent-to-agent), so asking for 5 rows of a kind
 * gives 5 rows when 5 exist.
 */
import type { App } from "../app.js";
import type { SessionKind } from "../sessions/keys.js";
import { toSessionRow, type SessionRow } from "../sessions/rows.js";
import { defineTool, SessionsListParams } from "./schemas.js";
import { cutLongTexts, withShownKeys } from "./sessions-history.js";
import type { AgentTool } from "./types.js";
import { visibilityOf, type SessionView } from "./visibility.js";

export const LIST_LIMIT_MAX = 200;
export const MESSAGE_LIMIT_MAX = 20;

export type SessionsListResult = { count: number; sessions: SessionRow[] } | { status: "error"; error: string };

export function createSessionsListTool(app: App, view: SessionView): AgentTool {
  return defineTool({
    name: "sessions_list",
    description: "List sessions (chats, groups, cron jobs, hooks, nodes, sub-agents) as rows, newest first. Optionally include each session's last messages.",
    params: SessionsListParams,
    invalid: (error): SessionsListResult => ({ status: "error", error }),
    async run(p): Promise<SessionsListResult> {
      const limit = Math.min(Math.floor(p.limit ?? LIST_LIMIT_MAX), LIST_LIMIT_MAX);
      const messageLimit = Math.min(Math.floor(p.messageLimit ?? 0), MESSAGE_LIMIT_MAX);
      const entries = app.sessions.list({
        limit,
        activeMinutes: p.activeMinutes,
        kinds: p.kinds?.length ? (p.kinds as SessionKind[]) : undefined,
        // R6: `global` is listed (as "main") only when it is the main bucket; `unknown` never.
        includeGlobal: app.config.session.scope === "global",
        includeUnknown: false,
        where: (entry) => visibilityOf(view, entry).visible,
      });
      const sessions = await Promise.all(
        entries.map(async (entry) => {
          const row = toSessionRow(entry, app.sessions.transcriptPath(entry), app.models.defaultRef(entry.agentId));
          // Cut like sessions_history's: one huge message (a webhook payload, a pasted log) would
          // otherwise go whole into the caller's model context, and could overflow it.
          if (messageLimit > 0) row.messages = cutLongTexts((await app.transcripts.readMessagesWithoutToolResults(row.transcriptPath, messageLimit)).map(withShownKeys)).messages;
          return row;
        }),
      );
      return { count: sessions.length, sessions };
    },
  });
}
