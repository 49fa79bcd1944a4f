import type { GatewayConfig } from '../config/gateway-config.js';
import { AnthropicProvider } from './anthropic.provider.js';
import { LlamaProvider } from './llama.provider.js';
import { OpenAIProvider } from './openai.provider.js';
import type { KeyedTarget, Provider } from './provider.js';

/** The provider of the configured kind; `firstUpstream` is the upstream set's first target (see `Provider`). */
export function createProvider(config: GatewayConfig, firstUpstream?: KeyedTarget): Provider {
  switch (config.provider) {
    case 'openai':
      return new OpenAIProvider(config, firstUpstream);
    case 'llama':
      return new LlamaProvider(config, firstUpstream);
    case 'anthropic':
      return new AnthropicProvider(config, firstUpstream);
  }
}
