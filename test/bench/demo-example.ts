import { ClientProxyFactory, Transport, type ClientProxy } from '@nestjs/microservices';
import { firstValueFrom } from 'rxjs';
import { ENTRY, freePort, startNodeChild } from './processes.js';
import { fmtMs } from './targets.js';

/** How long the example's rates feed takes to answer, in this part of the demo. */
const FEED_LATENCY_MS = 300;

interface FeedStats {
  calls: number;
}

interface Refusal {
  code?: string;
  retryAfterMs?: number;
}

/**
 * The demo's last part: the plugin in a Nest app rather than the gateway. The exchange-rates example (apps/example)
 * runs as a child process, one hybrid app with HTTP routes, a GraphQL resolver and a TCP message handler that share
 * one named breaker. Returns the expectations that were not met.
 */
export async function exampleSection(say: (line?: string) => void): Promise<string[]> {
  const unmet: string[] = [];
  const rpcPort = await freePort();
  const example = await startNodeChild('example', ENTRY.example, [], /listening on (http:\/\/[^\s]+)/, {
    env: { PORT: '0', RPC_PORT: String(rpcPort), FEED_LATENCY_MS: String(FEED_LATENCY_MS) },
  });
  const client: ClientProxy = ClientProxyFactory.create({
    transport: Transport.TCP,
    options: { host: '127.0.0.1', port: rpcPort },
  });
  try {
    await client.connect();
    const feedCalls = async () => ((await (await fetch(`${example.url}/feed`)).json()) as FeedStats).calls;
    const graphql = async (base: string) => {
      const response = await fetch(`${example.url}/graphql`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ query: `{ rates(base: "${base}") { base rates { currency rate } } }` }),
      });
      return (await response.json()) as {
        data?: { rates?: { base: string } } | null;
        errors?: Array<{ extensions?: Refusal }>;
      };
    };
    const tcp = (base: string) => firstValueFrom(client.send<{ base: string }>('rates', { base }));
    const timed = async <T>(work: () => Promise<T>): Promise<{ value: T; ms: number }> => {
      const started = performance.now();
      const value = await work();
      return { value, ms: performance.now() - started };
    };

    let before = await feedCalls();
    const queries = await Promise.all(Array.from({ length: 100 }, () => graphql('EUR')));
    const answered = queries.filter((q) => q.data?.rates?.base === 'EUR').length;
    let calls = (await feedCalls()) - before;
    say(
      `   100 identical GraphQL queries at once -> ${calls === 1 ? '1 feed call' : `${calls} feed calls`} (${answered} answered).`,
    );
    if (calls !== 1 || answered !== 100) unmet.push('example: 100 GraphQL queries, 1 feed call');

    before = await feedCalls();
    const messages = await Promise.all(
      Array.from({ length: 100 }, () =>
        tcp('GBP').then(
          () => true,
          () => false,
        ),
      ),
    );
    calls = (await feedCalls()) - before;
    say(
      `   100 identical TCP messages at once -> ${calls === 1 ? '1 feed call' : `${calls} feed calls`} (${messages.filter(Boolean).length} answered).`,
    );
    if (calls !== 1) unmet.push('example: 100 TCP messages, 1 feed call');

    await fetch(`${example.url}/feed/mode`, {
      method: 'PUT',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ mode: 'down' }),
    });
    before = await feedCalls();
    const failures: number[] = [];
    for (const base of ['AUD', 'CAD', 'NZD', 'SEK', 'NOK'])
      failures.push((await fetch(`${example.url}/rates/${base}`)).status);
    const http = await timed(() => fetch(`${example.url}/rates/CHF`));
    const resolver = await timed(() => graphql('CHF'));
    const handler = await timed(() =>
      tcp('CHF').then(
        () => undefined,
        (error: unknown) => error as Refusal,
      ),
    );
    calls = (await feedCalls()) - before;
    const gqlCode = resolver.value.errors?.[0]?.extensions?.code;
    say(
      `   The feed goes down: ${failures.length} requests over HTTP fail (${[...new Set(failures)].join(', ')}) and open the breaker 'rates-feed'.`,
    );
    say(
      `   Opened over HTTP, it refuses the HTTP route (${http.value.status}) in ${fmtMs(http.ms)}, the GraphQL resolver (${gqlCode ?? 'answered'}) ` +
        `in ${fmtMs(resolver.ms)} and the TCP handler (${handler.value?.code ?? 'answered'}) in ${fmtMs(handler.ms)}; ` +
        (calls === 5 ? 'none of these three reached the feed.' : `the feed received ${calls - 5} of them.`),
    );
    if (
      http.value.status !== 503 ||
      gqlCode !== 'CIRCUIT_OPEN' ||
      handler.value?.code !== 'CIRCUIT_OPEN' ||
      calls !== 5
    ) {
      unmet.push('example: the breaker opened over HTTP refuses GraphQL and TCP');
    }
  } finally {
    await client.close();
    await example.stop();
  }
  return unmet;
}
