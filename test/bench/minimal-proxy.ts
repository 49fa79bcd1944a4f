import { createServer, type IncomingHttpHeaders } from 'node:http';
import { parseArgs } from 'node:util';
import { Pool } from 'undici';

/*
 * The floor for any Node proxy, the baseline `npm run bench -- overhead` reports against: node:http in front of one
 * undici Pool (pipelining 1, as many connections as the load has), the request body piped upstream and the upstream
 * body piped back, nothing parsed, no per-request object beyond what node:http and undici make themselves.
 * `Pool.stream` writes the upstream body straight into the response, without the Readable that `request()` builds.
 */
const { values } = parseArgs({
  options: {
    upstream: { type: 'string' },
    port: { type: 'string', default: '0' },
    connections: { type: 'string', default: '256' },
  },
});
if (!values.upstream) throw new Error('--upstream URL is required');
const pool = new Pool(values.upstream, {
  connections: Number(values.connections),
  pipelining: 1,
  keepAliveTimeout: 30_000,
});

// Node's own list of headers that belong to one connection, not to the message.
const HOP_BY_HOP = new Set([
  'connection',
  'keep-alive',
  'transfer-encoding',
  'host',
  'upgrade',
  'proxy-connection',
  'te',
  'trailer',
]);

function forwardable(
  headers: IncomingHttpHeaders | Record<string, string | string[] | undefined>,
): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  for (const name in headers) {
    const value = headers[name];
    if (value !== undefined && !HOP_BY_HOP.has(name)) out[name] = value;
  }
  return out;
}

const server = createServer((req, res) => {
  const method = req.method ?? 'GET';
  pool
    .stream(
      {
        path: req.url ?? '/',
        method,
        headers: forwardable(req.headers),
        body: method === 'GET' || method === 'HEAD' ? null : req,
      },
      ({ statusCode, headers }) => {
        res.writeHead(statusCode, forwardable(headers));
        return res;
      },
    )
    .catch(() => {
      if (!res.headersSent) res.writeHead(502);
      res.end();
    });
});
server.keepAliveTimeout = 30_000;
server.listen(Number(values.port), '127.0.0.1', () => {
  const address = server.address();
  console.log(
    `minimal-proxy listening on http://127.0.0.1:${typeof address === 'object' && address ? address.port : values.port}`,
  );
});
const stop = () => {
  server.close();
  server.closeAllConnections();
  void pool.close().finally(() => process.exit(0));
};
process.once('SIGTERM', stop);
process.once('SIGINT', stop);
