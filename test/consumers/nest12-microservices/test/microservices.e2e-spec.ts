import { afterAll, beforeAll, beforeEach, describe, expect, it } from '@jest/globals';
import type { INestMicroservice } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { ClientProxyFactory, Transport, type ClientProxy, type MicroserviceOptions } from '@nestjs/microservices';
import { firstValueFrom } from 'rxjs';
import { OrchestratorService, type OrchestratorErrorPayload } from 'nest-prompt-orchestrator';
import { AppModule } from '../src/app.module.js';
import { Backend } from '../src/backend.js';
import { freePort, startRedis } from './redis-server.js';
import { waitFor } from './wait-for.js';

type Transporter = 'TCP' | 'Redis';

describe.each<Transporter>(['TCP', 'Redis'])(
  'nest-prompt-orchestrator on microservice handlers (Nest 12, %s transport)',
  (transporter) => {
    let redis: { port: number; stop(): void } | undefined;
    let app: INestMicroservice | undefined;
    let client: ClientProxy | undefined;
    let backend: Backend;
    const health = () => app!.get(OrchestratorService).health();
    const send = <T>(pattern: string, data: unknown) => firstValueFrom(client!.send<T>(pattern, data));
    /** The error a message is answered with (Nest sends the RpcException's payload as the error). */
    const failure = (pattern: string, data: unknown) =>
      send(pattern, data).then(
        (answer) => ({ unexpectedAnswer: answer }) as unknown as OrchestratorErrorPayload,
        (error: unknown) => error as OrchestratorErrorPayload,
      );

    beforeAll(async () => {
      let options: MicroserviceOptions;
      if (transporter === 'Redis') {
        redis = await startRedis();
        options = { transport: Transport.REDIS, options: { host: '127.0.0.1', port: redis.port } };
      } else {
        options = { transport: Transport.TCP, options: { host: '127.0.0.1', port: await freePort() } };
      }
      app = await NestFactory.createMicroservice<MicroserviceOptions>(AppModule, { ...options, logger: false });
      await app.listen();
      backend = app.get(Backend);
      client = ClientProxyFactory.create(options as Parameters<typeof ClientProxyFactory.create>[0]);
      await client.connect();
    });
    afterAll(async () => {
      backend?.reset();
      await client?.close();
      await app?.close();
      redis?.stop();
    });
    beforeEach(() => backend.reset());

    it('answers 100 identical concurrent messages of one tenant with one service call, and not another tenant', async () => {
      backend.mode = 'held';
      const answers = Array.from({ length: 100 }, () =>
        send<{ call: number }>('summarize', { tenant: 'acme', doc: 'report' }),
      );
      await waitFor(() => backend.calls === 1 && health().callersWaiting === 100, '100 messages waiting on one call');
      backend.gate.resolve();
      const all = await Promise.all(answers);
      expect(backend.calls).toBe(1);
      expect(all.every((answer) => answer.call === 1)).toBe(true);
      // The forRoot `identify` option reads the tenant: another tenant is another caller.
      expect(await send('summarize', { tenant: 'globex', doc: 'report' })).toMatchObject({ call: 2 });
    });

    it('runs one handler call for 100 identical concurrent events', async () => {
      backend.mode = 'held';
      for (let i = 0; i < 100; i++) client!.emit('reindex', { tenant: 'acme', doc: 'all' });
      await waitFor(() => backend.calls === 1 && health().callersWaiting === 100, '100 events waiting on one call');
      backend.gate.resolve();
      await waitFor(() => health().callersWaiting === 0, 'the events to finish');
      expect(backend.calls).toBe(1);
    });

    it('opens the breaker after 3 failures and refuses at once with the RpcException payload CIRCUIT_OPEN', async () => {
      backend.mode = 'down';
      for (let n = 0; n < 3; n++) expect(await failure('flaky', n)).toMatchObject({ status: 'error' });
      expect(backend.calls).toBe(3);
      const refused = await failure('flaky', 3);
      expect(refused).toMatchObject({ status: 'error', code: 'CIRCUIT_OPEN', retryable: false });
      expect(refused.retryAfterMs).toEqual(expect.any(Number));
      expect(backend.calls).toBe(3);
    });

    it('holds the concurrency limit: 2 handler calls at a time, the others queued', async () => {
      backend.mode = 'held';
      const answers = Array.from({ length: 10 }, (_, n) => send('limited', n));
      await waitFor(
        () => backend.calls === 2 && health().limiters.reduce((sum, l) => sum + l.queued, 0) === 8,
        'two calls running, eight queued',
      );
      backend.gate.resolve();
      await Promise.all(answers);
      expect(backend.calls).toBe(10);
      expect(backend.maxRunning).toBe(2);
    });

    it('aborts the handler through @CallSignal() when the time limit passes, and answers UPSTREAM_TIMEOUT', async () => {
      expect(await failure('hang', 1)).toMatchObject({ status: 'error', code: 'UPSTREAM_TIMEOUT' });
      expect(backend.signals).toHaveLength(1);
      expect(backend.signals[0].aborted).toBe(true);
    });

    it('answers with the fallback when the handler fails, and while its breaker is open without calling it', async () => {
      backend.mode = 'down';
      for (const n of [1, 2, 3])
        expect(await send('with-fallback', n)).toEqual({ call: 0, echo: `fallback for ${n}`, fallback: true });
      expect(backend.calls).toBe(2);
    });
  },
);
