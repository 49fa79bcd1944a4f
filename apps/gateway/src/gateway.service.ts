import { Inject, Injectable, type OnModuleDestroy } from '@nestjs/common';
import { StreamedResponse, isOrchestratorError } from 'nest-prompt-orchestrator';
import type { Observable } from 'rxjs';
import type { GatewayConfig } from './config/gateway-config.js';
import { GATEWAY_CONFIG } from './gateway.tokens.js';
import type { RequestContext } from './http/request-context.js';
import { sseEvent, translateSse, type SseTranslator } from './translate/sse.js';
import {
  anthropicRequestToOpenAI,
  anthropicResponseToOpenAI,
  anthropicStreamToOpenAI,
  openAIRequestToAnthropic,
  openAIResponseToAnthropic,
  openAIStreamToAnthropic,
} from './translate/anthropic-openai.js';
import { UpstreamClient } from './upstream/upstream-client.js';
import { NotSupportedException } from './http/not-supported.exception.js';

type Json = Record<string, unknown>;

/** Which API the client speaks on a route: decides error shapes and stream error events. */
export type ClientApi = 'openai' | 'anthropic' | 'llama';

/** What a route hands the service about its caller. */
export interface CallerInfo {
  context: RequestContext;
  /** The shared call's signal (aborted on timeout or cancellation). */
  signal?: AbortSignal;
  clientKey?: string;
  headers: Record<string, string | string[] | undefined>;
}

export type NativeRoute = '/completion' | '/tokenize' | '/detokenize' | '/apply-template' | '/props';

const SSE = { contentType: 'text/event-stream; charset=utf-8' };

/**
 * Speaks to the configured provider. Routes pass through where the client's
 * API is the provider's, and are translated where they differ (Anthropic
 * client in front of an OpenAI-compatible provider, and the reverse). The
 * upstream address comes from configuration only: no request can change it.
 */
@Injectable()
export class GatewayService implements OnModuleDestroy {
  readonly upstream: UpstreamClient;
  private readonly v1: string;

  constructor(@Inject(GATEWAY_CONFIG) private readonly config: GatewayConfig) {
    this.upstream = new UpstreamClient(config.timeoutMs);
    const base = config.upstream;
    // OPENAI_BASE_URL conventionally ends in /v1; llama-server and Anthropic are given their root.
    this.v1 = config.provider === 'openai' ? (base.endsWith('/v1') ? base : `${base}/v1`) : `${base}/v1`;
  }

  chat(body: Json, caller: CallerInfo): Promise<unknown> {
    if (this.config.provider === 'anthropic') {
      const includeUsage = (body.stream_options as Json | undefined)?.include_usage === true;
      return this.call('openai', `${this.v1}/messages`, openAIRequestToAnthropic(body), caller, {
        response: anthropicResponseToOpenAI,
        stream: () => anthropicStreamToOpenAI(includeUsage),
      });
    }
    return this.call('openai', `${this.v1}/chat/completions`, body, caller);
  }

  completions(body: Json, caller: CallerInfo): Promise<unknown> {
    this.requireOpenAICompatible('/v1/completions');
    return this.call('openai', `${this.v1}/completions`, body, caller);
  }

  embeddings(body: Json, caller: CallerInfo): Promise<unknown> {
    this.requireOpenAICompatible('/v1/embeddings');
    return this.call('openai', `${this.v1}/embeddings`, body, caller);
  }

