import { FastifyAdapter, type NestFastifyApplication } from '@nestjs/platform-fastify';
import { Test } from '@nestjs/testing';
import { AppModule } from '../src/app.module';
import { QuotesService } from '../src/quotes.service';
import { Upstream } from '../src/upstream';

async function waitFor(condition: () => boolean, what: string, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}
const settle = (ms = 100) => new Promise((resolve) => setTimeout(resolve, ms));

describe('nest-prompt-orchestrator in a Nest 11 app with module: nodenext, TypeScript 5.7 (Fastify, Jest CommonJS mode)', () => {
  let app: NestFastifyApplication;
  let url: string;
  let upstream: Upstream;

  beforeEach(async () => {
    const moduleRef = await Test.createTestingModule({ imports: [AppModule] }).compile();
    app = moduleRef.createNestApplication<NestFastifyApplication>(new FastifyAdapter(), { logger: false });
    await app.listen(0, '127.0.0.1');
    await app.getHttpAdapter().getInstance().ready();
    url = await app.getUrl();
    upstream = app.get(Upstream);
  });

  afterEach(async () => {
    upstream.release();
    await app.close();
  });

  it('loads the CommonJS build', () => {
    expect(require.resolve('nest-prompt-orchestrator')).toMatch(/dist[\\/]cjs[\\/]index\.js$/);
  });

  it('dedup: 200 concurrent identical requests run the handler once (1 miss, 199 joined), then cached', async () => {
    const post = () =>
      fetch(`${url}/answer`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ question: 'same' }),
      });
    const pending = Array.from({ length: 200 }, post);
    await waitFor(() => upstream.arrivals.answer === 200, '200 arrivals');
    await settle();
    upstream.release();
    const responses = await Promise.all(pending);
    const outcomes = responses.map((r) => r.headers.get('x-orchestrator-dedup'));
    expect(responses.every((r) => r.status === 200)).toBe(true);
    expect(outcomes.filter((o) => o === 'miss')).toHaveLength(1);
    expect(outcomes.filter((o) => o === 'joined')).toHaveLength(199);
    expect(new Set(await Promise.all(responses.map((r) => r.text()))).size).toBe(1);
    expect(upstream.calls.answer).toBe(1);

    const again = await post();
    expect(again.headers.get('x-orchestrator-dedup')).toBe('cached');
    expect(await again.json()).toEqual({ question: 'same', call: 1 });
    expect(upstream.calls.answer).toBe(1);
  });

  it('breaker: 5 failures, then an immediate 503 with x-should-retry: false and Retry-After', async () => {
    for (let i = 0; i < 5; i++) expect((await fetch(`${url}/fail`)).status).toBe(502);
    const refused = await fetch(`${url}/fail`);
    expect(refused.status).toBe(503);
    expect(refused.headers.get('x-should-retry')).toBe('false');
    expect(Number(refused.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    expect(await refused.json()).toMatchObject({ statusCode: 503, error: 'Service Unavailable', code: 'circuit_open' });
    expect(upstream.calls.fail).toBe(5); // refused without calling the failing upstream again
  });

  it('concurrency: the limit holds, one request waits, the overflow gets 429 at once', async () => {
    const first = [fetch(`${url}/slot`), fetch(`${url}/slot`), fetch(`${url}/slot`)];
    await waitFor(() => upstream.active === 2 && upstream.arrivals.slot === 3, '2 running, 1 queued');
    await settle();
    const overflow = await fetch(`${url}/slot`);
    expect(overflow.status).toBe(429);
    expect(overflow.headers.get('retry-after')).toBeTruthy();
    expect(overflow.headers.get('x-should-retry')).toBe('false');
    upstream.release();
    expect((await Promise.all(first)).map((r) => r.status)).toEqual([200, 200, 200]);
    expect(upstream.maxActive).toBe(2);
    expect(upstream.calls.slot).toBe(3);
  });

  it('timeout: @Timeout aborts the call through @CallSignal() and answers 504', async () => {
    // The upstream never answers: only the time limit can end this request.
    const response = await fetch(`${url}/hang`);
    expect(response.status).toBe(504);
    expect(await response.json()).toMatchObject({
      statusCode: 504,
      error: 'Gateway Timeout',
      code: 'upstream_timeout',
    });
    await waitFor(() => upstream.hungCallAborted, 'the hung call to see its signal abort');
  });

  it('@Orchestrate with a retry: a transient 503 is retried once, then answered', async () => {
    const response = await fetch(`${url}/flaky-once`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ n: 1 }),
    });
    expect(response.status).toBe(201);
    expect(response.headers.get('x-orchestrator-dedup')).toBe('miss');
    expect(await response.json()).toEqual({ echo: { n: 1 }, attempt: 2 });
  });

  it('StreamedResponse: streamed as SSE, then replayed from the window', async () => {
    const first = await fetch(`${url}/ticker`);
    expect(first.headers.get('content-type')).toContain('text/event-stream');
    expect(first.headers.get('x-orchestrator-dedup')).toBe('miss');
    expect(await first.text()).toBe('data: 1\n\ndata: 2\n\ndata: 3\n\n');
    const replay = await fetch(`${url}/ticker`);
    expect(replay.headers.get('x-orchestrator-dedup')).toBe('cached');
    expect(await replay.text()).toBe('data: 1\n\ndata: 2\n\ndata: 3\n\n');
    expect(upstream.calls.ticker).toBe(1);
  });

  it('OrchestratorService.run(): concurrent identical calls share one upstream call', async () => {
    const quotes = app.get(QuotesService);
    const answers = await Promise.all(Array.from({ length: 10 }, () => quotes.quote('ACME')));
    expect(answers.every((a) => a.price === 104)).toBe(true);
    expect(upstream.calls.quote).toBe(1);
    expect(await (await fetch(`${url}/quotes/ACME`)).json()).toEqual({ symbol: 'ACME', price: 104 });
    expect(upstream.calls.quote).toBe(1);
  });
});
