import { createServer, type IncomingHttpHeaders } from 'node:http';
import { pipeline } from 'node:stream/promises';
import { parseArgs } from 'node:util';
import { Agent, request, type Dispatcher } from 'undici';

// The floor for any Node proxy: forwards each request to --upstream over one keep-alive undici Agent, nothing else.
const { values } = parseArgs({ options: { upstream: { type: 'string' }, port: { type: 'string', default: '0' } } });
if (!values.upstream) throw new Error('--upstream URL is required');
const upstream = values.upstream;
const agent = new Agent({ connections: 1024, keepAliveTimeout: 30_000 });
const HOP_BY_HOP = new Set(['connection', 'keep-alive', 'transfer-encoding', 'host', 'upgrade', 'proxy-connection']);

const strip = (headers: IncomingHttpHeaders) =>
  Object.fromEntries(Object.entries(headers).filter(([name, value]) => value !== undefined && !HOP_BY_HOP.has(name)));

const server = createServer((req, res) => {
  const hasBody = req.method !== 'GET' && req.method !== 'HEAD';
  request(`${upstream}${req.url ?? '/'}`, {
    method: (req.method ?? 'GET') as Dispatcher.HttpMethod,
    headers: strip(req.headers) as Record<string, string | string[]>,
    body: hasBody ? req : undefined,
    dispatcher: agent,
  })
    .then(async ({ statusCode, headers, body }) => {
      res.writeHead(statusCode, strip(headers));
      await pipeline(body, res);
    })
    .catch(() => {
      if (!res.headersSent) res.writeHead(502);
      res.end();
    });
});
server.listen(Number(values.port), '127.0.0.1', () => {
  const address = server.address();
  console.log(`minimal-proxy listening on http://127.0.0.1:${typeof address === 'object' && address ? address.port : values.port}`);
});
const stop = () => {
  server.close();
  server.closeAllConnections();
  void agent.close().finally(() => process.exit(0));
};
process.once('SIGTERM', stop);
process.once('SIGINT', stop);
