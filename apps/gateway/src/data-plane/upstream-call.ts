import type { RawResponse, RoutePolicy, Upstream } from 'nest-prompt-orchestrator/core';
import type { CallEvent, CallWork, StartedCall } from 'nest-prompt-orchestrator/low-level';
import { Observable } from 'rxjs';
import { parseJson, streamErrorEvent } from '../upstreams/upstream-replies.js';
import { requireObject } from '../http/request-validation.js';
import type { UpstreamTarget } from '../upstreams/upstream-set.js';
import type { UpstreamPlan } from '../providers/provider.js';
import type { Usage } from '../budgets/prices.js';
import { needsStreamUsage, withStreamUsage } from '../budgets/usage.js';
import { GatewayTracing, StreamFacts } from '../observability/gateway-tracing.js';
import type { JsonSkeleton } from './json-skeleton.js';
import { UpstreamExchange, type ExchangeHooks } from '../upstreams/upstream-exchange.js';
import { countUpstreamUsage } from './accounting.js';
import type { ProxiedCall } from './proxied-call.js';

const INCLUDE_USAGE = Buffer.from('"stream_options":{"include_usage":true},');

/**
 * The call stage: the request's flight started under its key (`startFlight`), and the upstream call it leads when
 * it leads one (`UpstreamCall`). Joined and cached requests never make an `UpstreamCall`'s call.
 */
export function startFlight(
  proxied: ProxiedCall,
  plan: UpstreamPlan,
  skeleton: JsonSkeleton | undefined,
  scope: string | undefined,
  policy: RoutePolicy,
): StartedCall<RawResponse> | Promise<StartedCall<RawResponse>> {
  const { config } = proxied.plane.parts;
  const { calls } = proxied.plane;
  const context = proxied.context;
  const storable = config.windowForSampled || !isSampled(context.body);
  const call = {
    key: context.dedupKey,
    tenant: proxied.tenant,
    reuse: scope === undefined ? undefined : calls.reuseOf(proxied.request.headers['cache-control'], storable),
    trace: context.span,
    // What a request that reuses the answer reads instead of its own body (never the whole body of --log-prompts).
    // `settled` is there from the start: added once the call is priced, it would give every tag a second object.
    tag: (context.tag = config.observability.logPrompts
      ? undefined
      : { body: context.body as Record<string, unknown>, settled: undefined }),
  };
  const work = (proxied.upstream = new UpstreamCall(proxied)).work(plan, skeleton);
  // The fallback chain of the model the body names (a request answered above shares its flight whatever the chain).
  const chained = proxied.plane.attempts.policyFor(
    proxied.route,
    (context.body as { model?: unknown } | undefined)?.model,
    policy,
  );
  return calls.startLocal<RawResponse>(chained, call, work) ?? calls.start<RawResponse>(chained, call, work);
}

/**
 * The upstream call a request leads, as undici's dispatch handler sees it (`UpstreamExchange` is the handler; this
 * is its `ExchangeHooks`): how the call is made (pass-through or translated), and what its answer tells the gateway.
 */
export class UpstreamCall implements ExchangeHooks {
  /** The latest call this request made to the provider itself, which counts it as a reader from the start. */
  leading?: UpstreamExchange;
  /** With a recorded span, what the attempt's event stream says of its answer (see `ExchangeHooks.streamReader`). */
  private streamFacts?: StreamFacts;
  streamReader?: (bytes: Buffer) => void;

  constructor(private readonly proxied: ProxiedCall) {}

  /** The request's bytes, until the stream's head lets them go (see `Delivery.headArrived`). */
  private get body(): Buffer | undefined {
    return this.proxied.body;
  }

  /** The upstream call this request leads (only the leader's runs: joined and cached requests never call it). */
  work(plan: UpstreamPlan, skeleton: JsonSkeleton | undefined): CallWork<RawResponse> {
    if (plan.translation)
      return (signal, upstream) => this.proxied.plane.attempts.label(this.translated(signal, upstream), upstream);
    // One upstream: the work takes no parameter (so no AbortController is made for it: unsubscribing stops it).
    if (!this.proxied.plane.pooled) return () => this.passThrough(plan, skeleton, undefined);
    return (_signal, upstream) =>
      this.proxied.plane.attempts.label(this.passThrough(plan, skeleton, upstream), upstream);
  }

