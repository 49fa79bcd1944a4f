import { describe, expect, it } from '@jest/globals';
import { Module } from '@nestjs/common';
import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { NestFactory } from '@nestjs/core';
import { Args, GraphQLModule, Int, Query, Resolver } from '@nestjs/graphql';
import { Dedup, OrchestratorConfigError, OrchestratorModule } from 'nest-prompt-orchestrator';

@Resolver()
class StrayResolver {
  @Query(() => Int)
  total(@Args('n', { type: () => Int }) n: number) {
    return this.double(n);
  }

  // Not a resolver field: the resolver calls it directly, so nothing would apply the decorator.
  @Dedup()
  double(n: number) {
    return n * 2;
  }
}

@Module({
  imports: [
    OrchestratorModule.forRoot(),
    GraphQLModule.forRoot<ApolloDriverConfig>({ driver: ApolloDriver, autoSchemaFile: true }),
  ],
  providers: [StrayResolver],
})
class StrayModule {}

describe('a decorator where the plugin cannot act', () => {
  it('stops start-up with an error naming the class and the method', async () => {
    const app = await NestFactory.create(StrayModule, { logger: false, abortOnError: false });
    const error = await app.init().then(
      () => undefined,
      (e: unknown) => e,
    );
    await app.close().catch(() => undefined);
    expect(error).toBeInstanceOf(OrchestratorConfigError);
    expect((error as Error).message).toContain('StrayResolver.double');
    expect((error as Error).message).toContain('nothing would apply');
  });
});
