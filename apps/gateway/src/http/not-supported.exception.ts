import { HttpException } from '@nestjs/common';

/** A route the configured provider cannot serve: 501, as llama.cpp answers for disabled endpoints. */
export class NotSupportedException extends HttpException {
  constructor(message: string) {
    super({ error: { message, type: 'not_supported_error', param: null, code: 'not_supported' } }, 501);
  }
}
