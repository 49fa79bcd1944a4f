import { Controller } from '@nestjs/common';
import { EventPattern, MessagePattern, Payload } from '@nestjs/microservices';
import { CallSignal, CallTimeout, CircuitBreaker, Concurrency, Dedup, Fallback } from 'nest-prompt-orchestrator';
import { Backend } from './backend.js';

export interface SummaryRequest {
  tenant: string;
  doc: string;
}

@Controller()
export class SummaryHandlers {
  constructor(private readonly backend: Backend) {}

  @MessagePattern('summarize')
  @Dedup()
  summarize(@Payload() request: SummaryRequest) {
    return this.backend.call(request.doc);
  }

  @EventPattern('reindex')
  @Dedup()
  reindex(@Payload() request: SummaryRequest) {
    return this.backend.call(request.doc);
  }

  @MessagePattern('flaky')
  @CircuitBreaker({ name: 'summaries', failureThreshold: 3, openMs: 60_000 })
  flaky(@Payload() n: number) {
    return this.backend.call(n);
  }

  @MessagePattern('limited')
  @Concurrency({ limit: 2, queueSize: 100 })
  limited(@Payload() n: number) {
    return this.backend.call(n);
  }

  @MessagePattern('hang')
  @CallTimeout(100)
  hang(@CallSignal() signal: AbortSignal | undefined) {
    return this.backend.hang(signal);
  }

  @MessagePattern('with-fallback')
  @CircuitBreaker({ name: 'with-fallback', failureThreshold: 2, openMs: 60_000 })
  @Fallback((_cause: unknown, n: unknown) => ({ call: 0, echo: `fallback for ${String(n)}`, fallback: true }))
  withFallback(@Payload() n: number) {
    return this.backend.call(n);
  }
}
