/** A small seeded PRNG (mulberry32), so "random" kill points and inputs replay exactly. */
export function seededRandom(seed: number): { next(): number; int(min: number, max: number): number; pick<T>(items: readonly T[]): T } {
  let a = seed >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  return {
    next,
    int: (min, max) => min + Math.floor(next() * (max - min + 1)),
    pick: (items) => items[Math.floor(next() * items.length)],
  };
}

/**
 * A test's fixed seed, or the integer in the environment variable `name`: every CI run checks the
 * same cases, and a developer can run others (`SB_FUZZ_SEED=7 npx vitest run … test/fuzz`).
 */
export function seedFrom(name: string, fixed: number): number {
  const raw = process.env[name];
  if (raw === undefined || raw === "") return fixed;
  const seed = Number(raw);
  if (!Number.isSafeInteger(seed)) throw new Error(`${name} must be an integer, got ${JSON.stringify(raw)}`);
  return seed;
}
