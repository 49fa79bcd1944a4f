import { Args, Field, Int, Mutation, ObjectType, Query, Resolver } from '@nestjs/graphql';
import { CallTimeout, CircuitBreaker, Concurrency, Dedup, Fallback, currentCallSignal } from 'nest-prompt-orchestrator';
import { Backend } from './backend.js';

@ObjectType()
export class Summary {
  @Field(() => Int) call!: number;
  @Field(() => String) echo!: string;
  @Field(() => Boolean, { nullable: true }) fallback?: boolean;
}

@Resolver(() => Summary)
export class SummaryResolver {
  constructor(private readonly backend: Backend) {}

  @Query(() => Summary)
  @Dedup()
  summarize(@Args('doc', { type: () => String }) doc: string) {
    return this.backend.call(doc);
  }

  @Query(() => Summary)
  @CircuitBreaker({ name: 'summaries', failureThreshold: 3, openMs: 60_000 })
  flaky(@Args('n', { type: () => Int }) n: number) {
    return this.backend.call(n);
  }

  @Query(() => Summary)
  @Concurrency({ limit: 2, queueSize: 100 })
  limited(@Args('n', { type: () => Int }) n: number) {
    return this.backend.call(n);
  }

  @Query(() => Summary)
  @CallTimeout(100)
  hang() {
    return this.backend.hang(currentCallSignal());
  }

  @Mutation(() => Summary)
  @CircuitBreaker({ name: 'with-fallback', failureThreshold: 2, openMs: 60_000 })
  @Fallback((_cause: unknown, _root: unknown, args: { n: number }) => ({
    call: 0,
    echo: `fallback for ${args.n}`,
    fallback: true,
  }))
  withFallback(@Args('n', { type: () => Int }) n: number) {
    return this.backend.call(n);
  }
}
