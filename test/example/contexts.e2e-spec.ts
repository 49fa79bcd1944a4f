import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from '@jest/globals';
import type { INestApplication } from '@nestjs/common';
import { ClientProxyFactory, Transport, type ClientProxy } from '@nestjs/microservices';
import { createServer } from 'node:net';
import { firstValueFrom } from 'rxjs';
import { startHybridApp } from '../../apps/example/src/hybrid-app.js';
import { RatesFeed } from '../../apps/example/src/rates-feed.js';

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as { port: number }).port;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

interface Refusal {
  code?: unknown;
  retryAfterMs?: unknown;
}

type Context = 'HTTP' | 'GraphQL' | 'TCP';

describe('the exchange-rates example as a hybrid app: one breaker for HTTP, GraphQL and TCP', () => {
  let app: INestApplication;
  let url: string;
  let rpcPort: number;
  let client: ClientProxy;
  let feed: RatesFeed;

  const http = (base: string) => fetch(`${url}/rates/${base}`);
  const graphql = async (base: string) => {
    const response = await fetch(`${url}/graphql`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ query: `{ rates(base: "${base}") { base rates { currency rate } } }` }),
    });
    return (await response.json()) as {
      data?: { rates?: { base: string } } | null;
      errors?: Array<{ message: string; extensions?: Refusal }>;
    };
  };
  const tcp = (base: string) => firstValueFrom(client.send<{ base: string }>('rates', { base }));
  const tcpError = (base: string) =>
    tcp(base).then(
      () => undefined,
      (error: unknown) => error as Refusal,
    );

  /** One call through `context` while the feed is down: answered as a failure. */
  async function failThrough(context: Context, base: string): Promise<void> {
    if (context === 'HTTP') expect((await http(base)).status).toBe(502);
    if (context === 'GraphQL') expect((await graphql(base)).errors).toHaveLength(1);
    if (context === 'TCP') expect(await tcpError(base)).toMatchObject({ status: 'error' });
  }

  /** One call through `context`: refused by the open breaker, as that context says it. */
  async function expectRefusedThrough(context: Context): Promise<void> {
    if (context === 'HTTP') {
      const refused = await http('EUR');
      expect(refused.status).toBe(503);
      expect((await refused.json()) as Refusal).toMatchObject({ code: 'circuit_open' });
    }
    if (context === 'GraphQL') {
      const refused = await graphql('EUR');
      expect(refused.errors?.[0].extensions).toMatchObject({ code: 'CIRCUIT_OPEN', retryAfterMs: expect.any(Number) });
    }
    if (context === 'TCP')
      expect(await tcpError('EUR')).toMatchObject({
        status: 'error',
        code: 'CIRCUIT_OPEN',
        retryAfterMs: expect.any(Number),
      });
  }

  beforeAll(async () => {
    rpcPort = await freePort();
    app = await startHybridApp({ host: '127.0.0.1', port: 0, rpcPort, logger: false });
    url = await app.getUrl();
    feed = app.get(RatesFeed);
    client = ClientProxyFactory.create({ transport: Transport.TCP, options: { host: '127.0.0.1', port: rpcPort } });
    await client.connect();
  });
  afterAll(async () => {
    await client?.close();
    await app?.close();
  });
  beforeEach(() => {
    feed.latencyMs = 300;
  });
  afterEach(() => {
    feed.mode = 'ok';
  });

  it('answers 100 identical concurrent GraphQL queries with one feed call', async () => {
    const before = feed.stats().calls;
    const answers = await Promise.all(Array.from({ length: 100 }, () => graphql('CHF')));
    expect(answers.every((answer) => answer.errors === undefined && answer.data?.rates?.base === 'CHF')).toBe(true);
    expect(feed.stats().calls - before).toBe(1);
  });

  it('answers 100 identical concurrent TCP messages with one feed call', async () => {
    const before = feed.stats().calls;
    const answers = await Promise.all(Array.from({ length: 100 }, () => tcp('GBP')));
    expect(answers.every((answer) => answer.base === 'GBP')).toBe(true);
    expect(feed.stats().calls - before).toBe(1);
  });

  // Each case opens the breaker through one context and sees it refuse in the others; the breaker closes again
  // between cases through its health probe once the feed is back.
  describe.each<[Context, Context[]]>([
    ['HTTP', ['GraphQL', 'TCP']],
    ['GraphQL', ['HTTP', 'TCP']],
    ['TCP', ['HTTP', 'GraphQL']],
  ])('the breaker opened through %s', (opener, others) => {
    afterEach(async () => {
      feed.mode = 'ok';
      // The health probe closes it (every 500 ms while open). Asked over TCP: its answers are not kept for a window.
      const deadline = Date.now() + 10_000;
      while (
        !(await tcp('USD').then(
          () => true,
          () => false,
        ))
      ) {
        if (Date.now() > deadline) throw new Error('the breaker did not close after the feed came back');
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
    });

    it(`refuses in ${others.join(' and ')} without calling the feed`, async () => {
      feed.mode = 'down';
      const before = feed.stats().calls;
      // Five failures (the breaker's threshold), each for another currency so that none is shared.
      for (const base of ['AUD', 'CAD', 'NZD', 'SEK', 'NOK']) await failThrough(opener, base);
      expect(feed.stats().calls - before).toBe(5);
      for (const context of [opener, ...others]) await expectRefusedThrough(context);
      expect(feed.stats().calls - before).toBe(5);
    });
  });
});
