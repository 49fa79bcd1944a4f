import { afterEach, describe, expect, it } from '@jest/globals';
import { Body, Controller, HttpCode, HttpException, Post } from '@nestjs/common';
import {
  CircuitBreaker,
  Concurrency,
  Dedup,
  OrchestratorConfigError,
  OrchestratorModule,
  OrchestratorService,
  StreamedResponse,
  Timeout,
  isOrchestratorError,
  type OrchestratorModuleOptions,
} from 'nest-prompt-orchestrator';
import { Observable } from 'rxjs';
import { Gate, PLATFORMS, postJson, startApp, waitFor, type RunningApp } from '../support/platforms.js';

interface Ask {
  q?: string;
  /** Hold the call at the gate. */
  hold?: boolean;
  /** Fail like an upstream that is down (503). */
  fail?: boolean;
  [key: string]: unknown;
}

/** Stands in for an upstream: counts and records its calls, fails or holds them as each request asks. */
class FakeUpstream {
  calls = 0;
  received: unknown[] = [];
  gate = new Gate();

  reset() {
    this.calls = 0;
    this.received = [];
    this.gate = new Gate();
  }

  async call(body: Ask) {
    this.calls++;
    const call = this.calls;
    this.received.push(body);
    if (body.fail) throw new HttpException('down', 503);
    if (body.hold) await this.gate.promise;
    return { call, echo: body };
  }
}
const upstream = new FakeUpstream();

// --- route > class > module ---------------------------------------------------------------

@Controller('limited')
@Concurrency(2)
class LimitedController {
  @Post('a')
  @HttpCode(200)
  a(@Body() body: Ask) {
    return upstream.call(body);
  }

  @Post('b')
  @HttpCode(200)
  @Concurrency(5)
  b(@Body() body: Ask) {
    return upstream.call(body);
  }
}

/** The class only names its limiter and refuses queueing: the limit comes from the module. */
@Controller('defaults')
@Concurrency({ name: 'defaults', queueSize: 0 })
class DefaultsController {
  @Post()
  @HttpCode(200)
  run(@Body() body: Ask) {
    return upstream.call(body);
  }
}

const sse = (n: number) => `data: {"n":${n}}\n\n`;
const formatError = (error: unknown) =>
  `event: error\ndata: ${JSON.stringify({ message: (error as Error).message })}\n\n`;

/** The class sets the total time (10 s); the idle gap between chunks comes from the module (50 ms). */
@Controller('timed')
@Timeout({ ms: 10_000 })
class TimedController {
  @Post('slow')
  @HttpCode(200)
  slow(@Body() body: Ask) {
    return upstream.call({ ...body, hold: true });
  }

  /** Sends one chunk, then goes silent until unsubscribed. */
  @Post('stall')
  @HttpCode(200)
  stall() {
    upstream.calls++;
    return new StreamedResponse(
      new Observable<string>((subscriber) => {
        subscriber.next(sse(1));
      }),
      { contentType: 'text/event-stream; charset=utf-8' },
      formatError,
    );
  }

  @Post('strict')
  @HttpCode(200)
  @Timeout(50)
  strict(@Body() body: Ask) {
    return upstream.call({ ...body, hold: true });
  }
}

/** No decorator at all: the module's `timeout` alone does not apply. */
@Controller('untimed')
class UntimedController {
  @Post('slow')
  @HttpCode(200)
  slow(@Body() body: Ask) {
    return upstream.call({ ...body, hold: true });
  }
}

// --- the fixed order of effects, whatever order the decorators are written in -------------

@Controller('ordered')
class OrderedController {
  @Post('breaker-first')
  @HttpCode(200)
  @CircuitBreaker('ordered')
  @Concurrency({ name: 'ordered', limit: 2, queueSize: 0 })
  @Dedup({ windowMs: 60_000 })
  breakerFirst(@Body() body: Ask) {
    return upstream.call(body);
  }

