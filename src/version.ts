import { createRequire } from "node:module";

/** The package version, reported in the gateway hello and `health`. */
export const VERSION: string = (createRequire(import.meta.url)("../package.json") as { version: string }).version;
