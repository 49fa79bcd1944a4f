/** Response headers a browser app may read: how the gateway answered, when to retry, and the id to quote. */
export const EXPOSED_HEADERS = [
  'x-orchestrator-dedup',
  'x-orchestrator-upstream',
  'retry-after',
  'x-request-id',
  'x-should-retry',
  'server-timing',
];

/**
 * CORS for browser apps: preflights (any path) are answered by the platform
 * before routing, so before the gateway's key check, as llama-server answers
 * them before its own. The allowed origin is echoed (with `Vary: Origin`);
 * requested headers are allowed as asked (a bare `*` would not cover
 * `Authorization`); no cookies are involved, so no credentials mode. The
 * proxied routes add the same headers to their answers themselves (the data
 * plane runs ahead of the platform).
 */
export function corsOptions(origins: string[] | '*') {
  return {
    origin: origins === '*' ? true : origins,
    methods: ['GET', 'HEAD', 'POST', 'DELETE', 'OPTIONS'],
    exposedHeaders: EXPOSED_HEADERS,
    maxAge: 600,
    optionsSuccessStatus: 204,
  };
}
