import { MessageBody, SubscribeMessage, WebSocketGateway } from '@nestjs/websockets';
import { CallSignal, CallTimeout, CircuitBreaker, Concurrency, Dedup, Fallback } from 'nest-prompt-orchestrator';
import { Backend } from './backend.js';

@WebSocketGateway()
export class SummaryGateway {
  constructor(private readonly backend: Backend) {}

  @SubscribeMessage('summarize')
  @Dedup()
  summarize(@MessageBody() doc: string) {
    return this.backend.call(doc);
  }

  @SubscribeMessage('flaky')
  @CircuitBreaker({ name: 'summaries', failureThreshold: 3, openMs: 60_000 })
  flaky(@MessageBody() n: number) {
    return this.backend.call(n);
  }

  @SubscribeMessage('limited')
  @Concurrency({ limit: 2, queueSize: 100 })
  limited(@MessageBody() n: number) {
    return this.backend.call(n);
  }

  @SubscribeMessage('hang')
  @CallTimeout(100)
  hang(@CallSignal() signal: AbortSignal | undefined) {
    return this.backend.hang(signal);
  }

  @SubscribeMessage('with-fallback')
  @CircuitBreaker({ name: 'with-fallback', failureThreshold: 2, openMs: 60_000 })
  @Fallback((_cause: unknown, _client: unknown, n: unknown) => ({
    call: 0,
    echo: `fallback for ${String(n)}`,
    fallback: true,
  }))
  withFallback(@MessageBody() n: number) {
    return this.backend.call(n);
  }
}
