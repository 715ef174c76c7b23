import { describe, expect, it } from "vitest";
import { chunkText } from "../../src/delivery/chunk.js";

const FENCE_LINE = /^\s*(`{3,}|~{3,})/;

function stripFenceLines(s: string): string {
  return s
    .split("\n")
    .filter((line) => !FENCE_LINE.test(line))
    .join("\n");
}

function words(s: string): string[] {
  return s.split(/\s+/).filter(Boolean);
}

/** A chunk renders correctly only if every fence it opens is closed again inside it. */
function fencesBalanced(chunk: string): boolean {
  let open: string | undefined;
  for (const line of chunk.split("\n")) {
    const m = /^\s*(`{3,}|~{3,})/.exec(line);
    if (!m) continue;
    if (open === undefined) open = m[1];
    else if (m[1][0] === open[0] && m[1].length >= open.length && line.trim() === m[1]) open = undefined;
  }
  return open === undefined;
}

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

describe("chunkText", () => {
  it.each([
    ["empty text", ""],
    ["spaces only", "   "],
    ["mixed whitespace", " \n\t\n  \r\n"],
  ])("returns no chunks for %s", (_name, text) => {
    expect(chunkText(text, 100)).toEqual([]);
  });

  it.each([
    ["text under the limit is one trimmed chunk", "  hello world \n", 100, ["hello world"]],
    ["text exactly at the limit is one chunk", "abcde", 5, ["abcde"]],
    ["a blank line beats a later newline", "aaa\n\nbbb\nccc ddd", 12, ["aaa", "bbb\nccc ddd"]],
    ["a newline beats a later space", "aaa bbb\nccc ddd eee", 12, ["aaa bbb", "ccc ddd eee"]],
    ["a space beats a hard break", "aaaa bbbbbb", 8, ["aaaa", "bbbbbb"]],
    ["a word longer than the limit is hard-broken", "abcdefghij", 4, ["abcd", "efgh", "ij"]],
    // No-break spaces keep a number with its unit, a French "?" with its sentence.
    ["a no-break space is not a place to break", "Il faut 10\u00a0km", 12, ["Il faut", "10\u00a0km"]],
    ["a narrow no-break space is not either", "Oui vraiment\u202f?", 13, ["Oui", "vraiment\u202f?"]],
    ["a figure space (digit groups) is not either", "Total 1\u2007000", 10, ["Total", "1\u2007000"]],
    ["a zero-width no-break space is not either", "aaaa b\ufeffc", 7, ["aaaa", "b\ufeffc"]],
    ["whitespace around a break is trimmed", "aaa   \n\n   bbb", 5, ["aaa", "bbb"]],
    ["CRLF line endings count as one newline", "aaa\r\nbbb", 5, ["aaa", "bbb"]],
    // Sent as is, a bare CR shows as nothing (or a glyph) on most platforms, and hides fence lines.
    ["a bare CR (old Mac line ending) becomes a newline", "aaa\rbbb", 100, ["aaa\nbbb"]],
    ["a blank line holding spaces is still a paragraph break", "aaa\n \nbbb\nccc", 12, ["aaa", "bbb\nccc"]],
  ])("%s", (_rule, text, limit, expected) => {
    expect(chunkText(text, limit)).toEqual(expected);
  });

  it.each([
    ["emoji each take two code units", "😀😀😀", 3, ["😀", "😀", "😀"]],
    ["a pair straddling the limit moves whole to the next chunk", "a😀b", 2, ["a", "😀", "b"]],
    ["astral letters inside a word", "𝒳𝒳𝒳𝒳x", 5, ["𝒳𝒳", "𝒳𝒳x"]],
    // U+10000 is D800 DC00 and U+10FFFF is DBFF DFFF: both ends of the surrogate ranges.
    ["the first and the last astral code points", "a\u{10000}b\u{10FFFF}c", 2, ["a", "\u{10000}", "b", "\u{10FFFF}", "c"]],
  ])("never splits a surrogate pair: %s", (_case, text, limit, expected) => {
    expect(chunkText(text, limit)).toEqual(expected);
  });

  // A hard break inside a grapheme cluster shows as two broken glyphs: the next message starts
  // with a dangling mark on a dotted circle, or every later flag pairs with the wrong letter.
  it.each([
    ["flags (regional indicator pairs) stay paired", "🇺🇸🇬🇧🇫🇷🇩🇪", 6, ["🇺🇸", "🇬🇧", "🇫🇷", "🇩🇪"]],
    ["an emoji ZWJ sequence stays whole", "👨‍👩‍👧👨‍👩‍👧", 10, ["👨‍👩‍👧", "👨‍👩‍👧"]],
    ["a skin tone stays on its emoji", "👍🏽👍🏽", 6, ["👍🏽", "👍🏽"]],
    ["a keycap stays whole", "1️⃣2️⃣", 4, ["1️⃣", "2️⃣"]],
    ["a combining accent stays on its letter", "e\u0301e\u0301e\u0301", 3, ["e\u0301", "e\u0301", "e\u0301"]],
    // Thai is written without spaces, so a long Thai reply is only ever hard-broken.
    ["Thai vowel and tone marks stay on their consonant", "กี่กี่กี่", 4, ["กี่", "กี่", "กี่"]],
    ["a cluster longer than the limit is still split, at code points", "👨‍👩‍👧", 4, ["👨‍", "👩‍", "👧"]],
  ])("never splits a grapheme cluster that fits: %s", (_case, text, limit, expected) => {
    expect(chunkText(text, limit)).toEqual(expected);
  });

  it.each([
    [
      "a backtick fence keeps its info string when reopened",
      "```ts\nconst a = 1;\nconst b = 2;\nconst c = 3;\n```",
      35,
      ["```ts\nconst a = 1;\nconst b = 2;\n```", "```ts\nconst c = 3;\n```"],
    ],
    [
      "a tilde fence is closed with its own marker",
      "~~~~\nline one\nline two\n~~~~",
      18,
      ["~~~~\nline one\n~~~~", "~~~~\nline two\n~~~~"],
    ],
    [
      "indentation inside a fence survives the split",
      "```py\ndef f():\n    return 1\n```",
      22,
      ["```py\ndef f():\n```", "```py\n    return 1\n```"],
    ],
    [
      "text around a split fence stays outside it",
      "Intro.\n```\nabc\ndef\n```\nEnd.",
      20,
      ["Intro.\n```\nabc\n```", "```\ndef\n```\nEnd."],
    ],
    [
      "an unclosed fence is closed in every chunk",
      "```sh\necho one\necho two",
      20,
      ["```sh\necho one\n```", "```sh\necho two\n```"],
    ],
    [
      "a fence opener with backticks in its info is inline code, not a fence",
      "```not `a` fence\nplain text here",
      20,
      ["```not `a` fence", "plain text here"],
    ],
    ["a trailing fence marker with no code after it stays plain text", "see:\n```ts\n", 100, ["see:\n```ts"]],
    [
      // Markdown about markdown: a longer fence shows a shorter one, which must not close it.
      "a ``` line inside a ```` fence is code, not the fence's end",
      "````md\n```js\nlet a = 1;\n```\nmore\n````",
      24,
      ["````md\n```js\n````", "````md\nlet a = 1;\n````", "````md\n```\nmore\n````"],
    ],
    ["a ``` line inside a ~~~ fence is code, not the fence's end", "~~~\n```\ncode\n```\n~~~", 12, ["~~~\n```\n~~~", "~~~\ncode\n~~~", "~~~\n```\n~~~"]],
    [
      "a fence with only blank lines left before its end is not reopened for them",
      "```py\nprint(1)\n   \n```\nafter",
      20,
      ["```py\nprint(1)\n```", "after"],
    ],
    [
      // Discord finds ``` anywhere in a line, and models indent code blocks inside list items.
      "a fence indented inside a list item is still closed and reopened",
      "1. Install:\n    ```bash\n    npm ci\n    npm test\n    ```",
      40,
      ["1. Install:\n    ```bash\n    npm ci\n```", "```bash\n    npm test\n    ```"],
    ],
    ["a tab-indented fence is a fence too", "- a:\n\t```\n\tx = 1\n\ty = 2\n\t```", 20, ["- a:\n\t```\n\tx = 1\n```", "```\n\ty = 2\n\t```"]],
    [
      "a fence whose opening line alone leaves no room for code degrades to plain text instead of failing",
      "```typescript\nlet x = 1;\n```",
      10,
      ["```typescr", "ipt", "let x = 1;", "```"],
    ],
  ])("%s", (_rule, text, limit, expected) => {
    const chunks = chunkText(text, limit);
    expect(chunks).toEqual(expected);
    for (const chunk of chunks) expect(chunk.length).toBeLessThanOrEqual(limit);
  });

  it("reserves room for the reopening and closing lines in every chunk of a long fence", () => {
    const body = Array.from({ length: 6 }, (_, i) => `row ${i}`).join("\n");
    const chunks = chunkText(`\`\`\`json\n${body}\n\`\`\``, 25);
    expect(chunks.length).toBeGreaterThan(1);
    for (const chunk of chunks) {
      expect(chunk.length).toBeLessThanOrEqual(25);
      expect(chunk.startsWith("```json\n")).toBe(true);
      expect(chunk.endsWith("\n```")).toBe(true);
    }
  });

  it.each([
    ["20 short lines split at 17 (Discord)", 20, 17, [17, 3]],
    ["exactly maxLines lines stay together", 17, 17, [17]],
    ["35 lines at 17", 35, 17, [17, 17, 1]],
  ])("maxLines soft-splits tall messages under the char limit: %s", (_case, lineCount, maxLines, sizes) => {
    const text = Array.from({ length: lineCount }, (_, i) => `line ${i}`).join("\n");
    const chunks = chunkText(text, 2000, { maxLines });
    expect(chunks.map((c) => c.split("\n").length)).toEqual(sizes);
  });

  it("maxLines counts the reopening and closing fence lines", () => {
    const text = "```\n" + Array.from({ length: 10 }, (_, i) => `x${i}`).join("\n") + "\n```";
    const chunks = chunkText(text, 2000, { maxLines: 5 });
    for (const chunk of chunks) {
      expect(chunk.split("\n").length).toBeLessThanOrEqual(5);
      expect(fencesBalanced(chunk)).toBe(true);
    }
    expect(words(chunks.map(stripFenceLines).join("\n"))).toEqual(words(stripFenceLines(text)));
  });

  it("maxLines yields to the fence when a fence cannot fit under it (soft cap)", () => {
    const chunks = chunkText("```\na\nb\n```", 100, { maxLines: 2 });
    expect(chunks).toEqual(["```\na\n```", "```\nb\n```"]);
  });

  it.each([
    ["limit 1", 1, undefined],
    ["fractional limit", 10.5, undefined],
    ["maxLines 0", 10, 0],
  ])("rejects %s", (_case, limit, maxLines) => {
    expect(() => chunkText("abc", limit, { maxLines })).toThrow(RangeError);
  });
});

