import { Controller } from '@nestjs/common';
import { GatewayService } from '../gateway.service.js';
import { CurrentCaller, ProxyRoute, type Caller } from './gateway-route.decorator.js';

/** The Anthropic Messages API. */
@Controller()
export class AnthropicController {
  constructor(private readonly gateway: GatewayService) {}

  @ProxyRoute('messages')
  messages(@CurrentCaller() caller: Caller) {
    return this.gateway.forward(caller);
  }

  @ProxyRoute('count-tokens')
  countTokens(@CurrentCaller() caller: Caller) {
    return this.gateway.forward(caller);
  }
}
