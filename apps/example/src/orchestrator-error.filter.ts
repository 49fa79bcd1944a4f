import { Catch, type ArgumentsHost, type ExceptionFilter } from '@nestjs/common';
import { HttpAdapterHost } from '@nestjs/core';
import { OrchestratorError, errorBody, errorHeaders } from 'nest-prompt-orchestrator';

/**
 * Decorated routes answer the orchestrator's own errors (breaker open, queue full, timeout) with their status and
 * headers. `OrchestratorService.run()` throws them as they are, so a route that calls it through a service needs
 * this filter to answer 503 / 429 / 504 with the same body and headers instead of Nest's 500.
 */
@Catch(OrchestratorError)
export class OrchestratorErrorFilter implements ExceptionFilter {
  constructor(private readonly adapterHost: HttpAdapterHost) {}

  catch(error: OrchestratorError, host: ArgumentsHost): void {
    const { httpAdapter } = this.adapterHost;
    const response = host.switchToHttp().getResponse<unknown>();
    for (const [name, value] of Object.entries(errorHeaders(error))) httpAdapter.setHeader(response, name, value);
    httpAdapter.reply(response, errorBody(error), error.status);
  }
}
