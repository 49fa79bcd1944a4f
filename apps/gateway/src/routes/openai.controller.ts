import { Controller } from '@nestjs/common';
import { GatewayService } from '../gateway.service.js';
import { CurrentCaller, ProxyRoute, type Caller } from './gateway-route.decorator.js';

/** The OpenAI API (and llama-server's additions to it): clients (the official SDK included) change only their base URL. */
@Controller()
export class OpenAIController {
  constructor(private readonly gateway: GatewayService) {}

  @ProxyRoute('chat')
  chat(@CurrentCaller() caller: Caller) {
    return this.gateway.forward(caller);
  }

  @ProxyRoute('completions')
  completions(@CurrentCaller() caller: Caller) {
    return this.gateway.forward(caller);
  }

  @ProxyRoute('embeddings')
  embeddings(@CurrentCaller() caller: Caller) {
    return this.gateway.forward(caller);
  }

  @ProxyRoute('models')
  models(@CurrentCaller() caller: Caller) {
    return this.gateway.forward(caller);
  }

  @ProxyRoute('responses')
  responses(@CurrentCaller() caller: Caller) {
    return this.gateway.forward(caller);
  }

  @ProxyRoute('responses-input-tokens')
  responsesInputTokens(@CurrentCaller() caller: Caller) {
    return this.gateway.forward(caller);
  }

  @ProxyRoute('chat-input-tokens')
  chatInputTokens(@CurrentCaller() caller: Caller) {
    return this.gateway.forward(caller);
  }

  @ProxyRoute('chat-control')
  chatControl(@CurrentCaller() caller: Caller) {
    return this.gateway.forward(caller);
  }

  @ProxyRoute('transcriptions')
  transcriptions(@CurrentCaller() caller: Caller) {
    return this.gateway.forward(caller);
  }
}
