import { randomUUID } from 'node:crypto';
import { createServer } from 'node:http';
import { parseArgs } from 'node:util';
import { FixedAnswers } from '../../apps/mock-provider/src/fixed-answers.js';

/*
 * node:http alone, answering every request with one fixed chat completion once its body is read: what Node's HTTP
 * server costs per request before any proxy's work. The overhead bench measures it against nginx's cached answers
 * (row `nodehits`), beside the gateway's window hits, so that the table shows how much of the gateway's distance to
 * nginx is node:http's own. The answer and its headers are those of a window hit, less what only the gateway knows.
 */
const { values } = parseArgs({ options: { port: { type: 'string', default: '0' } } });

// The mock provider's own fixed answer: the bytes a window hit on the `nginxhits` row answers.
const ANSWER = new FixedAnswers(1, 'mock-model').json;
const LENGTH = String(ANSWER.length);

const server = createServer((request, response) => {
  request.on('data', () => undefined);
  request.on('end', () => {
    response.writeHead(200, [
      'x-request-id',
      randomUUID(),
      'content-type',
      'application/json; charset=utf-8',
      'content-length',
      LENGTH,
    ]);
    response.end(ANSWER);
  });
});
server.keepAliveTimeout = 65_000;
server.listen(Number(values.port), '127.0.0.1', () => {
  const address = server.address();
  if (address && typeof address === 'object')
    console.log(`fixed-answer server listening on http://127.0.0.1:${address.port}`);
});
process.on('SIGTERM', () => server.close(() => process.exit(0)));