  async models(caller: CallerInfo): Promise<unknown> {
    const list = (await this.call('openai', `${this.v1}/models`, undefined, caller)) as Json;
    if (this.config.provider !== 'anthropic') return list;
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

  messages(body: Json, caller: CallerInfo): Promise<unknown> {
    if (this.config.provider === 'openai') {
      return this.call('anthropic', `${this.v1}/chat/completions`, anthropicRequestToOpenAI(body), caller, {
        response: openAIResponseToAnthropic,
        stream: openAIStreamToAnthropic,
      });
    }
    // Anthropic itself, or llama-server's own Anthropic-compatible route.
    return this.call('anthropic', `${this.v1}/messages`, body, caller);
  }

  /** llama.cpp's native routes: only a llama.cpp server has them. */
  native(route: NativeRoute, body: Json | undefined, caller: CallerInfo): Promise<unknown> {
    if (this.config.provider !== 'llama') {
      throw new NotSupportedException(`${route} is a llama.cpp server route; start the gateway with --provider llama to use it.`);
    }
    return this.call('llama', `${this.config.upstream}${route}`, body, caller);
  }

  /** The breaker's recovery probe: the provider's own health route (llama.cpp) or its model list. */
  healthProbe(signal: AbortSignal): Promise<boolean> {
    const url = this.config.provider === 'llama' ? `${this.config.upstream}/health` : `${this.v1}/models`;
    return this.upstream.probe(url, this.authHeaders(undefined, {}), signal);
  }

  onModuleDestroy(): Promise<void> {
    return this.upstream.close();
  }

  private requireOpenAICompatible(route: string): void {
    if (this.config.provider === 'anthropic') {
      throw new NotSupportedException(`${route} has no Anthropic equivalent; use an OpenAI-compatible or llama provider.`);
    }
  }

  private async call(
    api: ClientApi,
    url: string,
    body: Json | undefined,
    caller: CallerInfo,
    translate?: { response: (json: Json) => Json; stream: () => SseTranslator },
  ): Promise<unknown> {
    const request = {
      method: body === undefined ? ('GET' as const) : ('POST' as const),
      url,
      body,
      headers: this.authHeaders(caller.clientKey, caller.headers, caller.context.id),
      signal: caller.signal,
    };
    caller.context.upstreamStartedAt = performance.now();
    if (body?.stream === true) {
      const text = await this.upstream.stream(request);
      caller.context.upstreamAnsweredAt = performance.now();
      const chunks: Observable<string> = translate ? translateSse(text, translate.stream()) : text;
      return new StreamedResponse(chunks, SSE, streamErrorEvent(api));
    }
    const json = (await this.upstream.json(request)) as Json;
    caller.context.upstreamAnsweredAt = performance.now();
    return translate ? translate.response(json) : json;
  }

  private authHeaders(
    clientKey: string | undefined,
    incoming: CallerInfo['headers'],
    requestId?: string,
  ): Record<string, string> {
    // With gateway keys, the client's key is the gateway's own and never goes upstream.
    const key = this.config.providerKey ?? (this.config.gatewayKeys.length > 0 ? undefined : clientKey);
    const headers: Record<string, string> = {};
    if (requestId) headers['x-request-id'] = requestId;
    if (this.config.provider === 'anthropic') {
      if (key) headers['x-api-key'] = key;
      const version = incoming['anthropic-version'];
      headers['anthropic-version'] = typeof version === 'string' ? version : '2023-06-01';
      const beta = incoming['anthropic-beta'];
      if (typeof beta === 'string') headers['anthropic-beta'] = beta;
    } else if (key) {
      headers.authorization = `Bearer ${key}`;
    }
    return headers;
  }
}

/**
 * The last event of a stream that broke after it started, in the client's own
 * stream format, so the SDK raises an error instead of seeing a clean end. The
 * leading blank line closes any event the provider left half-written.
 */
export function streamErrorEvent(api: ClientApi): (error: unknown) => string {
  return (error) => {
    const timeout = isOrchestratorError(error) && error.code === 'upstream_timeout';
    const message = timeout ? error.message : 'The provider interrupted the stream.';
    if (api === 'anthropic') {
      return '\n\n' + sseEvent({ type: 'error', error: { type: timeout ? 'timeout_error' : 'api_error', message } }, 'error');
    }
    if (api === 'llama') {
      return '\n\n' + sseEvent({ error: { code: timeout ? 504 : 502, message, type: 'server_error' } });
    }
    return '\n\n' + sseEvent({ error: { message, type: timeout ? 'timeout' : 'server_error', param: null, code: timeout ? 'upstream_timeout' : 'stream_interrupted' } });
  };
}
