import { afterAll, beforeAll, beforeEach, describe, expect, it } from '@jest/globals';
import { NestFactory } from '@nestjs/core';
import { FastifyAdapter, type NestFastifyApplication } from '@nestjs/platform-fastify';
import { OrchestratorService } from 'nest-prompt-orchestrator';
import { AppModule } from '../src/app.module.js';
import { Backend } from '../src/backend.js';
import { waitFor } from './wait-for.js';

interface GraphQLAnswer {
  data?: Record<string, { call: number; echo: string; fallback?: boolean | null } | null> | null;
  errors?: Array<{ message: string; extensions?: Record<string, unknown> }>;
}

describe('nest-prompt-orchestrator on GraphQL resolvers (Nest 12, @nestjs/mercurius, Mercurius 16, Fastify 5)', () => {
  let app: NestFastifyApplication;
  let url: string;
  let backend: Backend;
  const health = () => app.get(OrchestratorService).health();
  const post = async (query: string, headers: Record<string, string> = {}): Promise<GraphQLAnswer> => {
    const response = await fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...headers },
      body: JSON.stringify({ query }),
    });
    return (await response.json()) as GraphQLAnswer;
  };

  beforeAll(async () => {
    app = await NestFactory.create<NestFastifyApplication>(AppModule, new FastifyAdapter(), { logger: false });
    await app.listen(0, '127.0.0.1');
    await app.getHttpAdapter().getInstance().ready();
    url = `${await app.getUrl()}/graphql`;
    backend = app.get(Backend);
  });
  afterAll(async () => {
    backend?.reset();
    await app?.close();
  });
  beforeEach(() => backend.reset());

  it('answers 100 identical concurrent queries of one caller with one service call, and not another caller', async () => {
    backend.mode = 'held';
    const query = '{ summarize(doc: "report") { call echo } }';
    const answers = Array.from({ length: 100 }, () => post(query, { authorization: 'Bearer alice' }));
    await waitFor(() => backend.calls === 1 && health().callersWaiting === 100, '100 queries waiting on one call');
    backend.gate.resolve();
    const all = await Promise.all(answers);
    expect(backend.calls).toBe(1);
    expect(all.every((answer) => answer.errors === undefined && answer.data?.summarize?.call === 1)).toBe(true);
    // Other credentials: another caller, never given alice's answer.
    expect((await post(query, { authorization: 'Bearer bob' })).data?.summarize?.call).toBe(2);
  });

  it('opens the breaker after 3 failures and refuses at once with CIRCUIT_OPEN in the error extensions', async () => {
    backend.mode = 'down';
    for (let n = 0; n < 3; n++) expect((await post(`{ flaky(n: ${n}) { call } }`)).errors).toHaveLength(1);
    expect(backend.calls).toBe(3);
    const refused = await post('{ flaky(n: 3) { call } }');
    expect(refused.errors).toHaveLength(1);
    expect(refused.errors?.[0].extensions).toMatchObject({ code: 'CIRCUIT_OPEN', retryable: false });
    expect(refused.errors?.[0].extensions?.retryAfterMs).toEqual(expect.any(Number));
    expect(backend.calls).toBe(3);
  });

  it('holds the concurrency limit: 2 resolver calls at a time, the others queued', async () => {
    backend.mode = 'held';
    const answers = Array.from({ length: 10 }, (_, n) => post(`{ limited(n: ${n}) { call } }`));
    await waitFor(
      () => backend.calls === 2 && health().limiters.reduce((sum, l) => sum + l.queued, 0) === 8,
      'two calls running, eight queued',
    );
    backend.gate.resolve();
    const all = await Promise.all(answers);
    expect(all.every((answer) => answer.errors === undefined)).toBe(true);
    expect(backend.calls).toBe(10);
    expect(backend.maxRunning).toBe(2);
  });

  it('aborts the call through currentCallSignal() when the time limit passes, and answers UPSTREAM_TIMEOUT', async () => {
    const answer = await post('{ hang { call } }');
    expect(answer.errors?.[0].extensions).toMatchObject({ code: 'UPSTREAM_TIMEOUT' });
    expect(backend.signals).toHaveLength(1);
    expect(backend.signals[0].aborted).toBe(true);
  });

  it('answers with the fallback when the resolver fails, and while its breaker is open without calling it', async () => {
    backend.mode = 'down';
    for (const n of [1, 2, 3]) {
      const answer = await post(`mutation { withFallback(n: ${n}) { call echo fallback } }`);
      expect(answer.errors).toBeUndefined();
      expect(answer.data?.withFallback).toEqual({ call: 0, echo: `fallback for ${n}`, fallback: true });
    }
    expect(backend.calls).toBe(2);
  });
});
