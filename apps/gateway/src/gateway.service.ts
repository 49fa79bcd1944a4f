import { Inject, Injectable, type OnModuleDestroy, type OnModuleInit } from '@nestjs/common';
import { RawResponse, StreamedResponse, isTransientFailure, type Upstream } from 'nest-prompt-orchestrator';
import type { IncomingHttpHeaders } from 'node:http';
import { Observable } from 'rxjs';
import type { GatewayConfig } from './config/gateway-config.js';
import { GATEWAY_CONFIG } from './common/gateway.tokens.js';
import { clientKey } from './common/credentials.js';
import { redactor } from './common/redaction.js';
import { requireObject } from './http/request-validation.js';
import { createProvider } from './providers/provider.factory.js';
import { ROUTES, type Provider, type Translation, type UpstreamPlan } from './providers/provider.js';
import { translateSse } from './translate/sse.js';
import { checkStreamEnd } from './upstreams/stream-end.js';
import {
  UpstreamClient,
  UpstreamHttpError,
  UpstreamProtocolError,
  looksLikeJson,
  startsWithErrorField,
} from './upstreams/upstream-client.js';
import { UpstreamIdentity } from './upstreams/upstream-identity.js';
import { urlFor, urlOn, type UpstreamTarget } from './upstreams/upstream-set.js';
import { Budgets } from './budgets/budgets.service.js';
import { tapUsage, usageOfJson } from './budgets/usage.js';
import { parseJson, streamErrorEvent, upstreamUrl } from './upstreams/upstream-replies.js';
import { UsageLedger } from './observability/usage-ledger.js';
import { GatewayTracing } from './observability/gateway-tracing.js';
import type { RequestContext } from './observability/request-context.js';

type Json = Record<string, unknown>;

/** Everything `forward` needs about the request it serves. */
export interface Caller {
  context: RequestContext;
  /** The call's own signal (aborted on timeout or cancellation). */
  signal?: AbortSignal;
  /** The upstream of the pool this attempt goes to (see `urlOn`). */
  upstream?: Upstream;
  headers: IncomingHttpHeaders;
  /** The parsed JSON body of a POST route (absent when the request had none). */
  body?: unknown;
  /** The body's bytes as the client sent them, relayed unchanged where nothing is translated. */
  rawBody?: Buffer;
  /** The route's path parameters (e.g. `id_slot`). */
  params: Record<string, string>;
  /** The query string as the client sent it, with its `?` (or empty). */
  query: string;
}

const SSE = { contentType: 'text/event-stream; charset=utf-8' };

/**
 * The provider behind the gateway: its plans, identity and health probe, and
 * the calls of routes whose client API is not the provider's (`forward`:
 * the route plan carries the translation; the data plane relays the others as
 * bytes). Whether an answer is a
 * stream is the provider's to say (its Content-Type), as for a direct client.
 * The upstream address comes from configuration only: no request can change it.
 */
@Injectable()
export class GatewayService implements OnModuleInit, OnModuleDestroy {
  readonly upstream: UpstreamClient;
  readonly provider: Provider;
  /** Who answers behind the upstream URL; part of every dedup key. */
  readonly identity: UpstreamIdentity;

  constructor(
    @Inject(GATEWAY_CONFIG) private readonly config: GatewayConfig,
    private readonly budgets: Budgets,
    private readonly usage: UsageLedger,
  ) {
    this.upstream = new UpstreamClient(config.timeoutMs);
    this.provider = createProvider(config);
    const identityUrl = this.provider.identityUrl();
    this.identity = new UpstreamIdentity(
      config.upstream,
      identityUrl === undefined
        ? undefined
        : {
            fetch: (headers, signal) => this.upstream.getJson(identityUrl, headers, signal),
            read: (answer) => this.provider.identityOf(answer),
          },
    );
  }

  onModuleInit(): void {
    // Learned in the background: start-up never waits on the provider.
    void this.identity.check(this.provider.authHeaders({ headers: {} }));
  }

