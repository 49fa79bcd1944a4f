import { afterEach, describe, expect, it } from '@jest/globals';
import {
  Body,
  Controller,
  Get,
  HttpCode,
  HttpException,
  Module,
  Post,
  Query,
  Res,
  type LoggerService,
} from '@nestjs/common';
import { Test } from '@nestjs/testing';
import {
  CallTimeout,
  CircuitBreaker,
  Concurrency,
  Dedup,
  OrchestratorModule,
  OrchestratorService,
  Retry,
  Timeout,
} from 'nest-prompt-orchestrator';
import { Gate, PLATFORMS, postJson, send, startApp, waitFor, type RunningApp } from '../support/platforms.js';

/**
 * What a Nest developer expects of a plugin, beyond the happy path: importing
 * it from several modules, breakers of their own per route, POSTs that are not
 * replayed, headers the handler set, and errors in Nest's shape.
 */
let calls: Record<string, number> = {};
const count = (name: string) => (calls[name] = (calls[name] ?? 0) + 1);
let gate = new Gate();

interface Reply {
  header(name: string, value: string): unknown;
}

@Controller('c')
class ConventionsController {
  @Get('retried')
  @Retry({ retries: 1, baseDelayMs: 1 })
  retried() {
    count('retried');
    throw new HttpException('upstream down', 503);
  }

  @Get('a')
  @CircuitBreaker({ failureThreshold: 2 })
  a(@Query('fail') fail?: string) {
    count('a');
    if (fail) throw new HttpException('a down', 503);
    return { route: 'a' };
  }

  @Get('b')
  @CircuitBreaker()
  b() {
    count('b');
    return { route: 'b' };
  }

  @Post('orders')
  @HttpCode(201)
  @Dedup()
  async order(@Body() body: { item: string }) {
    const id = count('orders');
    await gate.promise;
    return { orderId: id, item: body.item };
  }

  @Post('summaries')
  @HttpCode(200)
  @Dedup({ windowMs: 60_000 })
  summary(@Body() body: { text: string }) {
    return { call: count('summaries'), text: body.text };
  }

  @Get('prices')
  @Dedup()
  price() {
    return { call: count('prices') };
  }

  @Get('stamped')
  @Dedup()
  async stamped(@Res({ passthrough: true }) res: Reply) {
    const call = count('stamped');
    res.header('x-computed-at', `call-${call}`);
    await gate.promise;
    return { call };
  }

  @Get('slow')
  @CallTimeout(50)
  async slow() {
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    return {};
  }

  @Get('slow-alias')
  @Timeout(50)
  async slowAlias() {
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    return {};
  }
}

@Module({ imports: [OrchestratorModule.forRoot()], controllers: [ConventionsController] })
class FeatureModule {}

