import { Args, Field, Float, ObjectType, Query, Resolver } from '@nestjs/graphql';
import { CallSignal, CallTimeout, CircuitBreaker, Concurrency, Dedup } from 'nest-prompt-orchestrator';
import { RatesFeed } from './rates-feed.js';

@ObjectType()
export class Rate {
  @Field(() => String) currency!: string;
  @Field(() => Float) rate!: number;
}

@ObjectType()
export class Rates {
  @Field(() => String) base!: string;
  @Field(() => String) asOf!: string;
  @Field(() => [Rate]) rates!: Rate[];
}

/**
 * The same feed over GraphQL (`POST /graphql`, `{ rates(base: "EUR") { asOf rates { currency rate } } }`), under the
 * same named breaker and limit as the HTTP route: an outage seen through one is refused through the other.
 */
@Resolver(() => Rates)
export class RatesResolver {
  constructor(private readonly feed: RatesFeed) {}

  @Query(() => Rates, { description: 'Rates of one unit of `base` in a few other currencies' })
  @Dedup({ windowMs: 10_000 })
  @CircuitBreaker('rates-feed')
  @Concurrency({ name: 'rates-feed' })
  @CallTimeout(2_000)
  async rates(@Args('base', { type: () => String }) base: string, @CallSignal() signal: AbortSignal): Promise<Rates> {
    const latest = await this.feed.latest(base.toUpperCase(), signal);
    return {
      base: latest.base,
      asOf: latest.asOf,
      rates: Object.entries(latest.rates).map(([currency, rate]) => ({ currency, rate })),
    };
  }
}
