import { Injectable, type ExecutionContext } from '@nestjs/common';
import { OrchestratorInterceptor, type OrchestratorError } from 'nest-prompt-orchestrator';

/**
 * The orchestrator's interceptor, with its errors left typed: the gateway's
 * exception filter renders them (and every other error) once, in the API the
 * client speaks on the route.
 */
@Injectable()
export class GatewayInterceptor extends OrchestratorInterceptor {
  protected override throwOrchestratorError(error: OrchestratorError, _context: ExecutionContext): never {
    throw error;
  }
}