describe.each(PLATFORMS)('Nest conventions on %s', (platform) => {
  let running: RunningApp | undefined;
  const start = async (imports: unknown[] = [OrchestratorModule.forRoot(), FeatureModule]) => {
    calls = {};
    gate = new Gate();
    running = await startApp(platform, { imports: imports as never[] });
    return running;
  };
  afterEach(async () => {
    gate.resolve();
    await running?.close();
    running = undefined;
  });

  it('forRoot() imported by the root and a feature module: one interceptor, one engine', async () => {
    const { url, app } = await start();
    const answer = await send(`${url}/c/retried`);
    expect(answer.status).toBe(503);
    expect(calls.retried).toBe(2); // one try and one retry, not once per import
    // Both imports gave the app the same service.
    const fromFeature = app.select(FeatureModule).get(OrchestratorService);
    expect(fromFeature).toBe(app.get(OrchestratorService));
  });

  it('forRoot() imported twice with different options stops start-up, saying why', async () => {
    await expect(
      Test.createTestingModule({
        imports: [OrchestratorModule.forRoot({ dedup: { windowMs: 1_000 } }), FeatureModule],
      }).compile(),
    ).rejects.toThrow(/imported more than once with different options/);
  });

  it('each route has its own breaker unless it names one', async () => {
    const { url, app } = await start();
    expect((await send(`${url}/c/b`)).status).toBe(200); // b used first: its settings must not become a's
    for (let i = 0; i < 2; i++) expect((await send(`${url}/c/a?fail=1`)).status).toBe(503);
    const refused = await send(`${url}/c/a`);
    expect(refused.status).toBe(503);
    expect(refused.json).toMatchObject({ code: 'circuit_open' });
    expect(calls.a).toBe(2); // open after a's own threshold of 2
    expect((await send(`${url}/c/b`)).status).toBe(200); // a's failures are not b's
    const names = app
      .get(OrchestratorService)
      .health()
      .breakers.map((b) => b.name)
      .sort();
    expect(names).toEqual(['ConventionsController.a', 'ConventionsController.b']);
  });

  it('controllers that are only called the same (two modules) do not share a breaker', async () => {
    const make = (path: string, threshold: number) => {
      @Controller(path)
      class ItemsController {
        @Get()
        @CircuitBreaker({ failureThreshold: threshold })
        list(@Query('fail') fail?: string) {
          count(path);
          if (fail) throw new HttpException('upstream down', 503);
          return { path };
        }
      }
      @Module({ controllers: [ItemsController] })
      class ItemsModule {}
      return ItemsModule;
    };
    const { url, app } = await start([OrchestratorModule.forRoot(), make('shop', 2), make('admin', 5)]);
    for (let i = 0; i < 2; i++) expect((await send(`${url}/shop?fail=1`)).status).toBe(503);
    expect((await send(`${url}/shop`)).json).toMatchObject({ code: 'circuit_open' });
    expect(calls.shop).toBe(2);
    expect((await send(`${url}/admin`)).status).toBe(200);
    const names = app
      .get(OrchestratorService)
      .health()
      .breakers.map((b) => b.name)
      .sort();
    expect(names).toEqual(['ItemsController.list', 'ItemsController.list#2']);
  });

  it('two routes giving one breaker name different settings stop start-up', async () => {
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
    await expect(
      startApp(platform, { imports: [OrchestratorModule.forRoot()], controllers: [ClashController] }),
    ).rejects.toThrow(/ClashController\.y and ClashController\.x share the breaker "payments" with different settings/);
  });

  it('a POST shares a call in flight but is not replayed afterwards, unless the route sets a window', async () => {
    const { url } = await start();
    const first = postJson(`${url}/c/orders`, { item: 'book' });
    const second = postJson(`${url}/c/orders`, { item: 'book' });
    await waitFor(() => calls.orders === 1);
    await new Promise((resolve) => setTimeout(resolve, 50));
    gate.resolve();
    const answers = await Promise.all([first, second]);
    expect(answers.map((a) => a.headers.get('x-orchestrator-dedup')).sort()).toEqual(['joined', 'miss']);
    expect(answers.map((a) => a.status)).toEqual([201, 201]);

    const later = await postJson(`${url}/c/orders`, { item: 'book' });
    expect(later.headers.get('x-orchestrator-dedup')).toBe('miss');
    expect(later.json.orderId).toBe(2);

    await postJson(`${url}/c/summaries`, { text: 't' });
    const replayed = await postJson(`${url}/c/summaries`, { text: 't' });
    expect(replayed.headers.get('x-orchestrator-dedup')).toBe('cached');

    await send(`${url}/c/prices`);
    expect((await send(`${url}/c/prices`)).headers.get('x-orchestrator-dedup')).toBe('cached');
    expect(calls.prices).toBe(1);
  });

  it('headers the handler set at run time reach joined and cached callers', async () => {
    const { url } = await start();
    const leader = send(`${url}/c/stamped`);
    await waitFor(() => calls.stamped === 1);
    const joined = send(`${url}/c/stamped`);
    await new Promise((resolve) => setTimeout(resolve, 50));
    gate.resolve();
    const answers = await Promise.all([leader, joined]);
    expect(answers.map((a) => a.headers.get('x-orchestrator-dedup')).sort()).toEqual(['joined', 'miss']);
    for (const answer of answers) expect(answer.headers.get('x-computed-at')).toBe('call-1');
    const cached = await send(`${url}/c/stamped`);
    expect(cached.headers.get('x-orchestrator-dedup')).toBe('cached');
    expect(cached.headers.get('x-computed-at')).toBe('call-1');
  });

  it("answers its own errors in Nest's shape, with the code and the retry headers; @CallTimeout and its alias @Timeout", async () => {
    const { url } = await start();
    for (const path of ['slow', 'slow-alias']) {
      const answer = await send(`${url}/c/${path}`);
      expect(answer.status).toBe(504);
      expect(answer.json).toEqual({
        statusCode: 504,
        message: expect.any(String),
        error: 'Gateway Timeout',
        code: 'upstream_timeout',
      });
      expect(answer.headers.get('x-should-retry')).toBe('false');
    }
  });

  it('answers in the OpenAI shape when the module is told to (errorShape: openai)', async () => {
    calls = {};
    running = await startApp(platform, {
      imports: [OrchestratorModule.forRoot({ errorShape: 'openai' })],
      controllers: [ConventionsController],
    });
    const answer = await send(`${running.url}/c/slow`);
    expect(answer.status).toBe(504);
    expect(answer.json).toEqual({
      error: { message: expect.any(String), type: 'timeout', param: null, code: 'upstream_timeout' },
    });
    expect(answer.headers.get('x-should-retry')).toBe('false');
    // Another import asking for the other shape is a difference like any other.
    await expect(
      Test.createTestingModule({
        imports: [OrchestratorModule.forRoot({ errorShape: 'openai' }), FeatureModule],
      }).compile(),
    ).rejects.toThrow(/different options/);
  });
});

describe('decorators in an app without OrchestratorModule', () => {
  it('warn at start-up that they do nothing', async () => {
    const warnings: string[] = [];
    const logger: LoggerService = {
      log() {},
      error() {},
      warn: (message: unknown) => void warnings.push(String(message)),
    };
    @Controller('lonely')
    class LonelyController {
      @Get()
      @Concurrency(2)
      get() {
        return {};
      }
    }
    const moduleRef = await Test.createTestingModule({ controllers: [LonelyController] }).compile();
    const app = moduleRef.createNestApplication({ logger });
    await app.init();
    await app.close();
    expect(warnings).toEqual([expect.stringMatching(/LonelyController\.get.*OrchestratorModule is not imported/)]);

    // With the module imported, nothing to say.
    warnings.length = 0;
    const withModule = await Test.createTestingModule({
      imports: [OrchestratorModule.forRoot()],
      controllers: [LonelyController],
    }).compile();
    const served = withModule.createNestApplication({ logger });
    await served.init();
    await served.close();
    expect(warnings).toEqual([]);
  });
});
