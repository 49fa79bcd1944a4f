import { Controller } from '@nestjs/common';
import { MessagePattern, Payload, RpcException } from '@nestjs/microservices';
import { CallSignal, CallTimeout, CircuitBreaker, Concurrency, Dedup } from 'nest-prompt-orchestrator';
import { RatesFeed } from './rates-feed.js';

/**
 * The same feed for other services, over the TCP transport (message pattern `rates`, data `{ base: 'EUR' }`), under the
 * same named breaker and limit as the HTTP route and the GraphQL resolver. A refusal reaches the client as the error
 * `{ status: 'error', code: 'CIRCUIT_OPEN', retryAfterMs, ... }`.
 */
@Controller()
export class RatesHandlers {
  constructor(private readonly feed: RatesFeed) {}

  @MessagePattern('rates')
  @Dedup()
  @CircuitBreaker('rates-feed')
  @Concurrency({ name: 'rates-feed' })
  @CallTimeout(2_000)
  rates(@Payload() data: { base?: unknown } | undefined, @CallSignal() signal: AbortSignal) {
    if (typeof data?.base !== 'string' || data.base === '')
      throw new RpcException({ status: 'error', code: 'BAD_REQUEST', message: 'base must be a currency code' });
    return this.feed.latest(data.base.toUpperCase(), signal);
  }
}
