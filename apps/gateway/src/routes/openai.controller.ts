import { Body, Controller, Get, HttpCode, Post, Req } from '@nestjs/common';
import { CallSignal } from 'nest-prompt-orchestrator';
import type { IncomingMessage } from 'node:http';
import { GatewayService } from '../gateway.service.js';
import { ValidateBody } from '../http/body-validation.guard.js';
import { callerOf } from './caller.js';
import { validateChat, validateCompletion, validateEmbeddings } from './request-validation.js';
import { UpstreamRoute } from './upstream-route.decorator.js';

type Json = Record<string, unknown>;

/** The OpenAI API: clients (the official SDK included) change only their base URL. */
@Controller('v1')
@UpstreamRoute()
export class OpenAIController {
  constructor(private readonly gateway: GatewayService) {}

  @Post('chat/completions')
  @HttpCode(200)
  @ValidateBody(validateChat)
  chat(@Body() body: Json, @Req() request: IncomingMessage, @CallSignal() signal?: AbortSignal) {
    return this.gateway.chat(body, callerOf(request, signal));
  }

  @Post('completions')
  @HttpCode(200)
  @ValidateBody(validateCompletion)
  completions(@Body() body: Json, @Req() request: IncomingMessage, @CallSignal() signal?: AbortSignal) {
    return this.gateway.completions(body, callerOf(request, signal));
  }

  @Post('embeddings')
  @HttpCode(200)
  @ValidateBody(validateEmbeddings)
  embeddings(@Body() body: Json, @Req() request: IncomingMessage, @CallSignal() signal?: AbortSignal) {
    return this.gateway.embeddings(body, callerOf(request, signal));
  }

  @Get('models')
  models(@Req() request: IncomingMessage, @CallSignal() signal?: AbortSignal) {
    return this.gateway.models(callerOf(request, signal));
  }
}
