import { Body, Controller, HttpCode, Post, Req } from '@nestjs/common';
import { CallSignal } from 'nest-prompt-orchestrator';
import type { IncomingMessage } from 'node:http';
import { GatewayService } from '../gateway.service.js';
import { ValidateBody } from '../http/body-validation.guard.js';
import { callerOf } from './caller.js';
import { validateMessages } from './request-validation.js';
import { UpstreamRoute } from './upstream-route.decorator.js';

/** The Anthropic Messages API. */
@Controller('v1')
@UpstreamRoute()
export class AnthropicController {
  constructor(private readonly gateway: GatewayService) {}

  @Post('messages')
  @HttpCode(200)
  @ValidateBody(validateMessages)
  messages(@Body() body: Record<string, unknown>, @Req() request: IncomingMessage, @CallSignal() signal?: AbortSignal) {
    return this.gateway.messages(body, callerOf(request, signal));
  }
}
