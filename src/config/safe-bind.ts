/**
 * Binding beyond loopback without a token would hand the agent to the network (interfaces §3).
 * Checked by `start` and by `config check`, so that the check refuses what start would.
 */
import { isIP } from "node:net";
import type { Config } from "./schema.js";

/** Why the daemon must not start with this gateway, or undefined. */
export function unsafeBindProblem(config: Config): string | undefined {
  const bind = config.gateway.bind;
  const loopback = bind === "localhost" || bind === "::1" || (isIP(bind) === 4 && bind.startsWith("127."));
  if (loopback || config.gateway.auth.token) return undefined;
  return `refusing to bind the gateway to ${bind} without a token: set gateway.auth.token or SWITCHBOARD_GATEWAY_TOKEN, or bind to 127.0.0.1`;
}
