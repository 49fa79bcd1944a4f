import { Controller } from '@nestjs/common';
import { GatewayService } from '../gateway.service.js';
import { validateChat, validateCompletion, validateEmbeddings } from '../http/request-validation.js';
import { CurrentCaller, ProxyRoute, type Caller } from './gateway-route.decorator.js';

/** The OpenAI API: clients (the official SDK included) change only their base URL. */
@Controller()
export class OpenAIController {
  constructor(private readonly gateway: GatewayService) {}

  @ProxyRoute('chat', validateChat)
  chat(@CurrentCaller() caller: Caller) {
    return this.gateway.forward(caller);
  }

  @ProxyRoute('completions', validateCompletion)
  completions(@CurrentCaller() caller: Caller) {
    return this.gateway.forward(caller);
  }

  @ProxyRoute('embeddings', validateEmbeddings)
  embeddings(@CurrentCaller() caller: Caller) {
    return this.gateway.forward(caller);
  }

  @ProxyRoute('models')
  models(@CurrentCaller() caller: Caller) {
    return this.gateway.forward(caller);
  }
}
