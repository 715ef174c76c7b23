#!/usr/bin/env node
// Runs the TypeScript CLI through tsx, so `npm install` is the only set-up step (no build).
import { register } from "tsx/esm/api";

register();
await import("./main.ts");
