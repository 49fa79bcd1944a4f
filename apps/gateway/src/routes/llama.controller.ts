import { Body, Controller, Get, HttpCode, Post, Req } from '@nestjs/common';
import { CallSignal } from 'nest-prompt-orchestrator';
import type { IncomingMessage } from 'node:http';
import { GatewayService } from '../gateway.service.js';
import { ValidateBody } from '../http/body-validation.guard.js';
import { callerOf } from './caller.js';
import {
  validateApplyTemplate,
  validateDetokenize,
  validateNativeCompletion,
  validateTokenize,
} from './request-validation.js';
import { UpstreamRoute } from './upstream-route.decorator.js';

type Json = Record<string, unknown>;

/** llama.cpp server's native routes, proxied as they are (native SSE: no [DONE]). */
@Controller()
@UpstreamRoute()
export class LlamaController {
  constructor(private readonly gateway: GatewayService) {}

  @Post('completion')
  @HttpCode(200)
  @ValidateBody(validateNativeCompletion)
  completion(@Body() body: Json, @Req() request: IncomingMessage, @CallSignal() signal?: AbortSignal) {
    return this.gateway.native('/completion', body, callerOf(request, signal));
  }

  @Post('tokenize')
  @HttpCode(200)
  @ValidateBody(validateTokenize)
  tokenize(@Body() body: Json, @Req() request: IncomingMessage, @CallSignal() signal?: AbortSignal) {
    return this.gateway.native('/tokenize', body, callerOf(request, signal));
  }

  @Post('detokenize')
  @HttpCode(200)
  @ValidateBody(validateDetokenize)
  detokenize(@Body() body: Json, @Req() request: IncomingMessage, @CallSignal() signal?: AbortSignal) {
    return this.gateway.native('/detokenize', body, callerOf(request, signal));
  }

  @Post('apply-template')
  @HttpCode(200)
  @ValidateBody(validateApplyTemplate)
  applyTemplate(@Body() body: Json, @Req() request: IncomingMessage, @CallSignal() signal?: AbortSignal) {
    return this.gateway.native('/apply-template', body, callerOf(request, signal));
  }

  @Get('props')
  props(@Req() request: IncomingMessage, @CallSignal() signal?: AbortSignal) {
    return this.gateway.native('/props', undefined, callerOf(request, signal));
  }
}
