/** The daemon's inbound store, seeded and read while no daemon runs on its state directory. */
import { mkdtempSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import type { InboundMessage } from "../../src/channels/types.js";
import { openKvStore, type KvSpace } from "../../src/store/kv.js";

/** An inbound record as stored (src/inbound/router.ts). */
export interface StoredInbound {
  state: string;
  resumes?: number;
  lastError?: string;
  givenUp?: { msg: InboundMessage; resumes: number; lastError?: string };
}

export async function withInboundStore<T>(stateDir: string, use: (space: KvSpace<unknown>) => Promise<T>): Promise<T> {
  const kv = await openKvStore(`sqlite://${path.join(stateDir, "switchboard.sqlite")}`, stateDir);
  try {
    return await use(kv.space("inbound"));
  } finally {
    await kv.close();
  }
}

/** A fresh state directory holding messages left pending by earlier processes, each resumed unfinished `resumes` times already. */
export async function stateDirWithPending(messages: Array<{ msg: InboundMessage; resumes?: number }>): Promise<string> {
  const stateDir = mkdtempSync(path.join(os.tmpdir(), "sb-pending-"));
  let receivedAt = Date.now() - 60_000;
  await withInboundStore(stateDir, async (space) => {
    for (const { msg, resumes } of messages) {
      const id = `${msg.channel}:${msg.accountId}:${msg.messageId}`;
      await space.set(id, { id, msg, state: "pending", receivedAt: receivedAt++, ...(resumes === undefined ? {} : { resumes }) });
    }
  });
  return stateDir;
}
