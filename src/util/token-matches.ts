/**
 * Whether a presented secret (gateway or hook token) is the expected one. Both are hashed first,
 * so the comparison takes the same time whatever was sent: comparing lengths before a
 * constant-time compare, as a plain timingSafeEqual needs, tells an attacker the token's length.
 */
import { createHash, timingSafeEqual } from "node:crypto";

export function tokenMatches(expected: string, given: string | undefined): boolean {
  if (!given) return false;
  return timingSafeEqual(digest(expected), digest(given));
}

function digest(text: string): Buffer {
  return createHash("sha256").update(text, "utf8").digest();
}
