/**
 * `store.url` for Redis: `redis://[user:password@]host[:port][/db]` (`rediss://` for TLS). Parsed
 * in one place for `config check` and the store, so both refuse the same URLs with the same words.
 */

export interface RedisTarget {
  tls: boolean;
  host: string;
  port: number;
  db: number;
  username?: string;
  password?: string;
  /** "redis:host:port/db": for logs and `status`, never with credentials. */
  description: string;
  /** The URL as written, password replaced by "***": the only form an error message may show. */
  masked: string;
}

export const REDIS_URL_FORMS = '"redis://[user:password@]host[:port][/db]" (or "rediss://" for TLS)';

export function isRedisUrl(url: string): boolean {
  return /^rediss?:\/\//i.test(url);
}

/** The target of a redis:// URL; throws an error naming what is wrong (password masked). */
export function parseRedisUrl(url: string): RedisTarget {
  const masked = maskUrlPassword(url);
  const fail = (why: string) => new Error(`invalid store ${JSON.stringify(masked)}: ${why}; use ${REDIS_URL_FORMS}`);
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw fail("not a URL");
  }
  const scheme = parsed.protocol.slice(0, -1).toLowerCase();
  if (scheme !== "redis" && scheme !== "rediss") throw fail(`scheme "${scheme}" is not redis or rediss`);
  // WHATWG keeps IPv6 literals bracketed; the socket wants them bare.
  const host = parsed.hostname.replace(/^\[(.*)\]$/, "$1");
  if (!host) throw fail("no host");
  const port = parsed.port ? Number(parsed.port) : 6379;
  if (!Number.isInteger(port) || port < 1) throw fail(`port ${parsed.port} is not a port number`);
  const dbText = parsed.pathname.replace(/^\//, "");
  if (dbText !== "" && !/^\d+$/.test(dbText)) throw fail(`database "${dbText}" is not a number`);
  // Options in a query or fragment would be silently ignored: refused like unknown config keys.
  if (parsed.search || parsed.hash) throw fail("query parameters are not supported");
  const db = dbText === "" ? 0 : Number(dbText);
  const username = parsed.username ? decodeURIComponent(parsed.username) : undefined;
  const password = parsed.password ? decodeURIComponent(parsed.password) : undefined;
  const shownHost = host.includes(":") ? `[${host}]` : host;
  return {
    tls: scheme === "rediss",
    host,
    port,
    db,
    ...(username ? { username } : {}),
    ...(password ? { password } : {}),
    description: `${scheme}:${shownHost}:${port}/${db}`,
    masked,
  };
}

/**
 * `scheme://user:***@host…` for any URL that carries a password. The password ends at the last
 * "@", so one holding an unescaped "@" or "/" is still masked whole.
 */
export function maskUrlPassword(url: string): string {
  const userinfo = /^([a-z][a-z0-9+.-]*:\/\/[^:@/]*):/i.exec(url);
  const at = url.lastIndexOf("@");
  if (!userinfo || at < userinfo[0].length) return url;
  return `${userinfo[1]}:***${url.slice(at)}`;
}
