import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from '@jest/globals';
import { Module, type INestApplication } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { MessageBody, SubscribeMessage, WebSocketGateway } from '@nestjs/websockets';
import { io, type Socket } from 'socket.io-client';
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
import { Backend, callersWaiting, queued, pending } from './backend.js';

const backend = new Backend();

@WebSocketGateway()
class SummaryGateway {
  @SubscribeMessage('summarize')
  @Dedup()
  summarize(@MessageBody() data: unknown) {
    return backend.call(data);
  }

  @SubscribeMessage('flaky')
  @CircuitBreaker({ failureThreshold: 3, openMs: 60_000 })
  flaky(@MessageBody() data: unknown) {
    return backend.call(data);
  }

  @SubscribeMessage('limited')
  @Concurrency({ limit: 2, queueSize: 1_000 })
  limited(@MessageBody() data: unknown) {
    return backend.call(data);
  }

  @SubscribeMessage('hang')
  @CallTimeout(50)
  hang(@CallSignal() signal: AbortSignal | undefined) {
    return backend.hang(signal);
  }

  @SubscribeMessage('with-fallback')
  @CircuitBreaker({ failureThreshold: 2, openMs: 60_000 })
  @Fallback((_cause: unknown, _client: unknown, data: unknown) => ({ fallback: true, data }))
  withFallback(@MessageBody() data: unknown) {
    return backend.call(data);
  }
}

@Module({ imports: [OrchestratorModule.forRoot()], providers: [SummaryGateway] })
class GatewayModule {}

describe('decorators on WebSocket gateway messages (socket.io)', () => {
  let app: INestApplication;
  let url: string;
  const sockets: Socket[] = [];
  const exceptions = new Map<Socket, Array<Record<string, unknown>>>();
  const orchestrator = () => app.get(OrchestratorService);

  async function connect(): Promise<Socket> {
    const socket = io(url, { transports: ['websocket'], forceNew: true });
    sockets.push(socket);
    const received: Array<Record<string, unknown>> = [];
    exceptions.set(socket, received);
    socket.on('exception', (payload: Record<string, unknown>) => received.push(payload));
    await new Promise<void>((resolve, reject) => {
      socket.once('connect', () => resolve());
      socket.once('connect_error', reject);
    });
    return socket;
  }

  beforeAll(async () => {
    app = await NestFactory.create(GatewayModule, { logger: false });
    await app.listen(0, '127.0.0.1');
    url = `http://127.0.0.1:${(app.getHttpServer().address() as { port: number }).port}`;
  });
  afterEach(() => {
    for (const socket of sockets.splice(0)) socket.disconnect();
  });
  afterAll(async () => {
    backend.gate.resolve();
    await app?.close();
  });
  beforeEach(() => backend.reset());

  it('answers 100 identical concurrent messages of a client with one handler call, and not another client', async () => {
    const socket = await connect();
    backend.mode = 'held';
    const answers = pending(
      Array.from({ length: 100 }, () => socket.emitWithAck('summarize', { doc: 1 }) as Promise<{ call: number }>),
    );
    await waitFor(
      () => backend.calls === 1 && callersWaiting(orchestrator()) === 100,
      5_000,
      '100 messages on one call',
    );
    backend.gate.resolve();
    const all = await Promise.all(answers);
    expect(backend.calls).toBe(1);
    expect(all.every((a) => a.call === 1)).toBe(true);
    // Another connection is another caller: it never gets the first one's answer.
    const other = await connect();
    expect(await other.emitWithAck('summarize', { doc: 1 })).toMatchObject({ call: 2 });
  });

  it('opens the breaker after failures and refuses with a WsException payload', async () => {
    const socket = await connect();
    backend.mode = 'down';
    for (let i = 0; i < 3; i++) socket.emit('flaky', i);
    await waitFor(() => exceptions.get(socket)!.length === 3, 5_000, 'three failures');
    expect(backend.calls).toBe(3);
    socket.emit('flaky', 4);
    await waitFor(() => exceptions.get(socket)!.length === 4, 5_000, 'the refusal');
    const refused = exceptions.get(socket)![3];
    expect(refused).toMatchObject({ status: 'error', code: 'CIRCUIT_OPEN', retryable: false });
    expect(typeof refused.retryAfterMs).toBe('number');
    expect(backend.calls).toBe(3);
  });

  it('holds the concurrency limit', async () => {
    const socket = await connect();
    backend.mode = 'held';
    const calls = pending(Array.from({ length: 10 }, (_, i) => socket.emitWithAck('limited', i)));
    await waitFor(() => backend.calls === 2 && queued(orchestrator()) === 8, 5_000, 'two calls running, eight queued');
    backend.gate.resolve();
    await Promise.all(calls);
    expect(backend.calls).toBe(10);
    expect(backend.maxRunning).toBe(2);
  });

  it('aborts the handler through its signal when the time limit passes', async () => {
    const socket = await connect();
    socket.emit('hang', 1);
    await waitFor(() => exceptions.get(socket)!.length === 1, 5_000, 'the timeout');
    expect(exceptions.get(socket)![0]).toMatchObject({ status: 'error', code: 'UPSTREAM_TIMEOUT' });
    expect(backend.signals).toHaveLength(1);
    expect(backend.signals[0].aborted).toBe(true);
  });

  it('answers with the fallback when the handler fails and while the breaker is open', async () => {
    const socket = await connect();
    backend.mode = 'down';
    expect(await socket.emitWithAck('with-fallback', 1)).toEqual({ fallback: true, data: 1 });
    expect(await socket.emitWithAck('with-fallback', 2)).toEqual({ fallback: true, data: 2 });
    expect(await socket.emitWithAck('with-fallback', 3)).toEqual({ fallback: true, data: 3 });
    expect(backend.calls).toBe(2);
  });
});