/** mulberry32: tiny seeded PRNG so every generated case is reproducible from its seed. */
function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

interface Generated {
  text: string;
  longestWord: number;
}

function generate(rand: () => number, withFences: boolean): Generated {
  const pick = <T,>(xs: readonly T[]): T => xs[Math.floor(rand() * xs.length)];
  const int = (lo: number, hi: number) => lo + Math.floor(rand() * (hi - lo + 1));
  let longestWord = 0;
  const word = () => {
    const letters = "abcdefghijklmnopqrstuvwxyz";
    const long = rand() < 0.03;
    let w = "";
    const n = long ? int(40, 90) : int(1, 10);
    for (let i = 0; i < n; i++) w += rand() < 0.05 ? pick(["😀", "𝒳", "é"]) : pick([...letters]);
    longestWord = Math.max(longestWord, w.length);
    return w;
  };
  const line = (indent: string) => indent + Array.from({ length: int(1, 12) }, word).join(pick([" ", "  ", "\t"]));
  const blocks: string[] = [];
  const blockCount = int(1, 10);
  for (let b = 0; b < blockCount; b++) {
    if (withFences && rand() < 0.3) {
      const marker = pick(["```", "````", "~~~"]);
      const opener = marker + pick(["", "ts", "py", " json"]);
      const body = Array.from({ length: int(0, 8) }, () => line(pick(["", "  ", "    "]))).join("\n");
      // Only a fence with code in it can be left open: a bare trailing marker is plain text.
      const unclosed = b === blockCount - 1 && body !== "" && rand() < 0.3;
      blocks.push(unclosed ? `${opener}\n${body}` : `${opener}\n${body}${body ? "\n" : ""}${marker}`);
    } else {
      blocks.push(Array.from({ length: int(1, 5) }, () => line("")).join(pick(["\n", "\r\n"])));
    }
  }
  const text = pick(["", " ", "\n"]) + blocks.join(pick(["\n", "\n\n", "\n \n"])) + pick(["", "\n", "  "]);
  return { text, longestWord };
}