  /** Calls a translated route: the request translated for the provider, its answer (or stream) back for the client. */
  async forward(caller: Caller): Promise<RawResponse | StreamedResponse> {
    const { context } = caller;
    const route = context.route!;
    const plan = this.provider.plan(route);
    const translation = plan.translation;
    if (!translation) throw new Error(`forward() translates; ${route} is relayed as bytes by the data plane`);
    const body = caller.body;
    // A translation reads the body, so it needs one: what it cannot translate is a 400 naming the field.
    const translated = translation.request ? translation.request(requireObject(body)) : undefined;
    const settle = (usage: Parameters<Budgets['settle']>[2]) => {
      if (usage && context.span) GatewayTracing.recordUsage(context.span, usage);
      this.usage.record(context, usage);
      return this.budgets.settle(context, body, usage);
    };
    // The attempt's upstream is sent its own key, if it has one.
    const auth = {
      clientKey: clientKey(caller.headers),
      headers: caller.headers,
      upstream: caller.upstream?.target as UpstreamTarget | undefined,
    };
    // An upload keeps its own Content-Type (the multipart boundary is in it).
    const uploadType = ROUTES[route].body === 'multipart' ? caller.headers['content-type'] : undefined;
    const call = {
      method: plan.method,
      url: urlOn(upstreamUrl(plan, caller.params, caller.query), this.config, caller.upstream),
      // Unchanged bytes where nothing is translated: no second serialisation, the provider reads what the client sent.
      body: translated ?? (body === undefined ? undefined : (caller.rawBody ?? (body as object))),
      headers: {
        'x-request-id': context.id,
        ...(uploadType ? { 'content-type': uploadType } : {}),
        ...this.provider.authHeaders(auth),
        // After the credentials: the client's own answer-changing headers (an API version) override a default.
        ...this.provider.forwardedHeaders(caller.headers),
      },
      signal: caller.signal,
      api: plan.api,
    };
    // The provider sees this attempt's client span as its caller (W3C trace context).
    context.span?.injectUpstream(call.headers);
    // Only the call that reaches the provider holds money against a cap: joined and cached requests never get here.
    await this.budgets.reserve(context, body, caller.rawBody?.length);
    try {
      return await this.call(caller, { ...plan, translation }, call, auth, settle);
    } catch (error) {
      // No answer the client could use: the hold is let go (an answer that did end has already settled it).
      this.budgets.release(context);
      throw error;
    }
  }

  private async call(
    caller: Caller,
    plan: UpstreamPlan & { translation: Translation },
    call: Parameters<UpstreamClient['open']>[0],
    auth: Parameters<Provider['authHeaders']>[0],
    settle: (usage: Parameters<Budgets['settle']>[2]) => Promise<void>,
  ): Promise<RawResponse | StreamedResponse> {
    const { context, body } = caller;
    const route = context.route!;
    const translation = plan.translation;
    context.upstreamStartedAt = performance.now();
    let answer;
    try {
      answer = await this.upstream.open(call);
    } catch (error) {
      // A lost connection may be a restart: the model behind the URL may have changed.
      if (isTransientFailure(error) && !(error as { status?: unknown }).status)
        void this.identity.check(this.provider.authHeaders(auth));
      throw error;
    }
    context.upstreamAnsweredAt = performance.now();

    if (answer.isEventStream) {
      const text = answer.text();
      if (!translation.stream) {
        // A passed-through stream is read for its end marker on the way (its bytes are not changed).
        const end = ROUTES[route].streamEnd ?? plan.api;
        const checked = end === false ? text : checkStreamEnd(text, end);
        const chunks = tapUsage(checked, false, (usage) => void settle(usage)).pipe(redactErrors(auth.clientKey));
        return new StreamedResponse(
          chunks,
          { contentType: answer.contentType ?? SSE.contentType },
          streamErrorEvent(context.api),
        );
      }
      // A translated stream is checked by its translator.
      const chunks: Observable<string> = translateSse(
        tapUsage(text, false, (usage) => void settle(usage)),
        translation.stream(body as Json),
      ).pipe(redactErrors(auth.clientKey));
      return new StreamedResponse(chunks, SSE, streamErrorEvent(context.api));
    }
    const bytes = await answer.bytes();
    const empty = bytes.length === 0 && answer.status === 204;
    if (!empty && ROUTES[route].answer !== 'any' && !looksLikeJson(bytes)) {
      throw new UpstreamProtocolError('The provider sent a body that is not JSON.');
    }
    // A 2xx whose body is an error object (llama-server sends some failures so) is relayed as the error it is, as
    // the provider sent it, and never kept as an answer.
    if (startsWithErrorField(bytes)) throw new UpstreamHttpError(answer.status, bytes, answer.contentType, plan.api);
    // Awaited (one Redis round trip, under a cap only): a client that has its answer finds its cost counted on every
    // replica, rather than still held.
    if (answer.status < 300) await settle(usageOfJson(bytes));
    else this.budgets.release(context);
    const json = parseJson(bytes);
    if (typeof json !== 'object' || json === null)
      throw new UpstreamProtocolError('The provider sent a body that is not a JSON object.');
    // The provider's own answer, before translation: its id, model and finish reasons on the call's client span.
    if (context.span?.recording) context.span.setUpstreamAttributes(GatewayTracing.responseAttributes(json));
    return new RawResponse(Buffer.from(JSON.stringify(translation.response(json as Json))));
  }

