/**
 * Splits a reply into platform-sized messages (Telegram 4096, Discord 2000 plus a 17-line soft
 * cap). A naive split inside a ``` block makes every later chunk render as broken markdown, so
 * fences are closed at the end of a chunk and reopened, with the same info string, at the start
 * of the next one; room for those synthetic lines is reserved so the limit always holds
 * (ecosystem §B item 16, openclaw-behaviour §8 item 75).
 */

export interface ChunkOptions {
  /**
   * Soft cap on lines per chunk (Discord: 17). Soft because a split fence needs at least three
   * lines of its own; when no break fits under the cap, the one overshooting it least is taken.
   */
  maxLines?: number;
}

interface Fence {
  /** Start of the opening fence line. */
  openStart: number;
  /** First character after the opening line's newline. */
  bodyStart: number;
  /** Start of the closing fence line; Infinity when the text ends inside the fence. */
  closeStart: number;
  /** End of the closing fence line (its newline or the end of the text); end of text when unclosed. */
  closeEnd: number;
  /** The opening line without indentation, e.g. "```ts", repeated to reopen the fence. */
  opener: string;
  /** The marker run, e.g. "```" or "~~~~", used to close the fence early. */
  closer: string;
}

// Any indentation: CommonMark's limit of 3 spaces holds only outside containers, and models
// indent fences inside (nested) list items deeper; Discord finds ``` wherever it is.
const OPEN_FENCE = /^[ \t]*(`{3,}|~{3,})(.*)$/;
const CLOSE_FENCE = /^[ \t]*(`{3,}|~{3,})[ \t]*$/;

/** Break quality, best first: the whole rest, a paragraph, a line, a word, anywhere. */
const END = 0;
const PARAGRAPH = 1;
const NEWLINE = 2;
const SPACE = 3;
const HARD = 4;

export function chunkText(text: string, limit: number, opts: ChunkOptions = {}): string[] {
  // Two code units is the least that fits any code point without splitting a surrogate pair.
  if (!Number.isInteger(limit) || limit < 2) throw new RangeError(`chunk limit must be an integer >= 2, got ${limit}`);
  const { maxLines } = opts;
  if (maxLines !== undefined && (!Number.isInteger(maxLines) || maxLines < 1)) {
    throw new RangeError(`maxLines must be a positive integer, got ${maxLines}`);
  }

  // CRLF would hide fence lines from the line regexes and count twice against the limit.
  const src = text.replace(/\r\n?/g, "\n").trimEnd();
  // A fence whose own lines leave no room for content cannot be kept balanced; it degrades to
  // plain text so the hard limit still holds for absurdly small limits.
  const fences = findFences(src).filter((f) => fenceOverhead(f) <= limit);
  const bodyAt = (p: number) => {
    const f = fenceNear(fences, p);
    return f && f.bodyStart <= p && p < f.closeStart ? f : undefined;
  };

  const chunks: string[] = [];
  let pos = skipSpace(src, 0);
  while (pos < src.length) {
    const reopened = bodyAt(pos);
    const prefix = reopened ? `${reopened.opener}\n` : "";
    const end = pickBreak(src, pos, prefix, limit, maxLines, fences);
    const closing = fenceEndingInside(fences, end);
    // Whitespace inside a fence is code (indentation, blank lines), so only plain text is trimmed.
    const piece = closing ? src.slice(pos, end) : src.slice(pos, end).trimEnd();
    chunks.push(prefix + piece + (closing ? `\n${closing.closer}` : ""));

    let next = isSpace(src[end]) ? end + 1 : end;
    // Nothing but whitespace left in the fence: our synthetic closer replaces the original one
    // instead of reopening the fence for an empty chunk.
    if (closing && skipSpace(src, next) >= Math.min(closing.closeStart, src.length)) next = closing.closeEnd;
    pos = bodyAt(next) ? next : skipSpace(src, next);
  }
  return chunks;
}

/**
 * The end (exclusive) of the next chunk's slice of `src`: the furthest break of the best
 * quality that fits, among those that overshoot maxLines least.
 */
function pickBreak(
  src: string,
  pos: number,
  prefix: string,
  limit: number,
  maxLines: number | undefined,
  fences: Fence[],
): number {
  // maxLines is soft: when no break keeps under it (a fence needs 3 lines), take the breaks
  // that overshoot it least rather than dropping the cap altogether.
  let leastExcess = Infinity;
  let byKind: number[] = [];
  /** Every hard break at the least excess, in order (see wholeGraphemeBreak). */
  let hard: number[] = [];
  const prefixLines = prefix ? 1 : 0;
  let newlines = 0;
  const last = Math.min(src.length, pos + limit - prefix.length);
  for (let end = pos + 1; end <= last; end++) {
    if (src[end - 1] === "\n") newlines++;
    if (splitsSurrogatePair(src, end) || splitsFenceLine(fences, end)) continue;
    const closing = fenceEndingInside(fences, end);
    if (prefix.length + (end - pos) + (closing ? closing.closer.length + 1 : 0) > limit) continue;
    const lines = prefixLines + newlines + 1 + (closing ? 1 : 0);
    const excess = maxLines === undefined ? 0 : Math.max(0, lines - maxLines);
    if (excess > leastExcess) continue;
    if (excess < leastExcess) {
      leastExcess = excess;
      byKind = [];
      hard = [];
    }
    const kind = classify(src, end);
    byKind[kind] = end;
    if (kind === HARD) hard.push(end);
  }
  const best = byKind.findIndex((end) => end !== undefined);
  // fenceOverhead() guarantees a chunk can always hold one code point plus any fence lines.
  if (best === -1) throw new Error(`chunkText: no break fits at ${pos} (limit ${limit})`);
  return best === HARD ? wholeGraphemeBreak(src, pos, hard) : byKind[best];
}

