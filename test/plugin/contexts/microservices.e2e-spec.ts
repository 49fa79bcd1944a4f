import { afterAll, beforeAll, beforeEach, describe, expect, it } from '@jest/globals';
import { Controller, Module, type INestMicroservice } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { ClientProxyFactory, MessagePattern, Payload, Transport, type ClientProxy } from '@nestjs/microservices';
import { createServer } from 'node:net';
import { firstValueFrom } from 'rxjs';
import {
  CallSignal,
  CallTimeout,
  CircuitBreaker,
  Concurrency,
  Dedup,
  Fallback,
  OrchestratorModule,
  OrchestratorService,
} from 'nest-prompt-orchestrator';
import { waitFor } from '../../support/platforms.js';
import { startOwnedRedis, type OwnedRedis } from '../../support/redis-server.js';
import { Backend, callersWaiting, queued, pending } from './backend.js';

const backend = new Backend();

@Controller()
class SummaryHandlers {
  @MessagePattern('summarize')
  @Dedup()
  summarize(@Payload() data: unknown) {
    return backend.call(data);
  }

  @MessagePattern('flaky')
  @CircuitBreaker({ failureThreshold: 3, openMs: 60_000 })
  flaky(@Payload() data: unknown) {
    return backend.call(data);
  }

  @MessagePattern('limited')
  @Concurrency({ limit: 2, queueSize: 1_000 })
  limited(@Payload() data: unknown) {
    return backend.call(data);
  }

  @MessagePattern('hang')
  @CallTimeout(50)
  hang(@CallSignal() signal: AbortSignal | undefined) {
    return backend.hang(signal);
  }

  @MessagePattern('with-fallback')
  @CircuitBreaker({ failureThreshold: 2, openMs: 60_000 })
  @Fallback((_cause: unknown, data: unknown) => ({ fallback: true, data }))
  withFallback(@Payload() data: unknown) {
    return backend.call(data);
  }
}

@Module({ imports: [OrchestratorModule.forRoot()], controllers: [SummaryHandlers] })
class MicroserviceModule {}

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as { port: number }).port;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

const transports = [
  ['TCP', async () => ({ transport: Transport.TCP, options: { host: '127.0.0.1', port: await freePort() } }) as const],
  [
    'Redis',
    async (redis?: OwnedRedis) =>
      ({ transport: Transport.REDIS, options: { host: '127.0.0.1', port: redis!.port } }) as const,
  ],
] as const;

describe.each(transports)('decorators on microservice handlers over %s', (name, options) => {
  let redis: OwnedRedis | undefined;
  let app: INestMicroservice | undefined;
  let client: ClientProxy | undefined;
  const orchestrator = () => app!.get(OrchestratorService);
  const send = <T>(pattern: string, data: unknown) => firstValueFrom(client!.send<T>(pattern, data));
  const failure = (pattern: string, data: unknown) =>
    send(pattern, data).then(
      () => undefined,
      (error: unknown) => error as Record<string, unknown>,
    );

  beforeAll(async () => {
    if (name === 'Redis') redis = await startOwnedRedis();
    const transport = await options(redis);
    app = await NestFactory.createMicroservice(MicroserviceModule, { ...transport, logger: false } as never);
    await app.listen();
    const made = ClientProxyFactory.create(transport as never) as unknown as ClientProxy;
    client = made;
    await made.connect();
  });
  afterAll(async () => {
    backend.gate.resolve();
    await client?.close();
    await app?.close();
    await redis?.close();
  });
  beforeEach(() => backend.reset());

  it('answers 100 identical concurrent messages with one handler call', async () => {
    backend.mode = 'held';
    const answers = pending(Array.from({ length: 100 }, () => send<{ call: number }>('summarize', { doc: 1 })));
    await waitFor(() => backend.calls === 1, 5_000, 'the first call');
    // Every message has arrived and joined the call before it ends.
    await waitFor(() => callersWaiting(orchestrator()) === 100, 5_000, '100 callers on the call');
    backend.gate.resolve();
    const all = await Promise.all(answers);
    expect(backend.calls).toBe(1);
    expect(all.every((a) => a.call === 1)).toBe(true);
  });

  it('opens the breaker after failures and refuses with an RpcException payload', async () => {
    backend.mode = 'down';
    for (let i = 0; i < 3; i++) expect(await failure('flaky', i)).toMatchObject({ status: 'error' });
    expect(backend.calls).toBe(3);
    const refused = await failure('flaky', 4);
    expect(refused).toMatchObject({ status: 'error', code: 'CIRCUIT_OPEN', retryable: false });
    expect(typeof refused?.retryAfterMs).toBe('number');
    expect(String(refused?.message)).toContain('failing');
    expect(backend.calls).toBe(3);
  });

  it('holds the concurrency limit', async () => {
    backend.mode = 'held';
    const calls = pending(Array.from({ length: 10 }, (_, i) => send('limited', i)));
    await waitFor(() => backend.calls === 2 && queued(orchestrator()) === 8, 5_000, 'two calls running, eight queued');
    expect(backend.calls).toBe(2);
    backend.gate.resolve();
    await Promise.all(calls);
    expect(backend.calls).toBe(10);
    expect(backend.maxRunning).toBe(2);
  });

  it('aborts the handler through its signal when the time limit passes', async () => {
    expect(await failure('hang', 1)).toMatchObject({ status: 'error', code: 'UPSTREAM_TIMEOUT' });
    expect(backend.signals).toHaveLength(1);
    expect(backend.signals[0].aborted).toBe(true);
  });

  it('answers with the fallback when the handler fails and while the breaker is open', async () => {
    backend.mode = 'down';
    expect(await send('with-fallback', 1)).toEqual({ fallback: true, data: 1 });
    expect(await send('with-fallback', 2)).toEqual({ fallback: true, data: 2 });
    expect(await send('with-fallback', 3)).toEqual({ fallback: true, data: 3 });
    expect(backend.calls).toBe(2);
  });
});
