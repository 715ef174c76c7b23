/**
 * Several photos or videos sent together (an album) arrive as one message per item, and the
 * caption, if any, on one of them. Each item answered as a prompt of its own would get the sender
 * one answer per photo; so an album is answered once: through its first item, and through any
 * item that carries words of its own (a caption).
 */
import { BoundedMap } from "../util/bounded-map.js";

export interface AlbumItem {
  /** The album, unique within the account (chat and album ids together). */
  album: string;
  captioned: boolean;
}

/** Albums remembered: an album's items come within seconds of one another. */
const RECENT_ALBUMS = 1000;

export class AlbumGate {
  /** The message that stands for each recent album. */
  private readonly leads = new BoundedMap<string, string>(RECENT_ALBUMS);

  /**
   * Whether this item is handed over as a message. A platform's redelivery of the first item
   * (its hand-over failed) is admitted again.
   */
  admit(item: AlbumItem, messageId: string): boolean {
    const lead = this.leads.get(item.album);
    if (lead === undefined) {
      this.leads.set(item.album, messageId);
      return true;
    }
    return item.captioned || lead === messageId;
  }
}