  @Post('dedup-first')
  @HttpCode(200)
  @Dedup({ windowMs: 60_000 })
  @Concurrency({ name: 'ordered', limit: 2, queueSize: 0 })
  @CircuitBreaker('ordered')
  dedupFirst(@Body() body: Ask) {
    return upstream.call(body);
  }
}

@Controller('mixed')
@Dedup()
class MixedController {
  @Post('shared')
  @HttpCode(200)
  shared(@Body() body: Ask) {
    return upstream.call(body);
  }

  @Post('solo')
  @HttpCode(200)
  @Dedup(false)
  solo(@Body() body: Ask) {
    return upstream.call(body);
  }
}

/** Shares its breaker with code that calls `OrchestratorService.run()`. */
@Controller('shared-breaker')
class SharedBreakerController {
  @Post()
  @HttpCode(200)
  @CircuitBreaker('shared-upstream')
  run(@Body() body: Ask) {
    return upstream.call(body);
  }
}

/** A plain route, without decorators, whose handler calls `OrchestratorService.run()`. */
@Controller('via-service')
class ViaServiceController {
  constructor(private readonly orchestrator: OrchestratorService) {}

  @Post()
  @HttpCode(200)
  ask(@Body() body: Ask) {
    return this.orchestrator.run({ breaker: 'shared-upstream' }, () => upstream.call(body));
  }
}

const moduleOptions: OrchestratorModuleOptions = {
  concurrency: { limit: 3 },
  timeout: { ms: 50, idleMs: 50 },
  dedup: { windowMs: 60_000 },
};

const controllers = [
  LimitedController,
  DefaultsController,
  TimedController,
  UntimedController,
  OrderedController,
  MixedController,
  SharedBreakerController,
  ViaServiceController,
];

