#!/usr/bin/env -S node --max-semi-space-size=64 --heap-growing-percent=300
// Runs the TypeScript CLI through tsx, so `npm install` is the only set-up step (no build).
// The flags (also in package.json's start script) trade memory for fewer collector pauses, which
// set the inbound p99 (README, "Where the time goes"): a 64 MB young generation, against Node's
// 16 MB, lets a message's objects die young instead of being promoted (half the scavenge time at
// 2,000 msg/s); and the old generation may grow to 4× what the last full collection kept before
// the next one, where V8 chose ~2× for this daemon — half as many full collections.
import { register } from "tsx/esm/api";

register();
await import("./main.ts");
