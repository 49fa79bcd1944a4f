import { afterAll, beforeAll, beforeEach, describe, expect, it, jest } from '@jest/globals';
import { Module, type INestApplication } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import type { MercuriusDriverConfig } from '@nestjs/mercurius';
import { createRequire } from 'node:module';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import { Args, Field, Int, Mutation, ObjectType, Query, Resolver, GraphQLModule } from '@nestjs/graphql';
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

@ObjectType()
class Summary {
  @Field(() => Int) call!: number;
  @Field(() => String) echo!: string;
  @Field(() => Boolean, { nullable: true }) fallback?: boolean;
}

const summary = async (input: unknown): Promise<Summary> => {
  const { call, echo } = await backend.call(input);
  return { call, echo: String(echo) };
};

@Resolver(() => Summary)
class SummaryResolver {
  @Query(() => Summary)
  @Dedup()
  summarize(@Args('doc', { type: () => String }) doc: string) {
    return summary(doc);
  }

  @Query(() => Summary)
  @CircuitBreaker({ failureThreshold: 3, openMs: 60_000 })
  flaky(@Args('n', { type: () => Int }) n: number) {
    return summary(n);
  }

  @Query(() => Summary)
  @Concurrency({ limit: 2, queueSize: 1_000 })
  limited(@Args('n', { type: () => Int }) n: number) {
    return summary(n);
  }

  @Query(() => Summary)
  @CallTimeout(50)
  hang(@CallSignal() signal: AbortSignal | undefined) {
    return backend.hang(signal);
  }

  @Mutation(() => Summary)
  @CircuitBreaker({ failureThreshold: 2, openMs: 60_000 })
  @Fallback((_cause: unknown, _root: unknown, args: { n: number }) => ({
    call: 0,
    echo: String(args.n),
    fallback: true,
  }))
  withFallback(@Args('n', { type: () => Int }) n: number) {
    return summary(n);
  }
}

@Module({
  imports: [
    OrchestratorModule.forRoot(),
    GraphQLModule.forRoot<ApolloDriverConfig>({ driver: ApolloDriver, autoSchemaFile: true }),
  ],
  providers: [SummaryResolver],
})
class ApolloAppModule {}

// Mercurius loads @fastify/static at once, which requires the ESM-only content-disposition 3: Jest's CommonJS loader
// cannot on Node 20 (Node itself can). It serves no file here, so that one module is stood in for, and Mercurius is
// loaded after that.
jest.mock(
  createRequire(createRequire(import.meta.url).resolve('@fastify/static')).resolve('content-disposition'),
  () => ({
    create: (filename: string) => `attachment; filename="${filename}"`,
  }),
);

async function mercuriusApp(): Promise<INestApplication> {
  const { MercuriusDriver } = await import('@nestjs/mercurius');
  @Module({
    imports: [
      OrchestratorModule.forRoot(),
      GraphQLModule.forRoot<MercuriusDriverConfig>({ driver: MercuriusDriver, autoSchemaFile: true }),
    ],
    providers: [SummaryResolver],
  })
  class MercuriusAppModule {}
  return NestFactory.create(MercuriusAppModule, new FastifyAdapter(), { logger: false });
}

const DRIVERS = [
  ['Apollo on Express', () => NestFactory.create(ApolloAppModule, { logger: false })],
  ['Mercurius on Fastify', mercuriusApp],
] as const;

interface GraphQLAnswer {
  data?: Record<string, { call: number; echo: string; fallback?: boolean } | null> | null;
  errors?: Array<{ message: string; extensions?: Record<string, unknown> }>;
}

describe.each(DRIVERS)('decorators on GraphQL resolvers (%s)', (_driver, create) => {
  let app: INestApplication;
  let url: string;
  const orchestrator = () => app.get(OrchestratorService);
  const post = async (query: string, headers: Record<string, string> = {}): Promise<GraphQLAnswer> => {
    const response = await fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...headers },
      body: JSON.stringify({ query }),
    });
    return (await response.json()) as GraphQLAnswer;
  };

  beforeAll(async () => {
    app = await create();
    await app.listen(0, '127.0.0.1');
    url = `http://127.0.0.1:${(app.getHttpServer().address() as { port: number }).port}/graphql`;
  });
  afterAll(async () => {
    backend.gate.resolve();
    await app?.close();
  });
  beforeEach(() => backend.reset());

  it('answers 100 identical concurrent queries with one resolver call, and not a caller with other credentials', async () => {
    backend.mode = 'held';
    const query = '{ summarize(doc: "d1") { call echo } }';
    const answers = pending(Array.from({ length: 100 }, () => post(query, { authorization: 'Bearer alice' })));
    await waitFor(
      () => backend.calls === 1 && callersWaiting(orchestrator()) === 100,
      10_000,
      '100 queries on one call',
    );
    backend.gate.resolve();
    const all = await Promise.all(answers);
    expect(backend.calls).toBe(1);
    expect(all.every((a) => a.data?.summarize?.call === 1)).toBe(true);
    const bob = await post(query, { authorization: 'Bearer bob' });
    expect(bob.data?.summarize?.call).toBe(2);
  });

  it('opens the breaker after failures and refuses with a GraphQL error whose extensions carry the code', async () => {
    backend.mode = 'down';
    for (let i = 0; i < 3; i++) expect((await post(`{ flaky(n: ${i}) { call } }`)).errors).toHaveLength(1);
    expect(backend.calls).toBe(3);
    const refused = await post('{ flaky(n: 4) { call } }');
    expect(refused.errors?.[0].extensions).toMatchObject({ code: 'CIRCUIT_OPEN', retryable: false });
    expect(typeof refused.errors?.[0].extensions?.retryAfterMs).toBe('number');
    expect(refused.errors?.[0].message).toContain('failing');
    expect(backend.calls).toBe(3);
  });

  it('holds the concurrency limit', async () => {
    backend.mode = 'held';
    const calls = pending(Array.from({ length: 10 }, (_, i) => post(`{ limited(n: ${i}) { call } }`)));
    await waitFor(() => backend.calls === 2 && queued(orchestrator()) === 8, 10_000, 'two calls running, eight queued');
    backend.gate.resolve();
    const all = await Promise.all(calls);
    expect(all.every((a) => a.errors === undefined)).toBe(true);
    expect(backend.calls).toBe(10);
    expect(backend.maxRunning).toBe(2);
  });

  it('aborts the resolver through its signal when the time limit passes', async () => {
    const answer = await post('{ hang { call } }');
    expect(answer.errors?.[0].extensions).toMatchObject({ code: 'UPSTREAM_TIMEOUT' });
    expect(backend.signals).toHaveLength(1);
    expect(backend.signals[0].aborted).toBe(true);
  });

  it('answers with the fallback when the resolver fails and while the breaker is open', async () => {
    backend.mode = 'down';
    for (const n of [1, 2, 3]) {
      const answer = await post(`mutation { withFallback(n: ${n}) { call echo fallback } }`);
      expect(answer.data?.withFallback).toEqual({ call: 0, echo: String(n), fallback: true });
    }
    expect(backend.calls).toBe(2);
  });
});