describe("the module's identify option on WebSocket messages", () => {
  let app: INestApplication;
  let url: string;
  const sockets: Socket[] = [];

  @Module({
    imports: [
      OrchestratorModule.forRoot({
        // The user the client said it is at the handshake, instead of the connection.
        identify: (context) =>
          context.getType() === 'ws'
            ? String(context.switchToWs().getClient<{ handshake: { auth: { user?: string } } }>().handshake.auth.user)
            : undefined,
      }),
    ],
    providers: [SummaryGateway],
  })
  class IdentifiedModule {}

  async function connect(user: string): Promise<Socket> {
    const socket = io(url, { transports: ['websocket'], forceNew: true, auth: { user } });
    sockets.push(socket);
    await new Promise<void>((resolve, reject) => {
      socket.once('connect', () => resolve());
      socket.once('connect_error', reject);
    });
    return socket;
  }

  beforeAll(async () => {
    app = await NestFactory.create(IdentifiedModule, { logger: false });
    await app.listen(0, '127.0.0.1');
    url = `http://127.0.0.1:${(app.getHttpServer().address() as { port: number }).port}`;
  });
  afterAll(async () => {
    for (const socket of sockets.splice(0)) socket.disconnect();
    backend.gate.resolve();
    await app?.close();
  });
  beforeEach(() => backend.reset());

  it("keys by the identity it returns: one user's connections share a call, another user's do not", async () => {
    const [first, second, other] = [await connect('alice'), await connect('alice'), await connect('bob')];
    backend.mode = 'held';
    const answers = pending(
      [first, second, other].map((socket) => socket.emitWithAck('summarize', { doc: 7 }) as Promise<{ call: number }>),
    );
    await waitFor(
      () => backend.calls === 2 && callersWaiting(app.get(OrchestratorService)) === 3,
      5_000,
      'two calls, three callers',
    );
    backend.gate.resolve();
    const [a, b, c] = await Promise.all(answers);
    expect(a.call).toBe(b.call);
    expect(c.call).not.toBe(a.call);
    expect(backend.calls).toBe(2);
  });
});