describe("chunkText properties over generated replies", () => {
  const cases = Array.from({ length: 300 }, (_, seed) => seed);

  it.each(cases)("seed %i: within limits, fences balanced, content preserved in order", (seed) => {
    const rand = prng(seed);
    const { text, longestWord } = generate(rand, true);
    const limit = 30 + Math.floor(rand() * 170);
    const maxLines = rand() < 0.5 ? undefined : 3 + Math.floor(rand() * 15);
    const chunks = chunkText(text, limit, { maxLines });
    const originalFenceLines = text.split(/\r?\n/).filter((l) => FENCE_LINE.test(l)).map((l) => l.trim());
    const allowedFenceLines = new Set([...originalFenceLines, ...originalFenceLines.map((l) => FENCE_LINE.exec(l)![1])]);

    for (const chunk of chunks) {
      expect(chunk.length).toBeLessThanOrEqual(limit);
      // Reopened fences repeat an original opener (same marker and info string) and synthetic
      // closers reuse its marker: no fence line is invented.
      for (const l of chunk.split("\n").filter((l) => FENCE_LINE.test(l))) expect(allowedFenceLines).toContain(l.trim());
      expect(chunk.trim()).not.toBe("");
      expect(LONE_SURROGATE.test(chunk)).toBe(false);
      expect(fencesBalanced(chunk)).toBe(true);
      if (maxLines !== undefined) expect(chunk.split("\n").length).toBeLessThanOrEqual(maxLines);
    }

    const original = stripFenceLines(text.replace(/\r\n/g, "\n"));
    const rebuilt = chunks.map(stripFenceLines).join("\n");
    // Hard breaks may cut a word in two, so the characters are always kept in order...
    expect(rebuilt.replace(/\s/g, "")).toBe(original.replace(/\s/g, ""));
    // ...and whole words are kept whenever every word fits in a chunk next to the fence lines.
    if (longestWord + 20 <= limit) expect(words(rebuilt)).toEqual(words(original));
  });

  it.each(cases)("seed %i: tiny limits still hold and keep the characters in order", (seed) => {
    const rand = prng(10_000 + seed);
    const { text } = generate(rand, false);
    const limit = 2 + Math.floor(rand() * 10);
    const chunks = chunkText(text, limit);
    for (const chunk of chunks) {
      expect(chunk.length).toBeLessThanOrEqual(limit);
      expect(LONE_SURROGATE.test(chunk)).toBe(false);
    }
    expect(chunks.join("").replace(/\s/g, "")).toBe(text.replace(/\s/g, ""));
  });
});
