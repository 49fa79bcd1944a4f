import { Inject, Injectable, type OnModuleDestroy } from '@nestjs/common';
import { RawResponse, StreamedResponse, isOrchestratorError } from 'nest-prompt-orchestrator';
import type { Observable } from 'rxjs';
import type { GatewayConfig } from './config/gateway-config.js';
import { GATEWAY_CONFIG } from './gateway.tokens.js';
import { clientKey } from './http/gateway.guard.js';
import { createProvider } from './providers/provider.factory.js';
import type { ClientApi, Provider } from './providers/provider.js';
import type { Caller } from './routes/gateway-route.decorator.js';
import { sseEvent, translateSse } from './translate/sse.js';
import { UpstreamStreamError, checkStreamEnd } from './upstream/stream-end.js';
import { UpstreamClient } from './upstream/upstream-client.js';

type Json = Record<string, unknown>;

const SSE = { contentType: 'text/event-stream; charset=utf-8' };

/**
 * Sends a routed request to the configured provider and answers with what it
 * sent back. Where the client's API is the provider's, bytes pass through
 * unchanged both ways; where they differ, the provider's route plan carries
 * the translation. The upstream address comes from configuration only: no
 * request can change it.
 */
@Injectable()
export class GatewayService implements OnModuleDestroy {
  readonly upstream: UpstreamClient;
  readonly provider: Provider;

  constructor(@Inject(GATEWAY_CONFIG) config: GatewayConfig) {
    this.upstream = new UpstreamClient(config.timeoutMs);
    this.provider = createProvider(config);
  }

  async forward(caller: Caller): Promise<RawResponse | StreamedResponse> {
    const { context } = caller;
    const plan = this.provider.plan(context.route!);
    const translation = plan.translation;
    const body = caller.body;
    const call = {
      method: plan.method,
      url: plan.url,
      // Unchanged bytes where nothing is translated: no second serialisation, the provider reads what the client sent.
      body: body === undefined ? undefined : translation?.request ? translation.request(body) : (caller.rawBody ?? body),
      headers: { 'x-request-id': context.id, ...this.provider.authHeaders({ clientKey: clientKey(caller.headers), headers: caller.headers }) },
      signal: caller.signal,
      api: plan.api,
    };
    context.upstreamStartedAt = performance.now();
    if (body?.stream === true) {
      const text = await this.upstream.stream(call);
      context.upstreamAnsweredAt = performance.now();
      // Translated streams are checked by their translator; a passed-through one is read for its end marker here.
      const chunks: Observable<string> = translation?.stream ? translateSse(text, translation.stream(body)) : checkStreamEnd(text, plan.api);
      return new StreamedResponse(chunks, SSE, streamErrorEvent(context.api));
    }
    const bytes = await this.upstream.bytes(call);
    context.upstreamAnsweredAt = performance.now();
    if (!translation) return new RawResponse(bytes);
    const translated = translation.response(JSON.parse(bytes.toString('utf8')) as Json);
    return new RawResponse(Buffer.from(JSON.stringify(translated)));
  }

  /** The breaker's recovery probe: the provider's own health route (llama.cpp) or its model list. */
  healthProbe(signal: AbortSignal): Promise<boolean> {
    return this.upstream.probe(this.provider.healthUrl(), this.provider.authHeaders({ headers: {} }), signal);
  }

  onModuleDestroy(): Promise<void> {
    return this.upstream.close();
  }
}

/**
 * The last event of a stream that broke after it started, in the client's own
 * stream format, so the SDK raises an error instead of seeing a clean end. The
 * leading blank line closes any event the provider left half-written.
 */
export function streamErrorEvent(api: ClientApi): (error: unknown) => string {
  return (error) => {
    // The provider's own error event already reached the client with the stream.
    if (error instanceof UpstreamStreamError && error.delivered) return '';
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
