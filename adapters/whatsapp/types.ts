/**
 * The seam between the adapter and Baileys: the few socket members the adapter touches. The
 * production factory returns a real WASocket; tests return test/fakes/whatsapp-socket.ts.
 */
import type { WASocket } from "@whiskeysockets/baileys";

export type WASocketLike = Pick<WASocket, "ev" | "sendMessage" | "end"> & {
  user?: WASocket["user"];
  sendPresenceUpdate?: WASocket["sendPresenceUpdate"];
  /** Baileys v7 LID↔PN store; only `getPNForLID` is used, and only when the message lacks an *Alt JID. */
  signalRepository?: { lidMapping?: { getPNForLID(lid: string): Promise<string | null> } };
  /** Used in the background to learn group subjects; never awaited on the inbound path. */
  groupMetadata?: WASocket["groupMetadata"];
};

/** Builds a fresh, already-connecting socket. Called again on every reconnect. */
export type SocketFactory = () => Promise<WASocketLike>;
