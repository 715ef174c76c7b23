import { describe, expect, it } from "vitest";
import { AlbumGate } from "../../src/channels/album-gate.js";

describe("AlbumGate", () => {
  it("an album is answered once: its first item, not the uncaptioned ones after it", () => {
    const gate = new AlbumGate();
    expect(gate.admit({ album: "c:1", captioned: false }, "m1")).toBe(true);
    expect(gate.admit({ album: "c:1", captioned: false }, "m2")).toBe(false);
    expect(gate.admit({ album: "c:1", captioned: false }, "m3")).toBe(false);
  });

  it("an item with a caption of its own is always handed over: those are the sender's words", () => {
    const gate = new AlbumGate();
    expect(gate.admit({ album: "c:1", captioned: true }, "m1")).toBe(true);
    expect(gate.admit({ album: "c:1", captioned: false }, "m2")).toBe(false);
    expect(gate.admit({ album: "c:1", captioned: true }, "m3")).toBe(true);
  });

  it("the first item delivered again (its hand-over failed) is admitted again; another album is its own", () => {
    const gate = new AlbumGate();
    expect(gate.admit({ album: "c:1", captioned: false }, "m1")).toBe(true);
    expect(gate.admit({ album: "c:1", captioned: false }, "m1")).toBe(true);
    expect(gate.admit({ album: "c:2", captioned: false }, "m2")).toBe(true);
  });
});
