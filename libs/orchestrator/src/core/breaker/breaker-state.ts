// On its own so the cluster contracts can name a breaker's state without importing the breaker itself.
export type BreakerState = 'closed' | 'open' | 'half_open';
