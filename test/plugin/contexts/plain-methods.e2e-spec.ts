import { afterAll, beforeAll, beforeEach, describe, expect, it } from '@jest/globals';
import {
  BadRequestException,
  Controller,
  Get,
  Injectable,
  Module,
  type INestApplicationContext,
  type OnModuleInit,
} from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import {
  CallTimeout,
  CircuitBreaker,
  Concurrency,
  Dedup,
  Fallback,
  Orchestrate,
  OrchestratorConfigError,
  OrchestratorModule,
  currentCallSignal,
  isOrchestratorError,
} from 'nest-prompt-orchestrator';
import { waitFor } from '../../support/platforms.js';
import { Backend, pending } from './backend.js';

const backend = new Backend();

/** A service a cron job or a queue worker would call: no request, no execution context. */
@Injectable()
class Summaries {
  @Dedup()
  summarize(docId: string) {
    return backend.call(docId);
  }

  @CircuitBreaker({ failureThreshold: 3, openMs: 60_000 })
  flaky(n: number) {
    return backend.call(n);
  }

  @Concurrency({ limit: 2, queueSize: 1_000 })
  limited(n: number) {
    return backend.call(n);
  }

  @CallTimeout(50)
  hang() {
    return backend.hang(currentCallSignal());
  }

  @Orchestrate({
    breaker: { name: 'with-fallback', failureThreshold: 2, openMs: 60_000 },
    fallback: (cause: unknown, n: unknown) => ({ fallback: true, n, cause: (cause as Error).message }),
  })
  withFallback(n: number) {
    return backend.call(n);
  }

  @CallTimeout(50)
  @Fallback('too slow')
  slowWithFallback() {
    return backend.hang(currentCallSignal());
  }

  @Fallback('never for a bad request')
  badRequest() {
    throw new BadRequestException('docId is required');
  }

  @CallTimeout(1_000)
  inCall() {
    return currentCallSignal() !== undefined;
  }
}

/** Calls a decorated method from its own start-up hook, as a warm-up or a first scheduled run would. */
@Injectable()
class Warmup implements OnModuleInit {
  ranInCall?: boolean;

  constructor(private readonly summaries: Summaries) {}

  async onModuleInit() {
    // The orchestrator wraps the method, so it answers a promise whatever its declared type says.
    // eslint-disable-next-line @typescript-eslint/await-thenable
    this.ranInCall = await this.summaries.inCall();
  }
}

@Module({ providers: [Summaries, Warmup], exports: [Summaries] })
class SummariesModule {}

// The feature module is listed first: the wrap must not depend on the order of imports.
@Module({ imports: [SummariesModule, OrchestratorModule.forRoot()] })
class AppModule {}

describe('decorators on plain provider methods', () => {
  let app: INestApplicationContext;
  let summaries: Summaries;

  beforeAll(async () => {
    app = await NestFactory.createApplicationContext(AppModule, { logger: false });
    await app.init();
    summaries = app.get(Summaries);
  });
  afterAll(async () => {
    backend.gate.resolve();
    await app?.close();
  });
  beforeEach(() => backend.reset());

  it('runs 100 identical concurrent calls as one', async () => {
    backend.mode = 'held';
    const answers = pending(Array.from({ length: 100 }, () => summaries.summarize('doc-1')));
    await waitFor(() => backend.calls === 1, 5_000, 'the first call');
    backend.gate.resolve();
    const all = await Promise.all(answers);
    expect(backend.calls).toBe(1);
    expect(all.every((a) => a.call === 1 && a.echo === 'doc-1')).toBe(true);
    // Other arguments are another call.
    await summaries.summarize('doc-2');
    expect(backend.calls).toBe(2);
  });

  it('opens the breaker after failures and then refuses without calling', async () => {
    backend.mode = 'down';
    for (let i = 0; i < 3; i++) await expect(summaries.flaky(i)).rejects.toMatchObject({ status: 503 });
    expect(backend.calls).toBe(3);
    const refused = await summaries.flaky(4).catch((error: unknown) => error);
    expect(isOrchestratorError(refused) && refused.code).toBe('circuit_open');
    expect(backend.calls).toBe(3);
  });

  it('holds the concurrency limit', async () => {
    backend.mode = 'held';
    const calls = pending(Array.from({ length: 10 }, (_, i) => summaries.limited(i)));
    await waitFor(() => backend.calls === 2, 5_000, 'two calls running');
    backend.gate.resolve();
    await Promise.all(calls);
    expect(backend.calls).toBe(10);
    expect(backend.maxRunning).toBe(2);
  });

  it('aborts the call signal when the time limit passes', async () => {
    const refused = await summaries.hang().catch((error: unknown) => error);
    expect(isOrchestratorError(refused) && refused.code).toBe('upstream_timeout');
    expect(backend.signals).toHaveLength(1);
    expect(backend.signals[0].aborted).toBe(true);
  });

  it('answers with the fallback when the call fails, the breaker is open or the time limit passes', async () => {
    backend.mode = 'down';
    expect(await summaries.withFallback(1)).toEqual({ fallback: true, n: 1, cause: 'backend down' });
    expect(await summaries.withFallback(2)).toMatchObject({ fallback: true, n: 2 });
    // Open now: answered by the fallback without a call.
    expect(await summaries.withFallback(3)).toMatchObject({ fallback: true, n: 3 });
    expect(backend.calls).toBe(2);
    expect(await summaries.slowWithFallback()).toBe('too slow');
    expect(backend.signals[0].aborted).toBe(true);
  });

  it("is wrapped before other modules' start-up hooks run", () => {
    expect(app.get(Warmup).ranInCall).toBe(true);
  });

  it('never answers a bad request with the fallback', async () => {
    await expect(summaries.badRequest()).rejects.toBeInstanceOf(BadRequestException);
  });
});

describe('a decorator where nothing would apply it', () => {
  it('stops start-up with a message naming the class and the method', async () => {
    @Controller('x')
    class StrayController {
      @Get()
      route() {
        return this.helper();
      }

      @CircuitBreaker()
      helper() {
        return 'not a route';
      }
    }
    @Module({ imports: [OrchestratorModule.forRoot()], controllers: [StrayController] })
    class StrayModule {}

    const started = NestFactory.createApplicationContext(StrayModule, { logger: false, abortOnError: false }).then(
      async (app) => {
        await app.init();
        return app;
      },
    );
    const error = await started.then(
      async (app) => {
        await app.close();
        return undefined;
      },
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(OrchestratorConfigError);
    expect((error as Error).message).toContain('StrayController.helper');
  });

  it('stops start-up for a request-scoped provider', async () => {
    const { Scope } = await import('@nestjs/common');
    @Injectable({ scope: Scope.REQUEST })
    class PerRequest {
      @Dedup()
      load() {
        return 1;
      }
    }
    @Module({ imports: [OrchestratorModule.forRoot()], providers: [PerRequest] })
    class ScopedModule {}
    const error = await NestFactory.createApplicationContext(ScopedModule, { logger: false, abortOnError: false }).then(
      async (app) => {
        await app.close();
        return undefined;
      },
      (e: unknown) => e,
    );
    expect((error as Error | undefined)?.message).toContain('PerRequest.load');
  });
});
