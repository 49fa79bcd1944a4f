import { afterAll, beforeAll, beforeEach, describe, expect, it } from '@jest/globals';
import { Controller, Get, Module, type INestApplication, type LoggerService } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import {
  ClientProxyFactory,
  EventPattern,
  MessagePattern,
  Payload,
  Transport,
  type ClientProxy,
} from '@nestjs/microservices';
import { createServer } from 'node:net';
import { firstValueFrom } from 'rxjs';
import {
  CallSignal,
  CallTimeout,
  CircuitBreaker,
  Dedup,
  Fallback,
  OrchestratorModule,
  OrchestratorService,
} from 'nest-prompt-orchestrator';
import { waitFor } from '../../support/platforms.js';
import { Backend, callersWaiting, pending } from './backend.js';

const backend = new Backend();
const noted: unknown[] = [];

@Controller()
class SummaryHandlers {
  @MessagePattern('summarize')
  @Dedup()
  summarize(@Payload() data: unknown) {
    return backend.call(data);
  }

  @MessagePattern('hang')
  @CallTimeout(50)
  hang(@CallSignal() signal: AbortSignal | undefined) {
    return backend.hang(signal);
  }

  // Served by the interceptor without a call of its own: only the fallback applies.
  @MessagePattern('with-fallback')
  @Fallback((_cause: unknown, data: unknown) => ({ fallback: true, data }))
  withFallback(@Payload() data: unknown) {
    return backend.call(data);
  }

  @EventPattern('note')
  @CircuitBreaker({ failureThreshold: 3, openMs: 60_000 })
  note(@Payload() data: unknown) {
    noted.push(data);
  }

  @MessagePattern('plain')
  plain(@Payload() data: unknown) {
    return { plain: data };
  }

  @Get('summary')
  @Dedup()
  summary() {
    return backend.call('http');
  }
}

@Module({ imports: [OrchestratorModule.forRoot()], controllers: [SummaryHandlers] })
class HybridModule {}

/** Keeps what the app logs (Nest's static logger goes to the last app created: one recorder for the file). */
class RecordingLogger implements LoggerService {
  readonly errors: string[] = [];
  log(): void {}
  warn(): void {}
  debug(): void {}
  verbose(): void {}
  error(message: unknown): void {
    this.errors.push(String(message));
  }
}
const logs = new RecordingLogger();

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as { port: number }).port;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

interface Hybrid {
  app: INestApplication;
  client: ClientProxy;
  url: string;
}

async function startHybrid(inheritAppConfig: boolean): Promise<Hybrid> {
  const port = await freePort();
  const app = await NestFactory.create(HybridModule, { logger: logs });
  const hybrid: Partial<Hybrid> = { app };
  try {
    const options = { transport: Transport.TCP, options: { host: '127.0.0.1', port } } as const;
    app.connectMicroservice(options, inheritAppConfig ? { inheritAppConfig: true } : {});
    await app.startAllMicroservices();
    await app.listen(0, '127.0.0.1');
    hybrid.url = await app.getUrl();
    const client = ClientProxyFactory.create(options as never) as unknown as ClientProxy;
    hybrid.client = client;
    await client.connect();
    return hybrid as Hybrid;
  } catch (error) {
    await stopHybrid(hybrid);
    throw error;
  }
}

async function stopHybrid(hybrid: Partial<Hybrid> | undefined): Promise<void> {
  backend.gate.resolve();
  await hybrid?.client?.close();
  await hybrid?.app?.close();
}

function sender(hybrid: () => Hybrid | undefined) {
  const send = <T>(pattern: string, data: unknown) => firstValueFrom(hybrid()!.client.send<T>(pattern, data));
  const failure = (pattern: string, data: unknown) =>
    send(pattern, data).then(
      () => undefined,
      (error: unknown) => error as Record<string, unknown>,
    );
  return { send, failure };
}

