import type { IncomingHttpHeaders } from 'node:http';
import type { GatewayConfig } from '../config/gateway-config.js';
import {
  anthropicResponseToOpenAI,
  anthropicStreamToOpenAI,
  openAIRequestToAnthropic,
} from '../translate/anthropic-openai.js';
import { chatResponseToResponses, chatStreamToResponses, responsesRequestToChat } from '../translate/responses-chat.js';
import { pipeTranslators } from '../translate/sse.js';
import {
  Provider,
  type KeyedTarget,
  ROUTES,
  type GatewayRoute,
  type UpstreamAuth,
  type UpstreamPlan,
} from './provider.js';

type Json = Record<string, unknown>;

/** What the Anthropic API is called with when the client does not say. */
const ANTHROPIC_VERSION = '2023-06-01';

/**
 * Anthropic's API. `/v1/messages` passes through; an OpenAI client's chat
 * completions (and Responses API requests, through chat completions) are
 * translated to messages, and its model list reshaped.
 */
export class AnthropicProvider extends Provider {
  readonly kind = 'anthropic' as const;
  protected readonly routes: Partial<Record<GatewayRoute, UpstreamPlan>>;
  private readonly v1: string;

  constructor(config: GatewayConfig, firstUpstream?: KeyedTarget) {
    super(config, firstUpstream);
    this.v1 = `${config.upstream}/v1`;
    this.routes = {
      chat: {
        method: 'POST',
        url: `${this.v1}/messages`,
        api: 'anthropic',
        translation: {
          request: openAIRequestToAnthropic,
          response: anthropicResponseToOpenAI,
          stream: (body) => anthropicStreamToOpenAI((body.stream_options as Json | undefined)?.include_usage === true),
        },
      },
      models: { method: 'GET', url: `${this.v1}/models`, api: 'anthropic', translation: { response: modelsToOpenAI } },
      messages: { method: 'POST', url: `${this.v1}/messages`, api: 'anthropic' },
      'count-tokens': { method: 'POST', url: `${this.v1}/messages/count_tokens`, api: 'anthropic' },
      // The Responses API through chat completions: two translations in a row.
      responses: {
        method: 'POST',
        url: `${this.v1}/messages`,
        api: 'anthropic',
        translation: {
          request: (body) => openAIRequestToAnthropic(responsesRequestToChat(body)),
          response: (json) => chatResponseToResponses(anthropicResponseToOpenAI(json)),
          stream: () => pipeTranslators(anthropicStreamToOpenAI(true), chatStreamToResponses()),
        },
      },
    };
  }

  healthUrl(): string {
    return `${this.v1}/models`;
  }

  authHeaders(auth: UpstreamAuth): Record<string, string> {
    const key = this.upstreamKey(auth);
    // The version is required on every call, the health probe's included.
    return { ...(key ? { 'x-api-key': key } : {}), 'anthropic-version': ANTHROPIC_VERSION };
  }

  /** The API version and beta features the client asked for change the answer: they travel, and are in the key. */
  override forwardedHeaders(headers: IncomingHttpHeaders): Record<string, string> {
    const forwarded: Record<string, string> = {};
    const version = headers['anthropic-version'];
    forwarded['anthropic-version'] = typeof version === 'string' ? version : ANTHROPIC_VERSION;
    const beta = headers['anthropic-beta'];
    if (typeof beta === 'string') forwarded['anthropic-beta'] = beta;
    return forwarded;
  }

  protected override unsupported(route: GatewayRoute): string {
    if (route === 'completions' || route === 'embeddings') {
      return `${ROUTES[route].path} has no Anthropic equivalent; use an OpenAI-compatible or llama provider.`;
    }
    if (route === 'responses-input-tokens') {
      return `${ROUTES[route].path} is not available with the anthropic provider: use /v1/messages/count_tokens.`;
    }
    return super.unsupported(route);
  }
}

/** Anthropic's model list in OpenAI's shape. */
function modelsToOpenAI(list: Json): Json {
  return {
    object: 'list',
    data: ((list.data as Json[] | undefined) ?? []).map((m) => ({
      id: m.id,
      object: 'model',
      created: typeof m.created_at === 'string' ? Math.floor(Date.parse(m.created_at) / 1000) : 0,
      owned_by: 'anthropic',
    })),
  };
}
