import { BadRequestException, HttpException, Injectable, SetMetadata, type CanActivate, type ExecutionContext } from '@nestjs/common';
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
    if (nestedDeeperThan(request.body, MAX_DEPTH)) {
      // Deeper than any real request; serialising it again for the provider would overflow the stack.
      throw new BadRequestException({
        error: {
          message: `The request body is nested more than ${MAX_DEPTH} levels deep.`,
          type: 'invalid_request_error',
          param: null,
          code: 'nested_too_deep',
        },
      });
    }
    return true;
  }
}

const MAX_DEPTH = 128;

/** Iterative, so that the check itself cannot overflow the stack. */
function nestedDeeperThan(body: unknown, limit: number): boolean {
  const stack: Array<[unknown, number]> = [[body, 1]];
  while (stack.length > 0) {
    const [value, depth] = stack.pop()!;
    if (depth > limit) return true;
    for (const child of Object.values(value as object)) {
      if (typeof child === 'object' && child !== null) stack.push([child, depth + 1]);
    }
  }
  return false;
}
