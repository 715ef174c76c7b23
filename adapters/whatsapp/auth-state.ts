/**
 * Baileys auth state (creds + Signal keys) persisted through the adapter's AdapterKv, instead of
 * useMultiFileAuthState, which Baileys itself says not to use in production.
 *
 * Values are stored as strings made with Baileys' BufferJSON replacer, so Buffers/Uint8Arrays
 * survive whatever serialiser the kv uses underneath (keyv's JSON, a Map in tests, …).
 *
 * Every key lives under a generation prefix (`auth:<gen>:…`). AdapterKv cannot list or clear
 * keys, so "forget this login" is done by bumping the generation: the next load starts from fresh
 * creds and an empty key space. The old generation's rows are orphaned, not deleted (a few KB per
 * contact session); that is the price of a kv without iteration.
 */
import type { AuthenticationCreds, AuthenticationState, SignalDataSet, SignalDataTypeMap, SignalKeyStore } from "@whiskeysockets/baileys";
import type { AdapterKv } from "../../src/channels/types.js";

/** The runtime pieces of Baileys this module needs, passed in so importing it stays free. */
export type BaileysAuthLib = Pick<typeof import("@whiskeysockets/baileys"), "BufferJSON" | "initAuthCreds" | "proto">;

export interface KvAuthState {
  state: AuthenticationState;
  /** Persist the current creds; wire to `creds.update`. Writes are serialised in call order. */
  saveCreds(update?: Partial<AuthenticationCreds>): Promise<void>;
  /** Resolves once every creds write issued so far has finished, failed ones included. */
  settled(): Promise<void>;
  /** The generation these keys live under (diagnostics and tests). */
  generation: number;
}

const GENERATION_KEY = "auth:generation";

async function currentGeneration(kv: AdapterKv): Promise<number> {
  const gen = await kv.get<number>(GENERATION_KEY);
  return typeof gen === "number" && Number.isInteger(gen) && gen >= 0 ? gen : 0;
}

/** Forget the stored login (e.g. after the phone unlinked us); the next load shows a fresh QR. */
export async function resetKvAuthState(kv: AdapterKv): Promise<void> {
  await kv.set(GENERATION_KEY, (await currentGeneration(kv)) + 1);
}

export async function loadKvAuthState(kv: AdapterKv, lib: BaileysAuthLib): Promise<KvAuthState> {
  const generation = await currentGeneration(kv);
  const prefix = `auth:${generation}:`;
  const encode = (value: unknown): string => JSON.stringify(value, lib.BufferJSON.replacer);
  const decode = (raw: unknown): unknown => (typeof raw === "string" ? JSON.parse(raw, lib.BufferJSON.reviver) : undefined);

  const storedCreds = decode(await kv.get<string>(`${prefix}creds`)) as AuthenticationCreds | undefined;
  const creds: AuthenticationCreds = storedCreds ?? lib.initAuthCreds();

  const keys: SignalKeyStore = {
    async get<T extends keyof SignalDataTypeMap>(type: T, ids: string[]) {
      const out: { [id: string]: SignalDataTypeMap[T] } = {};
      await Promise.all(
        ids.map(async (id) => {
          let value = decode(await kv.get<string>(`${prefix}${type}:${id}`));
          if (value === undefined) return;
          // Baileys expects a protobuf instance here, exactly as useMultiFileAuthState does.
          if (type === "app-state-sync-key") value = lib.proto.Message.AppStateSyncKeyData.fromObject(value as object);
          out[id] = value as SignalDataTypeMap[T];
        }),
      );
      return out;
    },
    async set(data: SignalDataSet) {
      const writes: Promise<void>[] = [];
      for (const [type, entries] of Object.entries(data)) {
        for (const [id, value] of Object.entries(entries ?? {})) {
          const key = `${prefix}${type}:${id}`;
          // null means "delete" in Baileys' key store protocol (e.g. a consumed pre-key).
          writes.push(value == null ? kv.delete(key) : kv.set(key, encode(value)));
        }
      }
      await Promise.all(writes);
    },
  };

  let saving: Promise<void> = Promise.resolve();
  const saveCreds = (update?: Partial<AuthenticationCreds>): Promise<void> => {
    // Baileys merges updates into the creds object itself; merging again keeps us correct even if
    // our listener happens to run first.
    if (update) Object.assign(creds, update);
    const snapshot = encode(creds);
    saving = saving.catch(() => undefined).then(() => kv.set(`${prefix}creds`, snapshot));
    return saving;
  };

  return { state: { creds, keys }, saveCreds, settled: () => saving.catch(() => undefined), generation };
}
