import { Controller } from '@nestjs/common';
import { GatewayService } from '../gateway.service.js';
import {
  validateApplyTemplate,
  validateDetokenize,
  validateNativeCompletion,
  validateTokenize,
} from '../http/request-validation.js';
import { CurrentCaller, ProxyRoute, type Caller } from './gateway-route.decorator.js';

/** llama.cpp server's native routes, proxied as they are (native SSE: no [DONE]). */
@Controller()
export class LlamaController {
  constructor(private readonly gateway: GatewayService) {}

  @ProxyRoute('completion', validateNativeCompletion)
  completion(@CurrentCaller() caller: Caller) {
    return this.gateway.forward(caller);
  }

  @ProxyRoute('tokenize', validateTokenize)
  tokenize(@CurrentCaller() caller: Caller) {
    return this.gateway.forward(caller);
  }

  @ProxyRoute('detokenize', validateDetokenize)
  detokenize(@CurrentCaller() caller: Caller) {
    return this.gateway.forward(caller);
  }

  @ProxyRoute('apply-template', validateApplyTemplate)
  applyTemplate(@CurrentCaller() caller: Caller) {
    return this.gateway.forward(caller);
  }

  @ProxyRoute('props')
  props(@CurrentCaller() caller: Caller) {
    return this.gateway.forward(caller);
  }
}
