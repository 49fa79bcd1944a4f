import { Controller } from '@nestjs/common';
import { GatewayService } from '../gateway.service.js';
import { CurrentCaller, ProxyRoute, type Caller } from './gateway-route.decorator.js';

/** llama.cpp server's own routes, proxied as they are (native SSE: no [DONE]). */
@Controller()
export class LlamaController {
  constructor(private readonly gateway: GatewayService) {}

  @ProxyRoute('completion')
  completion(@CurrentCaller() caller: Caller) {
    return this.gateway.forward(caller);
  }

  @ProxyRoute('infill')
  infill(@CurrentCaller() caller: Caller) {
    return this.gateway.forward(caller);
  }

  @ProxyRoute('embedding')
  embedding(@CurrentCaller() caller: Caller) {
    return this.gateway.forward(caller);
  }

  @ProxyRoute('rerank')
  rerank(@CurrentCaller() caller: Caller) {
    return this.gateway.forward(caller);
  }

  @ProxyRoute('tokenize')
  tokenize(@CurrentCaller() caller: Caller) {
    return this.gateway.forward(caller);
  }

  @ProxyRoute('detokenize')
  detokenize(@CurrentCaller() caller: Caller) {
    return this.gateway.forward(caller);
  }

  @ProxyRoute('apply-template')
  applyTemplate(@CurrentCaller() caller: Caller) {
    return this.gateway.forward(caller);
  }

  @ProxyRoute('props')
  props(@CurrentCaller() caller: Caller) {
    return this.gateway.forward(caller);
  }

  @ProxyRoute('props-update')
  updateProps(@CurrentCaller() caller: Caller) {
    return this.gateway.forward(caller);
  }

  @ProxyRoute('slots')
  slots(@CurrentCaller() caller: Caller) {
    return this.gateway.forward(caller);
  }

  @ProxyRoute('slot-action')
  slotAction(@CurrentCaller() caller: Caller) {
    return this.gateway.forward(caller);
  }

  @ProxyRoute('metrics')
  metrics(@CurrentCaller() caller: Caller) {
    return this.gateway.forward(caller);
  }

  @ProxyRoute('lora-adapters')
  loraAdapters(@CurrentCaller() caller: Caller) {
    return this.gateway.forward(caller);
  }

  @ProxyRoute('lora-adapters-update')
  updateLoraAdapters(@CurrentCaller() caller: Caller) {
    return this.gateway.forward(caller);
  }

  @ProxyRoute('stream-replay')
  replayStream(@CurrentCaller() caller: Caller) {
    return this.gateway.forward(caller);
  }

  @ProxyRoute('stream-cancel')
  cancelStream(@CurrentCaller() caller: Caller) {
    return this.gateway.forward(caller);
  }

  @ProxyRoute('streams-lookup')
  lookupStreams(@CurrentCaller() caller: Caller) {
    return this.gateway.forward(caller);
  }

  @ProxyRoute('tools')
  tools(@CurrentCaller() caller: Caller) {
    return this.gateway.forward(caller);
  }

  @ProxyRoute('tools-call')
  callTool(@CurrentCaller() caller: Caller) {
    return this.gateway.forward(caller);
  }
}