  /** The client's bytes to the provider (the pool's `upstream` of this attempt), its bytes back as call events. */
  private passThrough(
    plan: UpstreamPlan,
    skeleton: JsonSkeleton | undefined,
    upstream: Upstream | undefined,
  ): Observable<CallEvent<RawResponse>> {
    return new Observable<CallEvent<RawResponse>>((subscriber) => {
      const { plane, context, info, request, presented, params, query } = this.proxied;
      const { budgets, gateway } = plane.parts;
      const upload = info.body === 'multipart';
      // A translated route: the request translated for the provider (a translation reads the body, so it needs one:
      // what it cannot translate is a 400 naming the field); the exchange translates the answer back.
      const translation = plan.translation;
      const clientBody =
        translation && this.body !== undefined && this.body.length > 0
          ? (JSON.parse(this.body.toString('utf8')) as unknown)
          : undefined;
      const added = !translation && this.addsStreamUsage(skeleton);
      const sent = !translation
        ? plane.attempts.bodyFor(context, upstream, this.body, skeleton)
        : translation.request
          ? Buffer.from(JSON.stringify(translation.request(requireObject(clientBody))))
          : clientBody === undefined
            ? undefined
            : this.body;
      const body = added ? withIncludeUsage(sent!, skeleton!) : sent;
      const provider = gateway.provider;
      const headers: Record<string, string> = { 'x-request-id': context.id };
      if (body !== undefined) headers['content-type'] = upload ? request.headers['content-type']! : 'application/json';
      // After the credentials: the client's own answer-changing headers (an API version) override a default.
      Object.assign(
        headers,
        provider.authHeaders({
          clientKey: presented,
          headers: request.headers,
          upstream: upstream?.target as UpstreamTarget | undefined,
        }),
        provider.forwardedHeaders(request.headers),
      );
      // The provider sees this attempt's client span as its caller (W3C trace context).
      if (context.span?.recording && !translation) {
        context.span.injectUpstream(headers);
        const facts = (this.streamFacts = new StreamFacts());
        this.streamReader = (bytes) => facts.read(bytes);
      } else if (translation) context.span?.injectUpstream(headers);
      const exchange = new UpstreamExchange(
        subscriber,
        {
          api: plan.api,
          anyAnswer: info.answer === 'any',
          streamEnd: info.streamEnd ?? plan.api,
          readUsage: true,
          stripUsage: added,
          presentedKey: presented,
          formatError: streamErrorEvent(context.api),
          translation,
          clientBody: clientBody as Record<string, unknown> | undefined,
        },
        this,
      );
      // An earlier attempt's call is over (it failed, or it is let go): this request reads only the latest.
      this.leading?.removeReader();
      this.leading = exchange;
      const { origin, path } = plane.target(plan, params, query, upstream);
      const dispatch = () => {
        context.upstreamStartedAt = performance.now();
        if (upstream !== undefined) context.upstream = upstream.name;
        gateway.upstream.dispatcher.dispatch(
          { origin, path, method: plan.method, headers, body: plan.method === 'GET' ? undefined : body },
          exchange,
        );
      };
      // Only the call that reaches the provider holds money against a cap.
      if (context.caps) {
        budgets
          .reserve(context, context.body, this.body?.length)
          .then(dispatch, (error: unknown) => subscriber.error(error));
      } else dispatch();
      return () => {
        exchange.cancel();
        // No answer the client could use: the hold is let go (an answer that did end has already settled it).
        budgets.release(context);
      };
    });
  }

  /** See `ExchangeHooks`: this request's own call to the provider. */
  onUpstreamAnswered(): void {
    this.proxied.context.upstreamAnsweredAt = performance.now();
  }

  onUpstreamUsage(found: Usage | undefined): Promise<void> | undefined {
    return countUpstreamUsage(this.proxied.plane, this.proxied.context, found, this.streamFacts);
  }

  onUpstreamBody(bytes: Buffer): void {
    if (this.proxied.route === 'props') this.proxied.plane.parts.gateway.identity.observe(parseJson(bytes));
    // Read only for a span that is recorded: tracing off, the answer is never parsed here.
    else if (this.proxied.context.span?.recording)
      this.proxied.context.span.setUpstreamAttributes(GatewayTracing.responseAttributes(parseJson(bytes)));
  }

  onUpstreamConnectionLost(): void {
    // A lost connection may be a restart: the model behind the URL may have changed.
    const { gateway } = this.proxied.plane.parts;
    void gateway.identity.check(
      gateway.provider.authHeaders({ clientKey: this.proxied.presented, headers: this.proxied.request.headers }),
    );
  }

  /** A route whose client API is not the provider's: the same upstream call, its request and answer translated. */
  private translated(_signal: AbortSignal, upstream: Upstream | undefined): Observable<CallEvent<RawResponse>> {
    if (upstream !== undefined) this.proxied.context.upstream = upstream.name;
    return this.passThrough(this.proxied.plane.parts.gateway.provider.plan(this.proxied.route), undefined, upstream);
  }

  /**
   * An OpenAI stream reports its usage (what spend and token limits count) only when asked: the gateway asks, and
   * hides the answer from a client that did not. Not llama-server: asked, it moves its `timings` into that usage
   * chunk (hiding it would lose them), and its final chunk counts tokens anyway.
   */
  private addsStreamUsage(skeleton: JsonSkeleton | undefined): boolean {
    const { gateway, budgets } = this.proxied.plane.parts;
    if (!skeleton || gateway.provider.kind !== 'openai' || !budgets.streamUsage) return false;
    if (this.proxied.route !== 'chat' && this.proxied.route !== 'completions') return false;
    return needsStreamUsage({ stream: skeleton.field('stream'), stream_options: skeleton.field('stream_options') });
  }
}

/**
 * The client's bytes with `stream_options.include_usage` set, spliced in rather than re-serialised: after the
 * opening brace when the body has no `stream_options`; a body that has one (without `include_usage`) is rewritten.
 */
function withIncludeUsage(body: Buffer, skeleton: JsonSkeleton): Buffer {
  if (!skeleton.has('stream_options')) {
    const open = body.indexOf(0x7b);
    return Buffer.concat([body.subarray(0, open + 1), INCLUDE_USAGE, body.subarray(open + 1)]);
  }
  return Buffer.from(JSON.stringify(withStreamUsage(JSON.parse(body.toString('utf8')))));
}

/**
 * Whether a generation request asks for an answer that is meant to vary:
 * sampled (a temperature above 0, which is every provider's default when none
 * is given) without a seed, or several choices at once.
 */
export function isSampled(body: unknown): boolean {
  if (typeof body !== 'object' || body === null) return false;
  const { temperature, seed, n } = body as { temperature?: unknown; seed?: unknown; n?: unknown };
  if (typeof n === 'number' && n > 1) return true;
  if (seed !== undefined && seed !== null) return false;
  return temperature === undefined || temperature === null || (typeof temperature === 'number' && temperature > 0);
}
