import type { IncomingHttpHeaders } from 'node:http';
import { openAIBase } from '../apis/formats.js';
import type { GatewayConfig } from '../config/gateway-config.js';
import {
  anthropicRequestToOpenAI,
  openAIResponseToAnthropic,
  openAIStreamToAnthropic,
} from '../translate/anthropic-openai.js';
import { Provider, type KeyedTarget, type GatewayRoute, type UpstreamAuth, type UpstreamPlan } from './provider.js';

/**
 * Any OpenAI-compatible API (OpenAI itself, vLLM, ...). OpenAI routes pass
 * through (the Responses API included); an Anthropic client's `/v1/messages`
 * is translated to chat completions, tools included.
 */
export class OpenAIProvider extends Provider {
  readonly kind = 'openai' as const;
  protected readonly routes: Partial<Record<GatewayRoute, UpstreamPlan>>;
  private readonly v1: string;

  constructor(config: GatewayConfig, firstUpstream?: KeyedTarget) {
    super(config, firstUpstream);
    // OPENAI_BASE_URL conventionally ends in /v1.
    this.v1 = openAIBase(config.upstream);
    const v1 = this.v1;
    this.routes = {
      chat: { method: 'POST', url: `${v1}/chat/completions`, api: 'openai' },
      completions: { method: 'POST', url: `${v1}/completions`, api: 'openai' },
      embeddings: { method: 'POST', url: `${v1}/embeddings`, api: 'openai' },
      models: { method: 'GET', url: `${v1}/models`, api: 'openai' },
      responses: { method: 'POST', url: `${v1}/responses`, api: 'openai' },
      'responses-input-tokens': { method: 'POST', url: `${v1}/responses/input_tokens`, api: 'openai' },
      transcriptions: { method: 'POST', url: `${v1}/audio/transcriptions`, api: 'openai' },
      messages: {
        method: 'POST',
        url: `${v1}/chat/completions`,
        api: 'openai',
        translation: {
          request: anthropicRequestToOpenAI,
          response: openAIResponseToAnthropic,
          stream: openAIStreamToAnthropic,
        },
      },
    };
  }

  healthUrl(): string {
    return `${this.v1}/models`;
  }

  authHeaders(auth: UpstreamAuth): Record<string, string> {
    return this.bearer(auth);
  }

  /** The organisation and project a call is billed to (and whose settings apply): they travel, and are in the key. */
  override forwardedHeaders(headers: IncomingHttpHeaders): Record<string, string> {
    const forwarded: Record<string, string> = {};
    for (const name of ['openai-organization', 'openai-project'] as const) {
      const value = headers[name];
      if (typeof value === 'string') forwarded[name] = value;
    }
    return forwarded;
  }

  protected override unsupported(route: GatewayRoute): string {
    if (route === 'count-tokens') {
      return '/v1/messages/count_tokens has no equivalent on an OpenAI-compatible provider; the usage of a /v1/messages answer reports its input_tokens.';
    }
    return super.unsupported(route);
  }
}