const graphemes = new Intl.Segmenter(undefined, { granularity: "grapheme" });

/**
 * The furthest of the hard breaks (all > pos, ascending) that does not cut a grapheme cluster:
 * a cut one shows as two broken glyphs (a mark on a dotted circle, a family as its members, every
 * later flag paired with the wrong letter). Whitespace breaks never fall inside a cluster. Only a
 * cluster longer than a whole chunk is cut, at a code point.
 */
function wholeGraphemeBreak(src: string, pos: number, hard: number[]): number {
  const last = hard[hard.length - 1];
  // A boundary depends on the text before it and on the one code point (two units at most) after it.
  const segments = graphemes.segment(src.slice(pos, last + 2));
  for (let i = hard.length - 1; i >= 0; ) {
    const start = pos + segments.containing(hard[i] - pos)!.index;
    if (start === hard[i]) return start;
    while (i >= 0 && hard[i] > start) i--;
  }
  return last;
}

/** Spaces that glue their neighbours (UAX #14 class GL): "10 km", French "vraiment ?". */
const NO_BREAK_SPACE = /[\u00a0\u2007\u202f\ufeff]/;

function classify(src: string, end: number): number {
  if (end === src.length) return END;
  if (src[end] !== "\n") return isSpace(src[end]) && !NO_BREAK_SPACE.test(src[end]) ? SPACE : HARD;
  let next = end + 1;
  while (src[next] !== "\n" && isSpace(src[next])) next++;
  return src[next] === "\n" ? PARAGRAPH : NEWLINE;
}

/**
 * The only fence that can contain position `p`: the first one not closed before it. Fences are
 * disjoint and in order, so a binary search keeps long replies with many code blocks linear-ish.
 */
function fenceNear(fences: Fence[], p: number): Fence | undefined {
  let lo = 0;
  let hi = fences.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (fences[mid].closeEnd < p) lo = mid + 1;
    else hi = mid;
  }
  return fences[lo];
}

/** The fence a chunk ending at `end` would leave open, needing a synthetic closer. */
function fenceEndingInside(fences: Fence[], end: number): Fence | undefined {
  const f = fenceNear(fences, end);
  return f && f.bodyStart < end && end < f.closeStart ? f : undefined;
}

/**
 * Ending a chunk inside a fence's opening line would mangle its info string (or leave an empty
 * fence), and ending it inside the closing line would leave a stray marker behind.
 */
function splitsFenceLine(fences: Fence[], end: number): boolean {
  const f = fenceNear(fences, end);
  return f !== undefined && ((f.openStart < end && end <= f.bodyStart) || (f.closeStart <= end && end < f.closeEnd));
}

function splitsSurrogatePair(src: string, end: number): boolean {
  const before = src.charCodeAt(end - 1);
  const after = src.charCodeAt(end);
  return before >= 0xd800 && before <= 0xdbff && after >= 0xdc00 && after <= 0xdfff;
}

/** Worst case a fence costs a chunk: opening line, one code point, synthetic or original closer. */
function fenceOverhead(f: Fence): number {
  const closeLine = Number.isFinite(f.closeStart) ? f.closeEnd - f.closeStart : 0;
  return f.bodyStart - f.openStart + 2 + 1 + Math.max(f.closer.length, closeLine);
}

/** Fences as CommonMark pairs them: a closer of the same char at least as long as the opener. */
function findFences(src: string): Fence[] {
  const fences: Fence[] = [];
  let open: { openStart: number; bodyStart: number; opener: string; closer: string } | undefined;
  for (let lineStart = 0; lineStart <= src.length; ) {
    const newline = src.indexOf("\n", lineStart);
    const lineEnd = newline === -1 ? src.length : newline;
    const line = src.slice(lineStart, lineEnd);
    if (open) {
      const m = CLOSE_FENCE.exec(line);
      if (m && m[1][0] === open.closer[0] && m[1].length >= open.closer.length) {
        fences.push({ ...open, closeStart: lineStart, closeEnd: lineEnd });
        open = undefined;
      }
    } else {
      const m = OPEN_FENCE.exec(line);
      // A backtick fence's info string may not contain backticks (that is inline code).
      if (m && !(m[1][0] === "`" && m[2].includes("`"))) {
        open = { openStart: lineStart, bodyStart: lineEnd + 1, opener: line.trim(), closer: m[1] };
      }
    }
    if (newline === -1) break;
    lineStart = newline + 1;
  }
  // An unclosed fence runs to the end of the text, as CommonMark renders it; one with no body
  // is just a stray marker line.
  if (open && open.bodyStart < src.length) fences.push({ ...open, closeStart: Infinity, closeEnd: src.length });
  return fences;
}

function skipSpace(src: string, pos: number): number {
  while (pos < src.length && isSpace(src[pos])) pos++;
  return pos;
}

function isSpace(ch: string | undefined): boolean {
  return ch !== undefined && /\s/.test(ch);
}
