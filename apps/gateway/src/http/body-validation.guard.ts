import { HttpException, Injectable, SetMetadata, type CanActivate, type ExecutionContext } from '@nestjs/common';
import { Reflector } from '@nestjs/core';

const BODY_VALIDATOR = 'gateway:body-validator';

/** Checks the JSON body of a route before anything else runs; the check throws a 4xx naming the field. */
export const ValidateBody = (validate: (body: unknown) => unknown) => SetMetadata(BODY_VALIDATOR, validate);

/**
 * Runs before the orchestrator's interceptor (Nest runs guards first), so a
 * malformed request is answered at once: it is never deduplicated, never
 * queued and never counted by the breaker.
 */
@Injectable()
export class BodyValidationGuard implements CanActivate {
  constructor(private readonly reflector: Reflector) {}

  canActivate(context: ExecutionContext): boolean {
    const validate = this.reflector.get<((body: unknown) => unknown) | undefined>(BODY_VALIDATOR, context.getHandler());
    if (!validate) return true;
    const request = context.switchToHttp().getRequest<{ headers: Record<string, string | undefined>; body?: unknown }>();
    const type = request.headers['content-type'];
    if (!type || !/^application\/(.+\+)?json\b/i.test(type)) {
      throw new HttpException(
        {
          error: {
            message: `Content-Type must be application/json, got ${type ? `"${type.slice(0, 100)}"` : 'none'}.`,
            type: 'invalid_request_error',
            param: null,
            code: 'unsupported_media_type',
          },
        },
        415,
      );
    }
    validate(request.body);
    return true;
  }
}
