/** Silence tokens a model answers with (`NO_REPLY`, `REPLY_SKIP`, `ANNOUNCE_SKIP`). Pure. */

/** Whitespace, punctuation and markdown marks (`, ~, ^, >) around a reply. */
const DRESSING = /^[\s\p{P}`~^>]+|[\s\p{P}`~^>]+$/gu;

/**
 * The reply is the skip token and nothing else. Models often dress the bare token — a full stop,
 * quotes, code or bold markup (`ANNOUNCE_SKIP.`, `` `ANNOUNCE_SKIP` ``, `**ANNOUNCE_SKIP**`) —
 * and such a reply, posted, puts the literal token in a chat; so marks around it are ignored.
 * Any word besides the token (or another letter case) still makes it a reply.
 */
export function isSkipToken(reply: string, token: string): boolean {
  return reply.replace(DRESSING, "") === token;
}
