import { existsSync, mkdtempSync, renameSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import pino from "pino";
import { afterEach, describe, expect, it, vi } from "vitest";
import { LOCK_FILE, lockStateDir, StateDirInUseError, type StateLock } from "../../src/store/state-lock.js";

const dirs: string[] = [];
const locks: StateLock[] = [];
afterEach(async () => {
  for (const l of locks.splice(0)) await l.release();
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

function stateDir(): string {
  const dir = mkdtempSync(path.join(os.tmpdir(), "sb-lock-"));
  dirs.push(dir);
  return path.join(dir, "state");
}

describe("the state directory lock (one daemon per state)", () => {
  it("a second holder is refused with the first's pid, and may take the lock once it is released", async () => {
    const dir = stateDir();
    const first = await lockStateDir(dir);
    locks.push(first);
    const refused = await lockStateDir(dir).catch((err: unknown) => err);
    expect(refused).toBeInstanceOf(StateDirInUseError);
    expect(refused).toMatchObject({ stateDir: dir, holderPid: process.pid });
    await first.release();
    await first.release();
    expect(existsSync(path.join(dir, "switchboard.pid"))).toBe(false);
    locks.push(await lockStateDir(dir));
  });

  it("a lock file removed while its holder runs (a clean-up of the state directory) is taken again at once: a second daemon is still refused", async () => {
    const dir = stateDir();
    locks.push(await lockStateDir(dir));
    rmSync(path.join(dir, LOCK_FILE));
    // The holder notices by a watch on the file, not by polling: the file is back at once.
    await vi.waitFor(() => expect(existsSync(path.join(dir, LOCK_FILE))).toBe(true));
    const second = await lockStateDir(dir).catch((err: unknown) => err);
    if (!(second instanceof Error)) locks.push(second as StateLock);
    expect(second).toBeInstanceOf(StateDirInUseError);
    expect(second).toMatchObject({ holderPid: process.pid });
  });

  it("a clean-up that removes the pid file with the lock file: the lock taken again writes the pid again, so the refusal still names the holder", async () => {
    const dir = stateDir();
    locks.push(await lockStateDir(dir));
    rmSync(path.join(dir, LOCK_FILE));
    rmSync(path.join(dir, "switchboard.pid"));
    // The pid is written after the lock is held again: once it is back, both are.
    await vi.waitFor(() => expect(existsSync(path.join(dir, "switchboard.pid"))).toBe(true));
    const second = await lockStateDir(dir).catch((err: unknown) => err);
    if (!(second instanceof Error)) locks.push(second as StateLock);
    expect(second).toBeInstanceOf(StateDirInUseError);
    expect(second).toMatchObject({ holderPid: process.pid });
  });

  it("a lock file replaced while held (another file renamed over it, as rsync or a restore does) is taken again: a second daemon is still refused", async () => {
    const dir = stateDir();
    const lines: string[] = [];
    const log = pino({ level: "warn" }, { write: (line: string) => void lines.push(line) });
    locks.push(await lockStateDir(dir, { log }));
    const replacement = path.join(dir, "replacement");
    writeFileSync(replacement, "");
    renameSync(replacement, path.join(dir, LOCK_FILE));
    // The name never goes missing: only a new inode under it tells the holder its lock is on a file no longer there.
    await vi.waitFor(() => expect(lines.join("")).toMatch(/taken again/));
    const second = await lockStateDir(dir).catch((err: unknown) => err);
    if (!(second instanceof Error)) locks.push(second as StateLock);
    expect(second).toBeInstanceOf(StateDirInUseError);
    expect(second).toMatchObject({ holderPid: process.pid });
  });

  it("an unwritable state directory is a clear error, not a claim that another daemon holds it", async () => {
    const dir = stateDir();
    const file = path.join(path.dirname(dir), "not-a-dir");
    writeFileSync(file, "");
    await expect(lockStateDir(file)).rejects.toThrow(/not-a-dir/);
    await expect(lockStateDir(file)).rejects.not.toBeInstanceOf(StateDirInUseError);
  });
});