  /** The breaker's recovery probe: the provider's own health route (llama.cpp) or its model list. */
  async healthProbe(signal: AbortSignal, target?: UpstreamTarget): Promise<boolean> {
    const url = urlFor(this.provider.healthUrl(), this.config, target?.url);
    // With the upstream's own key: a probe sent another's would be refused, and would hand that key to this upstream.
    const up = await this.upstream.probe(url, this.provider.authHeaders({ headers: {}, upstream: target }), signal);
    // Back after an outage: it may have come back with another model.
    if (up) void this.identity.check(this.provider.authHeaders({ headers: {} }));
    return up;
  }

  /**
   * Dedup scope of a request: who answers behind the URL (checked again now and then), and the client headers that
   * change the answer. Without a promise unless a check of the upstream's identity is due.
   */
  dedupScope(headers: IncomingHttpHeaders): string | Promise<string> {
    const scoped = (identity: string) => {
      const forwarded = this.provider.forwardedHeaders(headers);
      return Object.keys(forwarded).length === 0 ? identity : `${identity}\n${JSON.stringify(forwarded)}`;
    };
    if (this.identity.isFresh) return scoped(this.identity.current);
    return this.identity.fresh(this.provider.authHeaders({ clientKey: clientKey(headers), headers })).then(scoped);
  }

  onModuleDestroy(): Promise<void> {
    return this.upstream.close();
  }
}

/**
 * A provider's event in a stream may quote a key, as its error bodies do, in any JSON escaping. Lines go on whole (a
 * key is never cut across two chunks, each searched on its own; a line longer than MAX_HELD_LINE goes on in pieces).
 * An error-shaped chunk is decoded and redacted; an ordinary one only when it may quote a provider's key, and then only
 * known keys go, so a stream's ordinary chunks pass untouched.
 */
function redactErrors(presented: string | undefined) {
  return (source: Observable<string>) =>
    new Observable<string>((subscriber) => {
      let held = '';
      const send = (text: string) => {
        if (text.length === 0) return;
        if (text.includes('"error"') || text.includes('event: error') || text.includes('event:error'))
          subscriber.next(redactor.json(text, [presented]));
        else if (redactor.mayQuote(text, presented)) subscriber.next(redactor.json(text, [presented], false));
        else subscriber.next(text);
      };
      const subscription = source.subscribe({
        next(chunk) {
          const text = held + chunk;
          const nl = text.lastIndexOf('\n');
          if (nl < 0 && text.length <= MAX_HELD_LINE) return void (held = text);
          const cut = nl < 0 ? text.length : nl + 1;
          held = text.slice(cut);
          send(text.slice(0, cut));
        },
        error(error: unknown) {
          send(held);
          subscriber.error(error);
        },
        complete() {
          send(held);
          subscriber.complete();
        },
      });
      return () => subscription.unsubscribe();
    });
}

/** A line held for its end longer than this goes on in pieces: what a stream holds stays bounded. */
const MAX_HELD_LINE = 256 * 1024;