describe.each(PLATFORMS)('composition on %s', (platform) => {
  let running: RunningApp | undefined;
  let orchestrator: OrchestratorService;
  let url: string;
  const limiter = (name: string) => orchestrator.health().limiters.find((l) => l.name === name);
  const breaker = (name: string) => orchestrator.health().breakers.find((b) => b.name === name);

  const start = async (options: OrchestratorModuleOptions = moduleOptions) => {
    upstream.reset();
    running = await startApp(platform, { imports: [OrchestratorModule.forRoot(options)], controllers });
    orchestrator = running.app.get(OrchestratorService);
    url = running.url;
  };
  afterEach(async () => {
    upstream.gate.resolve();
    await running?.close();
    running = undefined;
  });

  describe('resolution: route > class > module', () => {
    it("gives a route its own @Concurrency limit over its class's, and the class's over the module's", async () => {
      await start();
      // Route b first, then a, then b again: the outcome must not depend on which route was hit first.
      const b = Array.from({ length: 6 }, (_, i) => postJson(`${url}/limited/b`, { q: `b${i}`, hold: true }));
      await waitFor(() => upstream.calls === 5, 10_000, 'five calls on route b');
      const a = Array.from({ length: 3 }, (_, i) => postJson(`${url}/limited/a`, { q: `a${i}`, hold: true }));
      const d = Array.from({ length: 4 }, (_, i) => postJson(`${url}/defaults`, { q: `d${i}`, hold: true }));
      await waitFor(() => upstream.calls === 5 + 2 + 3, 10_000, 'the class routes to fill their slots');
      const refusedD = await Promise.race(d); // the other three are held at the gate
      expect(refusedD.status).toBe(429); // queueSize 0 from the class, limit 3 from the module

      const limiters = orchestrator.health().limiters;
      const classLimiter = limiters.find((l) => l.limit === 2);
      const routeLimiter = limiters.find((l) => l.limit === 5);
      expect(classLimiter).toMatchObject({ inFlight: 2, queued: 1 });
      expect(routeLimiter).toMatchObject({ inFlight: 5, queued: 1 });
      expect(classLimiter!.name).toBe('LimitedController.a'); // the class's settings, the route's own limiter
      expect(routeLimiter!.name).toBe('LimitedController.b');
      expect(limiter('defaults')).toMatchObject({ limit: 3, inFlight: 3, queued: 0 });

      upstream.gate.resolve();
      expect((await Promise.all(b)).map((r) => r.status)).toEqual(Array(6).fill(200));
      expect((await Promise.all(a)).map((r) => r.status)).toEqual(Array(3).fill(200));
      expect((await Promise.all(d)).map((r) => r.status).sort()).toEqual([200, 200, 200, 429]);
    });

    it("applies the module's timeout fields to a route whose class has @Timeout, and only there; a route's @Timeout wins", async () => {
      await start();
      const since = Date.now();
      const classTimed = postJson(`${url}/timed/slow`, { q: 'class' });
      const untimed = postJson(`${url}/untimed/slow`, { q: 'none' });
      const strict = await postJson(`${url}/timed/strict`, { q: 'route' });
      expect(strict.status).toBe(504); // the route's 50 ms
      expect(strict.json).toMatchObject({ statusCode: 504, code: 'upstream_timeout' });

      // The class's 10 s total, not the module's 50 ms: still running after several times 50 ms.
      await waitFor(() => Date.now() - since >= 250, 10_000, 'several times the module timeout');
      upstream.gate.resolve();
      expect((await classTimed).status).toBe(200);
      expect((await untimed).status).toBe(200);

      // The module's idleMs (50 ms) reaches the stream route through its class's @Timeout.
      const stalled = await postJson(`${url}/timed/stall`, {});
      expect(stalled.status).toBe(200);
      expect(stalled.text.startsWith(sse(1) + 'event: error\n')).toBe(true);
      expect(stalled.text).toMatch(/stalled[^\n]*\b50 ms/);
    });
  });

  describe('order of effects', () => {
    it.each(['breaker-first', 'dedup-first'])('%s: a joined request uses no concurrency slot', async (route) => {
      await start();
      const held = [
        postJson(`${url}/ordered/${route}`, { q: 'one', hold: true }),
        postJson(`${url}/ordered/${route}`, { q: 'two', hold: true }),
      ];
      await waitFor(() => upstream.calls === 2, 10_000, 'both slots taken');
      const joined = Array.from({ length: 5 }, () => postJson(`${url}/ordered/${route}`, { q: 'one', hold: true }));
      await waitFor(() => orchestrator.health().dedup.joined === 5, 10_000, 'five joined');
      let distinct: Awaited<ReturnType<typeof postJson>> | undefined;
      void postJson(`${url}/ordered/${route}`, { q: 'three', hold: true }).then((answer) => (distinct = answer));
      await waitFor(() => distinct !== undefined, 5_000, 'a distinct request to be refused');
      expect(distinct!.status).toBe(429); // the slots really are full, and there is no queue
      expect(limiter('ordered')).toMatchObject({ inFlight: 2, queued: 0 });

      upstream.gate.resolve();
      const answers = await Promise.all(joined);
      expect(answers.map((a) => a.status)).toEqual(Array(5).fill(200));
      expect(answers.map((a) => a.headers.get('x-orchestrator-dedup'))).toEqual(Array(5).fill('joined'));
      const first = await held[0];
      for (const answer of answers) expect(answer.text).toBe(first.text);
      expect((await held[1]).status).toBe(200);
      expect(upstream.calls).toBe(2);
    });

    it.each(['breaker-first', 'dedup-first'])(
      '%s: with the breaker open, cached and joined requests are still answered',
      async (route) => {
        await start();
        const kept = await postJson(`${url}/ordered/${route}`, { q: 'kept' });
        expect(kept.headers.get('x-orchestrator-dedup')).toBe('miss');
        const inFlight = postJson(`${url}/ordered/${route}`, { q: 'in flight', hold: true });
        await waitFor(() => upstream.calls === 2, 10_000, 'the held call');

        for (let i = 0; i < 5; i++) {
          const failed = await postJson(`${url}/ordered/${route}`, { fail: true, i });
          expect(failed.status).toBe(503);
        }
        expect(breaker('ordered')).toMatchObject({ state: 'open' });
        const refused = await postJson(`${url}/ordered/${route}`, { q: 'fresh' });
        expect(refused.status).toBe(503);
        expect(refused.json).toMatchObject({ statusCode: 503, code: 'circuit_open' });
        expect(upstream.calls).toBe(7);

        const cached = await postJson(`${url}/ordered/${route}`, { q: 'kept' });
        expect(cached.status).toBe(200);
        expect(cached.headers.get('x-orchestrator-dedup')).toBe('cached');
        expect(cached.text).toBe(kept.text);

        const joined = postJson(`${url}/ordered/${route}`, { q: 'in flight', hold: true });
        await waitFor(() => orchestrator.health().dedup.joined === 1, 10_000, 'a joined request');
        upstream.gate.resolve();
        const [leader, follower] = await Promise.all([inFlight, joined]);
        expect(leader.status).toBe(200);
        expect(follower.status).toBe(200);
        expect(follower.headers.get('x-orchestrator-dedup')).toBe('joined');
        expect(follower.text).toBe(leader.text);
        expect(upstream.calls).toBe(7);
        expect(breaker('ordered')).toMatchObject({ state: 'open' });
      },
    );

    it('@Dedup(false) turns dedup off for one route of a @Dedup() class', async () => {
      await start();
      const solo = [
        postJson(`${url}/mixed/solo`, { q: 'same', hold: true }),
        postJson(`${url}/mixed/solo`, { q: 'same', hold: true }),
      ];
      await waitFor(() => upstream.calls === 2, 10_000, 'two calls on the solo route');
      const shared = [
        postJson(`${url}/mixed/shared`, { q: 'same', hold: true }),
        postJson(`${url}/mixed/shared`, { q: 'same', hold: true }),
      ];
      await waitFor(() => orchestrator.health().dedup.joined === 1, 10_000, 'one joined on the shared route');
      upstream.gate.resolve();
      const soloAnswers = await Promise.all(solo);
      const sharedAnswers = await Promise.all(shared);
      expect(soloAnswers.map((a) => a.status)).toEqual([200, 200]);
      expect(soloAnswers.map((a) => a.headers.get('x-orchestrator-dedup'))).toEqual([null, null]);
      expect(new Set(soloAnswers.map((a) => (a.json as { call: number }).call)).size).toBe(2);
      expect(sharedAnswers.map((a) => a.headers.get('x-orchestrator-dedup')).sort()).toEqual(['joined', 'miss']);
      expect(upstream.calls).toBe(3);

      // The solo route never answers from the window either.
      const again = await postJson(`${url}/mixed/solo`, { q: 'same', hold: true });
      expect(again.headers.get('x-orchestrator-dedup')).toBeNull();
      expect(upstream.calls).toBe(4);
    });
  });

  describe('OrchestratorService.run()', () => {
    it('dedups concurrent calls by key, then answers from the window', async () => {
      await start();
      let runs = 0;
      const gate = new Gate<string>();
      const work = async (signal: AbortSignal) => {
        runs++;
        expect(signal).toBeInstanceOf(AbortSignal);
        return { summary: await gate.promise, run: runs };
      };
      const first = orchestrator.run({ key: 'summary:tenant-a:doc-1', dedup: true }, work);
      const second = orchestrator.run({ key: 'summary:tenant-a:doc-1', dedup: true }, work);
      const other = orchestrator.run({ key: 'summary:tenant-b:doc-1', dedup: true }, work);
      await waitFor(() => runs === 2, 10_000, 'two distinct calls');
      expect(orchestrator.health().inFlight).toBe(2);
      gate.resolve('done');
      const [a, b, c] = await Promise.all([first, second, other]);
      expect(a).toBe(b);
      expect(c).not.toBe(a);
      expect(runs).toBe(2);
      expect(orchestrator.health().dedup).toMatchObject({ miss: 2, joined: 1 });

      await waitFor(() => orchestrator.health().inFlight === 0, 10_000, 'no call in flight');
      const later = await orchestrator.run({ key: 'summary:tenant-a:doc-1', dedup: true }, work);
      expect(later).toEqual(a);
      expect(runs).toBe(2);
      expect(orchestrator.health().dedup.cached).toBe(1);
    });

    it('shares a breaker, by name, with a route', async () => {
      await start();
      let runs = 0;
      const failing = async () => {
        runs++;
        throw Object.assign(new Error('upstream 503'), { status: 503 });
      };
      for (let i = 0; i < 5; i++) {
        await expect(orchestrator.run({ breaker: 'shared-upstream' }, failing)).rejects.toThrow('upstream 503');
      }
      expect(runs).toBe(5);

      const refused = await postJson(`${url}/shared-breaker`, { q: 'route' });
      expect(refused.status).toBe(503);
      expect(refused.json).toMatchObject({ statusCode: 503, error: 'Service Unavailable', code: 'circuit_open' });
      expect(upstream.calls).toBe(0);

      const error = await orchestrator.run({ breaker: 'shared-upstream' }, failing).catch((e: unknown) => e);
      expect(isOrchestratorError(error) && error.code).toBe('circuit_open');
      expect(runs).toBe(5);

      // A plain route calling run(): the refusal is a 503 with its headers, as on a decorated route, not a 500.
      const viaService = await postJson(`${url}/via-service`, { q: 'service' });
      expect(viaService.status).toBe(503);
      expect(viaService.json).toMatchObject({ statusCode: 503, error: 'Service Unavailable', code: 'circuit_open' });
      expect(viaService.headers.get('x-should-retry')).toBe('false');
      expect(Number(viaService.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
      expect(upstream.calls).toBe(0);
    });
  });

  describe('bad configuration fails at start-up, naming the option', () => {
    it.each<[string, unknown, RegExp]>([
      ['concurrency.limit', { concurrency: { limit: -1 } }, /concurrency\.limit/],
      ['dedup.windowMs', { dedup: { windowMs: 0 } }, /dedup\.windowMs/],
      ['an unknown option', { unknownOption: 1 }, /unknownOption/],
      ['a named breaker', { breakers: { openai: { failureThreshold: 0 } } }, /breakers\.openai\.failureThreshold/],
    ])('%s', async (_what, options, message) => {
      const failure = await startApp(platform, {
        imports: [OrchestratorModule.forRoot(options as OrchestratorModuleOptions)],
        controllers,
      }).then(
        (app) => app.close().then(() => undefined),
        (error: unknown) => error,
      );
      expect(failure).toBeInstanceOf(OrchestratorConfigError);
      expect((failure as Error).message).toMatch(message);
    });

    it('through forRootAsync too', async () => {
      const failure = await startApp(platform, {
        imports: [OrchestratorModule.forRootAsync({ useFactory: () => ({ concurrency: { limit: -1 } }) })],
        controllers,
      }).then(
        (app) => app.close().then(() => undefined),
        (error: unknown) => error,
      );
      expect(failure).toBeInstanceOf(OrchestratorConfigError);
      expect((failure as Error).message).toMatch(/concurrency\.limit/);
    });
  });
});

describe('bad decorator options fail when the class is defined', () => {
  it('@Concurrency(-3)', () => {
    const define = () => {
      @Controller('bad')
      class BadController {
        @Post()
        @Concurrency(-3)
        run() {
          return 'never';
        }
      }
      return BadController;
    };
    expect(define).toThrow(OrchestratorConfigError);
    expect(define).toThrow(/@Concurrency\(\).*limit.*-3/);
  });

  it('@Dedup({ windowMs: 0 }) and @CircuitBreaker({ failureThreshold: 0 })', () => {
    expect(() => {
      @Controller('bad')
      @Dedup({ windowMs: 0 })
      class BadDedup {}
      return BadDedup;
    }).toThrow(/windowMs/);
    expect(() => {
      @Controller('bad')
      @CircuitBreaker({ failureThreshold: 0 })
      class BadBreaker {}
      return BadBreaker;
    }).toThrow(/failureThreshold/);
  });
});
