import type { IncomingHttpHeaders } from 'node:http';
import type { GatewayConfig } from '../config/gateway-config.js';
import { UpstreamHttpError, UpstreamStreamError } from '../apis/errors.js';
import {
  Provider,
  type KeyedTarget,
  ROUTES,
  type GatewayRoute,
  type UpstreamAuth,
  type UpstreamPlan,
} from './provider.js';

type Json = Record<string, unknown>;

/**
 * A llama.cpp server. Every route passes through to the server's own route of
 * the same path, so the server applies the model's own chat template (the
 * gateway never makes one up), and its Anthropic-compatible `/v1/messages`, its
 * Responses API and its native routes answer exactly as the server does.
 */
export class LlamaProvider extends Provider {
  readonly kind = 'llama' as const;
  protected readonly routes: Partial<Record<GatewayRoute, UpstreamPlan>>;

  constructor(config: GatewayConfig, firstUpstream?: KeyedTarget) {
    super(config, firstUpstream);
    const base = config.upstream;
    // The server has every route at the gateway's own path, in the same API.
    this.routes = Object.fromEntries(
      (Object.entries(ROUTES) as Array<[GatewayRoute, (typeof ROUTES)[GatewayRoute]]>).map(
        ([route, { path, method, api }]) => [route, { method, url: `${base}${path}`, api }],
      ),
    );
  }

  healthUrl(): string {
    return `${this.config.upstream}/health`;
  }

  /**
   * The server's own key (upstreams file), else the provider key when the gateway has one; none when the gateway
   * checks keys of its own; otherwise the client's `Authorization` and `X-Api-Key` exactly as sent, so the server
   * judges them as it would directly (it accepts `Authorization: k1` without a scheme, refuses `bearer k1`, and
   * reads X-Api-Key only without Authorization).
   */
  authHeaders(auth: UpstreamAuth): Record<string, string> {
    if (this.gatewayChoosesKey(auth)) return this.bearer(auth);
    const headers: Record<string, string> = {};
    const authorization = auth.headers.authorization;
    const apiKey = auth.headers['x-api-key'];
    if (typeof authorization === 'string') headers.authorization = authorization;
    if (typeof apiKey === 'string') headers['x-api-key'] = apiKey;
    return headers;
  }

  /**
   * `X-Conversation-Id` turns on the server's resumable streams (the answer is kept under that id, and generation
   * goes on after a disconnect): forwarded when the client sends it, never added. It is part of the dedup key.
   */
  override forwardedHeaders(headers: IncomingHttpHeaders): Record<string, string> {
    const id = headers['x-conversation-id'];
    return typeof id === 'string' ? { 'x-conversation-id': id } : {};
  }

  override identityUrl(): string {
    return `${this.config.upstream}/props`;
  }

  /**
   * The model file and context size change the answers; `media_marker` is random per server process, so a new
   * value says the server restarted.
   */
  override identityOf(props: Json): { identity: string; instance?: string } | undefined {
    const settings = props.default_generation_settings as Json | undefined;
    if (typeof props.model_path !== 'string' && typeof props.model_alias !== 'string') return undefined;
    const identity = JSON.stringify([
      props.model_path,
      props.model_alias,
      settings?.n_ctx,
      props.build_info,
      props.chat_template,
    ]);
    return { identity, instance: typeof props.media_marker === 'string' ? props.media_marker : undefined };
  }

  /**
   * llama-server answers some of a request's own mistakes with a 500 (invalid JSON, a missing role, an unknown
   * token id, an image without a projector), and `GET /slots?fail_on_no_slot=1` with a 503 when every slot is
   * busy: those are answers from a live server about one request, not the server failing.
   */
  override isFailure(error: unknown): boolean {
    return !isRequestAnswer(error) && super.isFailure(error);
  }

  override shouldRetry(error: unknown): boolean {
    return !isRequestAnswer(error) && super.shouldRetry(error);
  }
}

/**
 * A llama.cpp error about the request itself: a handler's 500, the 503 of a slot check, or an error event a
 * stream carried about its request (e.g. a second prompt that overflows the context).
 */
function isRequestAnswer(error: unknown): boolean {
  if (error instanceof UpstreamStreamError) {
    const event = (error.event as { error?: Json } | undefined)?.error;
    if (!error.delivered || typeof event !== 'object' || event === null || typeof event.code !== 'number') return false;
    return event.code < 500 || (event.code === 500 && event.type === 'server_error');
  }
  if (!(error instanceof UpstreamHttpError) || (error.status !== 500 && error.status !== 503)) return false;
  const body = (error.json as { error?: Json } | undefined)?.error;
  if (typeof body !== 'object' || body === null || body.code !== error.status || typeof body.message !== 'string')
    return false;
  if (error.status === 500) return body.type === 'server_error';
  return body.type === 'unavailable_error' && body.message === 'no slot available';
}