describe('a hybrid app whose microservice is connected without inheritAppConfig', () => {
  let hybrid: Hybrid | undefined;
  const { send, failure } = sender(() => hybrid);

  beforeAll(async () => {
    hybrid = await startHybrid(false);
  });
  afterAll(() => stopHybrid(hybrid));
  beforeEach(() => backend.reset());

  it('fails a decorated message handler with an error naming it and the fix, instead of running it undecorated', async () => {
    const refused = await failure('summarize', { doc: 1 });
    expect(refused).toMatchObject({ status: 'error', code: 'ORCHESTRATOR_NOT_APPLIED', retryable: false });
    expect(String(refused?.message)).toContain('SummaryHandlers.summarize');
    expect(String(refused?.message)).toContain('{ inheritAppConfig: true }');
    expect(backend.calls).toBe(0);
  });

  it('fails a handler that reads @CallSignal() rather than give it no signal', async () => {
    const refused = await failure('hang', 1);
    expect(refused).toMatchObject({ code: 'ORCHESTRATOR_NOT_APPLIED' });
    expect(String(refused?.message)).toContain('SummaryHandlers.hang');
    expect(backend.calls).toBe(0);
  });

  it('logs the problem once per handler', async () => {
    await failure('summarize', { doc: 2 });
    await failure('summarize', { doc: 3 });
    const lines = logs.errors.filter((line) => line.includes('SummaryHandlers.summarize'));
    expect(lines).toHaveLength(1);
    expect(lines[0]).toContain('inheritAppConfig');
  });

  it('logs a decorated event handler, which has no caller to answer, and does not run it', async () => {
    hybrid!.client.emit('note', { n: 1 });
    await waitFor(
      () => logs.errors.some((line) => line.includes('SummaryHandlers.note')),
      5_000,
      'the log line of the event handler',
    );
    expect(logs.errors.find((line) => line.includes('SummaryHandlers.note'))).toContain('event');
    expect(noted).toEqual([]);
  });

  it('leaves handlers without orchestrator decorators and the HTTP routes as they are', async () => {
    expect(await send('plain', 1)).toEqual({ plain: 1 });
    const response = await fetch(`${hybrid!.url}/summary`);
    expect(response.status).toBe(200);
    expect(backend.calls).toBe(1);
  });
});

describe('a hybrid app whose microservice is connected with inheritAppConfig', () => {
  let hybrid: Hybrid | undefined;
  const { send, failure } = sender(() => hybrid);

  beforeAll(async () => {
    hybrid = await startHybrid(true);
  });
  afterAll(() => stopHybrid(hybrid));
  beforeEach(() => backend.reset());

  it('answers 20 identical concurrent messages with one handler call', async () => {
    backend.mode = 'held';
    const answers = pending(Array.from({ length: 20 }, () => send<{ call: number }>('summarize', { doc: 1 })));
    await waitFor(() => backend.calls === 1, 5_000, 'the first call');
    await waitFor(() => callersWaiting(hybrid!.app.get(OrchestratorService)) === 20, 5_000, '20 callers on the call');
    backend.gate.resolve();
    const all = await Promise.all(answers);
    expect(backend.calls).toBe(1);
    expect(all.every((a) => a.call === 1)).toBe(true);
  });

  it('gives the handler its call signal and aborts it at the time limit', async () => {
    expect(await failure('hang', 1)).toMatchObject({ status: 'error', code: 'UPSTREAM_TIMEOUT' });
    expect(backend.signals).toHaveLength(1);
    expect(backend.signals[0].aborted).toBe(true);
  });

  it('answers with the fallback of a handler that has nothing but @Fallback', async () => {
    backend.mode = 'down';
    expect(await send('with-fallback', 7)).toEqual({ fallback: true, data: 7 });
    expect(backend.calls).toBe(1);
  });

  it('runs decorated event handlers', async () => {
    noted.length = 0;
    hybrid!.client.emit('note', { n: 2 });
    await waitFor(() => noted.length === 1, 5_000, 'the event handled');
    expect(noted).toEqual([{ n: 2 }]);
  });
});
