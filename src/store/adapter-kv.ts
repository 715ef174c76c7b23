/**
 * The key/value spaces adapters get (AdapterKv): a space of the shared store, or — for a WhatsApp
 * login — a SQLite file of its own under `channels.whatsapp.authDir` (interfaces §2).
 */
import path from "node:path";
import type { AdapterKv } from "../channels/types.js";
import { openKvStore, type KvSpace } from "./kv.js";

export function asAdapterKv(space: KvSpace<unknown>): AdapterKv {
  return {
    get: async <T>(key: string) => (await space.get(key)) as T | undefined,
    set: async <T>(key: string, value: T) => space.set(key, value),
    delete: (key: string) => space.delete(key),
  };
}

export interface AuthDirKv {
  kv: AdapterKv;
  close(): Promise<void>;
}

/**
 * Baileys' creds and Signal keys in `<dir>/auth.sqlite`: the login is the operator's to back up,
 * move or delete (to link again) apart from the daemon's state, and it stays one device's login
 * when several daemons share a Redis store. A login an earlier version kept in the shared store
 * (`legacy`, the adapter's space there) is moved here first, so that no new QR is needed; moving
 * it again after a crash half-way copies the same rows.
 */
export async function openAuthDir(dir: string, legacy: KvSpace<unknown>): Promise<AuthDirKv> {
  const file = path.join(dir, "auth.sqlite");
  const store = await openKvStore(`sqlite://${file}`, dir);
  try {
    const space = store.space<unknown>("whatsapp");
    const earlier = await legacy.entries();
    for (const [key, value] of earlier) await space.set(key, value);
    for (const [key] of earlier) await legacy.delete(key);
    return { kv: asAdapterKv(space), close: () => store.close() };
  } catch (err) {
    await store.close();
    throw new Error(`cannot move the WhatsApp login into ${file}: ${(err as Error).message}`, { cause: err });
  }
}
