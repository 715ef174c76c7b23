/**
 * How every durable store (SQLite, Redis) encodes keys and values: keyv's stored format, so a
 * plain keyv client reads back exactly what the daemon wrote, and the one rule on keys.
 */
const SURROGATE = /[\uD800-\uDFFF]/;
const LONE_SURROGATE = /\p{Cs}/u;

/**
 * SQLite and Redis store text as UTF-8, where an unpaired UTF-16 surrogate becomes U+FFFD: the
 * row would come back under another key (and distinct keys would collide). Values are safe (JSON
 * escapes).
 */
export function assertStorableKey(key: string): void {
  // Any surrogate code unit at all (a cheap test, rarely true) before the exact one for lone ones.
  if (SURROGATE.test(key) && LONE_SURROGATE.test(key)) throw new Error(`store write refused: key is not well-formed Unicode (${JSON.stringify(key)})`);
}

/**
 * Keyv's stored format (`{"value":…}`, strings starting with ":" escaped as "::…", Buffers as
 * ":base64:…"), so `keyv.get` and `entries()` read back exactly what was written. Plain
 * JSON.stringify is several times faster than keyv's own serialiser and gives the same text
 * unless some string starts with ":" or a Buffer is present — a JSON string delimiter followed by
 * ":" shows the first; those records take keyv's serialiser.
 */
const NEEDS_KEYV_CODEC = /[:,[]":|"type":"Buffer","data":\[/;

export function serializeKeyv(value: unknown): string {
  const fast = JSON.stringify({ value });
  if (typeof fast !== "string") throw new Error("store write failed: value cannot be serialised");
  return NEEDS_KEYV_CODEC.test(fast) ? JSON.stringify({ value }, keyvReplacer) : fast;
}

/** Inverse of serializeKeyv (and of keyv's serialiser): un-escapes "::…" and revives ":base64:…". */
export function deserializeKeyv(raw: string): { value?: unknown; expires?: number | null } {
  return (NEEDS_KEYV_CODEC.test(raw) ? JSON.parse(raw, keyvReviver) : JSON.parse(raw)) as { value?: unknown; expires?: number | null };
}

/** @keyv/serialize's encoding of string values and Buffers (keys are left as they are). */
function keyvReplacer(this: Record<string, unknown>, key: string, value: unknown): unknown {
  const original = this[key];
  if (Buffer.isBuffer(original)) return `:base64:${original.toString("base64")}`;
  return typeof value === "string" && value.startsWith(":") ? `:${value}` : value;
}

function keyvReviver(_key: string, value: unknown): unknown {
  if (typeof value !== "string") return value;
  if (value.startsWith(":base64:")) return Buffer.from(value.slice(8), "base64");
  return value.startsWith(":") ? value.slice(1) : value;
}

/** A stored value; undefined if it expired or does not parse (written by something else). */
export function parseKeyvValue(raw: string): unknown {
  try {
    const data = deserializeKeyv(raw);
    if (data.expires && data.expires < Date.now()) return undefined;
    return data.value;
  } catch {
    return undefined;
  }
}
