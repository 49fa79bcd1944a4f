import { afterEach, describe, expect, it } from '@jest/globals';
import { Controller, Get, type INestApplication, type LoggerService } from '@nestjs/common';
import { ExpressAdapter } from '@nestjs/platform-express';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import { Test } from '@nestjs/testing';
import { CircuitBreaker, Concurrency, OrchestratorModule, OrchestratorService } from 'nest-prompt-orchestrator';
import { Calls, FeatureModule, TwiceModule } from '../src/conventions.controller.js';

async function waitFor(condition: () => boolean, what: string, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}
const settle = (ms = 50) => new Promise((resolve) => setTimeout(resolve, ms));

describe.each(['express', 'fastify'] as const)('Nest conventions (%s)', (platform) => {
  let app: INestApplication | undefined;
  let url: string;

  const start = async (module: unknown = TwiceModule, logger?: LoggerService) => {
    Calls.reset();
    const moduleRef = await Test.createTestingModule({ imports: [module as never] }).compile();
    app = moduleRef.createNestApplication(platform === 'express' ? new ExpressAdapter() : new FastifyAdapter(), {
      logger: logger ?? false,
    });
    await app.listen(0, '127.0.0.1');
    if (platform === 'fastify') await (app.getHttpAdapter().getInstance() as { ready(): Promise<unknown> }).ready();
    url = await app.getUrl();
    return app;
  };
  afterEach(async () => {
    Calls.release();
    await app?.close();
    app = undefined;
  });

  it('forRoot() in the root and in a feature module: one interceptor (a retry runs the handler twice, not four times)', async () => {
    const started = await start();
    expect((await fetch(`${url}/c/retried`)).status).toBe(503);
    expect(Calls.counts.retried).toBe(2);
    expect(started.select(FeatureModule).get(OrchestratorService)).toBe(started.get(OrchestratorService));
  });

  it('a second forRoot() with different options is a start-up error that says so', async () => {
    await expect(
      Test.createTestingModule({
        imports: [OrchestratorModule.forRoot({ dedup: { windowMs: 1_000 } }), FeatureModule],
      }).compile(),
    ).rejects.toThrow(/imported more than once with different options/);
  });

  it('breakers are per route: b used first does not give a its settings, a failing does not refuse b', async () => {
    await start();
    expect((await fetch(`${url}/c/b`)).status).toBe(200);
    for (let i = 0; i < 2; i++) expect((await fetch(`${url}/c/a?fail=1`)).status).toBe(503);
    const refused = await fetch(`${url}/c/a`);
    expect(refused.status).toBe(503);
    expect((await refused.json()).code).toBe('circuit_open');
    expect(Calls.counts.a).toBe(2);
    expect((await fetch(`${url}/c/b`)).status).toBe(200);
  });

  it('two routes giving one breaker name different settings: a start-up error', async () => {
    @Controller('clash')
    class ClashController {
      @Get('x')
      @CircuitBreaker({ name: 'payments', failureThreshold: 2 })
      x() {
        return {};
      }

      @Get('y')
      @CircuitBreaker('payments')
      y() {
        return {};
      }
    }
    const moduleRef = await Test.createTestingModule({
      imports: [OrchestratorModule.forRoot()],
      controllers: [ClashController],
    }).compile();
    const clashing = moduleRef.createNestApplication(
      platform === 'express' ? new ExpressAdapter() : new FastifyAdapter(),
      { logger: false },
    );
    await expect(clashing.init()).rejects.toThrow(/share the breaker "payments" with different settings/);
    await clashing.close().catch(() => undefined);
  });

  it('a POST without a window: concurrent callers share the call, a later caller gets a new order', async () => {
    await start();
    const post = () =>
      fetch(`${url}/c/orders`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ item: 'book' }),
      });
    const first = [post(), post()];
    await waitFor(() => Calls.counts.orders === 1, 'the first order');
    await settle();
    Calls.release();
    const answers = await Promise.all(first);
    expect(answers.map((a) => a.headers.get('x-orchestrator-dedup')).sort()).toEqual(['joined', 'miss']);
    const later = await post();
    expect(later.headers.get('x-orchestrator-dedup')).toBe('miss');
    expect((await later.json()).orderId).toBe(2);
  });

  it('headers the handler set at run time (@Res({ passthrough: true })) reach joined and cached callers', async () => {
    await start();
    const leader = fetch(`${url}/c/stamped`);
    await waitFor(() => Calls.counts.stamped === 1, 'the leader');
    const joined = fetch(`${url}/c/stamped`);
    await settle();
    Calls.release();
    for (const answer of await Promise.all([leader, joined]))
      expect(answer.headers.get('x-computed-at')).toBe('call-1');
    const cached = await fetch(`${url}/c/stamped`);
    expect(cached.headers.get('x-orchestrator-dedup')).toBe('cached');
    expect(cached.headers.get('x-computed-at')).toBe('call-1');
  });

  it("errors in Nest's shape, with the code and the retry headers", async () => {
    await start();
    const answer = await fetch(`${url}/c/slow`);
    expect(answer.status).toBe(504);
    expect(answer.headers.get('x-should-retry')).toBe('false');
    expect(await answer.json()).toEqual({
      statusCode: 504,
      message: expect.any(String),
      error: 'Gateway Timeout',
      code: 'upstream_timeout',
    });
  });

  it('decorators in an app without the module: a start-up warning', async () => {
    @Controller('lonely')
    class LonelyController {
      @Get()
      @Concurrency(2)
      get() {
        return {};
      }
    }
    const warnings: string[] = [];
    const logger: LoggerService = {
      log() {},
      error() {},
      warn: (message: unknown) => void warnings.push(String(message)),
    };
    const moduleRef = await Test.createTestingModule({ controllers: [LonelyController] }).compile();
    app = moduleRef.createNestApplication(platform === 'express' ? new ExpressAdapter() : new FastifyAdapter(), {
      logger,
    });
    await app.init();
    expect(warnings).toEqual([expect.stringMatching(/LonelyController\.get.*OrchestratorModule is not imported/)]);
  });
});
