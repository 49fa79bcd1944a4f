import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from '@jest/globals';
import type { INestApplication } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { io, type Socket } from 'socket.io-client';
import { OrchestratorService, type OrchestratorErrorPayload } from 'nest-prompt-orchestrator';
import { AppModule } from '../src/app.module.js';
import { Backend } from '../src/backend.js';
import { waitFor } from './wait-for.js';

describe('nest-prompt-orchestrator on WebSocket gateway messages (Nest 12, @nestjs/platform-socket.io)', () => {
  let app: INestApplication;
  let url: string;
  let backend: Backend;
  const sockets: Socket[] = [];
  /** The `exception` events each socket received: Nest's WsException payloads. */
  const exceptions = new Map<Socket, OrchestratorErrorPayload[]>();
  const health = () => app.get(OrchestratorService).health();

  async function connect(): Promise<Socket> {
    const socket = io(url, { transports: ['websocket'], forceNew: true });
    sockets.push(socket);
    const received: OrchestratorErrorPayload[] = [];
    exceptions.set(socket, received);
    socket.on('exception', (payload: OrchestratorErrorPayload) => received.push(payload));
    await new Promise<void>((resolve, reject) => {
      socket.once('connect', () => resolve());
      socket.once('connect_error', reject);
    });
    return socket;
  }

  beforeAll(async () => {
    app = await NestFactory.create(AppModule, { logger: false });
    await app.listen(0, '127.0.0.1');
    url = await app.getUrl();
    backend = app.get(Backend);
  });
  beforeEach(() => backend.reset());
  afterEach(() => {
    for (const socket of sockets.splice(0)) socket.disconnect();
  });
  afterAll(async () => {
    backend?.reset();
    await app?.close();
  });

  it('answers 100 identical concurrent messages of one client with one service call, and not another client', async () => {
    const socket = await connect();
    backend.mode = 'held';
    const answers = Array.from(
      { length: 100 },
      () => socket.emitWithAck('summarize', 'report') as Promise<{ call: number }>,
    );
    await waitFor(() => backend.calls === 1 && health().callersWaiting === 100, '100 messages waiting on one call');
    backend.gate.resolve();
    const all = await Promise.all(answers);
    expect(backend.calls).toBe(1);
    expect(all.every((answer) => answer.call === 1)).toBe(true);
    // Another connection is another caller: it never gets the first one's answer.
    const other = await connect();
    expect(await other.emitWithAck('summarize', 'report')).toMatchObject({ call: 2 });
  });

  it('opens the breaker after 3 failures and refuses at once with the WsException payload CIRCUIT_OPEN', async () => {
    const socket = await connect();
    backend.mode = 'down';
    for (let n = 0; n < 3; n++) socket.emit('flaky', n);
    await waitFor(() => exceptions.get(socket)!.length === 3, 'three failures');
    expect(backend.calls).toBe(3);
    socket.emit('flaky', 3);
    await waitFor(() => exceptions.get(socket)!.length === 4, 'the refusal');
    const refused = exceptions.get(socket)![3];
    expect(refused).toMatchObject({ status: 'error', code: 'CIRCUIT_OPEN', retryable: false });
    expect(refused.retryAfterMs).toEqual(expect.any(Number));
    expect(backend.calls).toBe(3);
  });

  it('holds the concurrency limit: 2 handler calls at a time, the others queued', async () => {
    const socket = await connect();
    backend.mode = 'held';
    const answers = Array.from({ length: 10 }, (_, n) => socket.emitWithAck('limited', n));
    await waitFor(
      () => backend.calls === 2 && health().limiters.reduce((sum, l) => sum + l.queued, 0) === 8,
      'two calls running, eight queued',
    );
    backend.gate.resolve();
    await Promise.all(answers);
    expect(backend.calls).toBe(10);
    expect(backend.maxRunning).toBe(2);
  });

  it('aborts the handler through @CallSignal() when the time limit passes, and sends UPSTREAM_TIMEOUT', async () => {
    const socket = await connect();
    socket.emit('hang', 1);
    await waitFor(() => exceptions.get(socket)!.length === 1, 'the time limit');
    expect(exceptions.get(socket)![0]).toMatchObject({ status: 'error', code: 'UPSTREAM_TIMEOUT' });
    expect(backend.signals).toHaveLength(1);
    expect(backend.signals[0].aborted).toBe(true);
  });

  it('answers with the fallback when the handler fails, and while its breaker is open without calling it', async () => {
    const socket = await connect();
    backend.mode = 'down';
    for (const n of [1, 2, 3])
      expect(await socket.emitWithAck('with-fallback', n)).toEqual({
        call: 0,
        echo: `fallback for ${n}`,
        fallback: true,
      });
    expect(backend.calls).toBe(2);
  });
});
