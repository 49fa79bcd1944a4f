import type { GatewayConfig } from '../config/gateway-config.js';
import { AnthropicProvider } from './anthropic.provider.js';
import { LlamaProvider } from './llama.provider.js';
import { OpenAIProvider } from './openai.provider.js';
import type { Provider } from './provider.js';

/** The provider of the configured kind. */
export function createProvider(config: GatewayConfig): Provider {
  switch (config.provider) {
    case 'openai':
      return new OpenAIProvider(config);
    case 'llama':
      return new LlamaProvider(config);
    case 'anthropic':
      return new AnthropicProvider(config);
  }
}
