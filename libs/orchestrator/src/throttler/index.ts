/**
 * `nest-prompt-orchestrator/throttler`: storages for `@nestjs/throttler`
 * (an optional peer: nothing here loads it at run time, only its types are
 * used), so that rate limits on plain routes are shared by replicas through
 * Redis, and an OpenAI-shaped 429 for them.
 */
export { MemoryWindowCounters, type WindowCount, type WindowCounters } from './window-counters.js';
export {
  CountersUnavailableError,
  RedisThrottlerStorage,
  type RedisThrottlerStorageOptions,
  type ThrottlerRedisClient,
} from './redis-throttler-storage.js';
export { rateLimitErrorBody } from './rate-limit-error.js';
