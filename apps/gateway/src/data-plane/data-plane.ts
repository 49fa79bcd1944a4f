import type { IncomingMessage, ServerResponse } from 'node:http';
import { LRUCache } from 'lru-cache';
import {
  ShuttingDownError,
  type Orchestrator,
  type RawResponse,
  type RoutePolicy,
  type Upstream,
} from 'nest-prompt-orchestrator';
import {
  lowLevelCalls,
  type CallEvent,
  type CallWork,
  type LowLevelCalls,
  type StartedCall,
} from 'nest-prompt-orchestrator/low-level';
import { Observable, type Subscription } from 'rxjs';
import type { GatewayConfig } from '../config/gateway-config.js';
import type { GatewayService } from '../gateway.service.js';
import { parseJson, streamErrorEvent, upstreamUrl } from '../upstreams/upstream-replies.js';
import { attemptsNeedUpstream, urlOn, type UpstreamTarget } from '../upstreams/upstream-set.js';
import { UpstreamAttempts } from '../upstreams/upstream-attempts.js';
import { modelOf, type Budgets } from '../budgets/budgets.service.js';
import type { VirtualKey } from '../budgets/virtual-keys.js';
import type { UsageLedger } from '../observability/usage-ledger.js';
import { statusOf, type GatewayTelemetry } from '../observability/gateway-telemetry.js';
import { GatewayTracing, StreamFacts } from '../observability/gateway-tracing.js';
import { ApiError, invalidRequest, keyRequired } from '../common/api-error.js';
import { clientKey, identityOf, isOneOf, keyDigest } from '../common/credentials.js';
import { drainBound, drainRequest, errorReply } from '../http/error-reply.js';
import { requireObject } from '../http/request-validation.js';
import type { Lifecycle } from '../common/lifecycle.js';
import {
  newContext,
  pathOfUrl,
  requestIdOf,
  serverTiming,
  type CallTag,
  type RequestContext,
} from '../observability/request-context.js';
import {
  ROUTES,
  gatewayChecksKeys,
  type GatewayRoute,
  type RouteInfo,
  type UpstreamPlan,
} from '../providers/provider.js';
import { SHAPING } from '../providers/shaping.js';
import { EXPOSED_HEADERS } from '../http/cors.js';
import { JsonSyntaxError, JsonTooDeepError, scanJson, type JsonSkeleton } from './json-skeleton.js';
import { ProxyRoutes } from './proxy-routes.js';
import { mergeUsage, needsStreamUsage, usageOfJson, withStreamUsage } from '../budgets/usage.js';
import type { Usage } from '../budgets/prices.js';
import { SseScan } from '../upstreams/sse-scan.js';
import { UpstreamExchange } from '../upstreams/upstream-exchange.js';
import { Interned } from './interned.js';
import { ByteArena } from './byte-arena.js';
import { ReplyBatch, type PendingReply } from './reply-batch.js';

/** What the data plane is made of: the gateway's services, built once by Nest, called here directly. */
export interface DataPlaneParts {
  config: GatewayConfig;
  gateway: GatewayService;
  budgets: Budgets;
  usage: UsageLedger;
  telemetry: GatewayTelemetry;
  lifecycle: Lifecycle;
  orchestrator: Orchestrator;
  /** Where the gateway's own warnings go (a request that failed with a 5xx of the gateway's making). */
  warn: (line: string) => void;
}

/** An answer as the window holds it (a body, or a stream's head and chunks). */
type Stored = NonNullable<StartedCall<RawResponse>['stored']>;

// Deeper than any real request; a provider parsing it recursively could overflow its stack.
const MAX_DEPTH = 128;
const JSON_TYPE = /^application\/(.+\+)?json\b/i;
const MULTIPART_TYPE = /^multipart\/form-data\b/i;
/** A stream reader this far behind the stream (beyond what it was replayed on joining) is cut: memory stays bounded. */
const MAX_BEHIND_BYTES = 4 * 1024 * 1024;
/** A follower of another replica's stream cannot hold that stream back: it is cut later, but cut all the same. */
const MAX_BEHIND_UNHELD_BYTES = 32 * 1024 * 1024;
/** The last chunks of a reused stream kept to read its usage from: the usage event, the end marker, and a line split across them. */
const KEPT_LAST_CHUNKS = 3;
/** A chunk that leaves no more than this unused of the memory it is a view of is queued as it is (see `write`). */
const SPARSE_SLACK = 8 * 1024;
/** How long a cut reader may take to read its error event before its socket is closed. */
const CUT_GRACE_MS = 5_000;
/** The top-level fields any feature reads (model, sampling, output bound, streaming): the rest of a body is never parsed. */
const SUMMARY_FIELDS = [
  'model',
  'stream',
  'stream_options',
  'temperature',
  'seed',
  'n',
  'best_of',
  'max_tokens',
  'max_completion_tokens',
  'max_output_tokens',
  'n_predict',
] as const;
const INCLUDE_USAGE = Buffer.from('"stream_options":{"include_usage":true},');
const MODELS = new Interned(256);
/** Slabs beyond the window's bytes: streams let go while callers still write them, and each stream's last slab. */
const ARENA_SLACK_BYTES = 64 * 1024 * 1024;

/**
 * The gateway's proxied routes, served straight on Node's request and
 * response, ahead of Nest's router (which keeps the control routes: health,
 * metrics, the status page). One `ProxiedCall` per request carries it from
 * its bytes to its answer: admission, key, flight, delivery, accounting,
 * with nothing read back from response headers. It calls the framework-free
 * `Orchestrator` directly, as any app without Nest would.
 */
export class DataPlane {
  readonly routes = new ProxyRoutes();
  private readonly policies = new Map<GatewayRoute, RoutePolicy>();
  readonly keyDigests: Buffer[];
  readonly checksKeys: boolean;
  readonly corsOrigins?: ReadonlySet<string> | '*';
  readonly exposedHeaders = EXPOSED_HEADERS.join(',');
  readonly dedupOn: boolean;
  /** Several upstreams behind the proxied routes (or fallback chains): each attempt is told which one it goes to. */
  readonly pooled: boolean;
  /** The upstreams file's part in each attempt: fallback chains, the body a fallback is sent, the answer's upstream. */
  readonly attempts: UpstreamAttempts;
  // The same credential arrives again and again: its hash (the caller's tenant) is computed once.
  private readonly tenants = new LRUCache<string, string>({ max: 10_000 });
  private readonly plans = new WeakMap<UpstreamPlan, { origin: string; path: string }>();
  /** Where the window keeps the streams it stores (see `ByteArena`). */
  readonly arena: ByteArena;
  /** The orchestrator's call entry (calls started here, not through `run`), and its key and reuse helpers. */
  readonly calls: LowLevelCalls;
  /** Large bodies sent again and again (a long conversation retried, a shared document): their keys without hashing them again. */
  readonly bodies: ReturnType<LowLevelCalls['repeatedBodies']>;
  /** Whole answers (not streams) are written together at the end of each turn of the event loop (see `ReplyBatch`). */
  readonly replies = new ReplyBatch();

  constructor(readonly parts: DataPlaneParts) {
    const { config } = parts;
    this.calls = lowLevelCalls(parts.orchestrator);
    this.bodies = this.calls.repeatedBodies();
    this.keyDigests = config.gatewayKeys.map(keyDigest);
    this.checksKeys = gatewayChecksKeys(config);
    this.dedupOn = config.dedup;
    // An upstreams file may be reloaded with other members: every attempt is told where it goes.
    this.pooled = config.upstreamsFile !== undefined || attemptsNeedUpstream(config);
    this.attempts = new UpstreamAttempts(config, parts.orchestrator);
    // Room for the window's bytes, and for streams let go while callers still write them.
    this.arena = new ByteArena(config.windowMaxBytes + ARENA_SLACK_BYTES);
    if (this.dedupOn) this.calls.keepWindowBytes(this.arena);
    if (config.corsOrigins) this.corsOrigins = config.corsOrigins === '*' ? '*' : new Set(config.corsOrigins);
  }

  /** A route's policy, resolved on its first request (the breaker and limiter exist once something used them). */
  policyOf(route: GatewayRoute): RoutePolicy {
    let policy = this.policies.get(route);
    if (!policy) {
      policy = this.parts.orchestrator.policy(SHAPING[ROUTES[route].kind], route);
      this.policies.set(route, policy);
    }
    return policy;
  }

  /** Serves the request if it is for a proxied route; false leaves it to Nest. */
  readonly handle = (request: IncomingMessage, response: ServerResponse): boolean => {
    const url = request.url ?? '/';
    const query = url.indexOf('?');
    // HEAD is a GET without its body, as the platforms serve it (Node's response leaves the body out itself).
    const method = request.method === 'HEAD' ? 'GET' : (request.method ?? 'GET');
    const match = this.routes.match(method, query < 0 ? url : url.slice(0, query));
    if (!match) return false;
    new ProxiedCall(this, request, response, match.route, match.params, query < 0 ? '' : url.slice(query)).start();
    return true;
  };

  /** The caller's tenant: a short one-way hash of its identity (cached per identity). */
  tenantOf(identity: string): string {
    let tenant = this.tenants.get(identity);
    if (tenant === undefined) {
      tenant = this.calls.hashIdentity(identity);
      this.tenants.set(identity, tenant);
    }
    return tenant;
  }

  /**
   * The provider's origin and path for a route (its `:param` segments filled in, escaped), plus the client's query,
   * on the pool's `upstream` of this attempt (absent: the one upstream).
   */
  target(
    plan: UpstreamPlan,
    params: Record<string, string>,
    query: string,
    upstream: Upstream | undefined,
  ): { origin: string; path: string } {
    if (upstream !== undefined) {
      const url = new URL(urlOn(upstreamUrl(plan, params, query), this.parts.config, upstream));
      return { origin: url.origin, path: url.pathname + url.search };
    }
    let parsed = this.plans.get(plan);
    if (!parsed) {
      const url = new URL(plan.url);
      parsed = { origin: url.origin, path: url.pathname };
      this.plans.set(plan, parsed);
    }
    if (query === '' && !parsed.path.includes('/:')) return parsed;
    const path = parsed.path.includes('/:')
      ? parsed.path.replace(/:([A-Za-z_]+)/g, (match, name: string) =>
          params[name] === undefined ? match : encodeURIComponent(params[name]),
        )
      : parsed.path;
    return { origin: parsed.origin, path: path + query };
  }

  allowsOrigin(origin: string): boolean {
    return this.corsOrigins === '*' || (this.corsOrigins !== undefined && this.corsOrigins.has(origin));
  }
}

/** One proxied request, from its first byte to its log line. */
class ProxiedCall implements PendingReply {
  private readonly context: RequestContext;
  private readonly info: RouteInfo;
  private readonly presented: string | undefined;
  /** The request's bytes: its first chunk (most bodies come in one), or all of them once joined (`joinBody`). */
  private body?: Buffer;
  /** Every chunk, when more than one came, until they are joined. */
  private parts?: Buffer[];
  private size = 0;
  private subscription?: Subscription;
  private head?: Extract<CallEvent<RawResponse>, { kind: 'head' }>;
  /** The stream's source in this process, when it can be held back. */
  private flow?: UpstreamExchange;
  /** The latest call this request made to the provider itself, which counts it as a reader from the start. */
  private leading?: UpstreamExchange;
  private streaming = false;
  private slow = false;
  private stall?: ReturnType<typeof setTimeout>;
  private received = 0;
  private replayed = 0;
  private inCall = false;
  /**
   * A joined or replayed stream keeps its first chunk and last few (references to the shared Buffers): when its
   * call was led elsewhere, its usage is read from them at the end (Anthropic's input at the start, every API's
   * output at the end).
   */
  private reusedChunks?: { first?: Buffer; last: Buffer[] };
  /** The answer was another's (joined, or from the window): what it used is counted as saved. */
  private reused = false;
  /** How old a `cached` answer is (its `Age` header). */
  private ageSeconds?: number;
  /** Its place among the responses in flight (`Lifecycle.enter`). */
  private inFlightSlot = -1;
  /** With a recorded span, what the attempt's event stream says of its answer (see `ExchangeHooks.streamReader`). */
  private streamFacts?: StreamFacts;
  streamReader?: (bytes: Buffer) => void;
  /** Lets go of the stored stream this request replays (see `ByteArena.hold`), once its response has closed. */
  private bytesHeld?: () => void;
  /** A whole answer waiting in the plane's `ReplyBatch` to be written (`respond`, then `writeReply`). */
  private replyBody?: Buffer;
  private replyStatus = 0;
  private replyType = '';
  private replyHeaders?: Record<string, string>;

  constructor(
    private readonly plane: DataPlane,
    private readonly request: IncomingMessage,
    private readonly response: ServerResponse,
    private readonly route: GatewayRoute,
    private readonly params: Record<string, string>,
    private readonly query: string,
  ) {
    const { id, given } = requestIdOf(request.headers);
    this.info = ROUTES[route];
    this.context = newContext(id, given, this.info.api, route);
    this.presented = clientKey(request.headers);
  }

  start(): void {
    const { lifecycle, orchestrator, config } = this.plane.parts;
    const response = this.response;
    // `on`, not `once`: each fires once anyway, and `once` wraps every listener in a closure of its own.
    response.on('close', this.closed);
    this.inFlightSlot = lifecycle.enter(response);
    const tracing = orchestrator.tracing;
    if (tracing) {
      // Named by the route, never by a path a client made up; ended with the response (GatewayTelemetry.finished).
      const { method, path } = this.info;
      this.context.span = tracing.startServerSpan(`${method} ${path}`, this.request.headers, {
        ...GatewayTracing.requestAttributes(config, this.route, method, pathOfUrl(this.request.url)),
        'http.route': path,
        'gateway.request_id': this.context.id,
      });
    }
    // A request that arrives on an open connection while the gateway drains: retryable, elsewhere.
    if (lifecycle.isDraining) return this.fail(new ShuttingDownError());
    const headers = this.request.headers;
    const length = headers['content-length'];
    const max = this.plane.parts.config.maxBodyBytes;
    if (length !== undefined && Number(length) > max) return this.fail(tooLarge(max));
    if ((length === undefined || length === '0') && headers['transfer-encoding'] === undefined) {
      this.request.resume();
      return void this.serve();
    }
    this.request.on('data', this.data);
    this.request.on('end', this.ended);
    // A client that resets mid-upload: 'close' on the response follows and accounts for it.
    this.request.on('error', noop);
  }

  private readonly data = (chunk: Buffer): void => {
    this.size += chunk.length;
    const max = this.plane.parts.config.maxBodyBytes;
    if (this.size > max) {
      this.request.removeListener('data', this.data);
      this.request.removeListener('end', this.ended);
      this.body = this.parts = undefined;
      return this.fail(tooLarge(max));
    }
    if (this.body === undefined) this.body = chunk;
    else (this.parts ??= [this.body]).push(chunk);
  };

  private readonly ended = (): void => {
    this.body ??= EMPTY_BODY;
    void this.serve();
  };

  /** The request's bytes in one Buffer, joined when first needed: a request answered from memory never needs them. */
  private joinBody(): Buffer | undefined {
    if (this.parts) this.body = Buffer.concat(this.parts, this.size);
    this.parts = undefined;
    return this.body;
  }

  /** The request is in: who it is, whether it may pass, its key, and then its flight. */
  private async serve(): Promise<void> {
    const { parts } = this.plane;
    const { config, budgets, gateway } = parts;
    const context = this.context;
    const headers = this.request.headers;
    try {
      // A virtual key names its holder: that name is the caller's one identity (dedup, fair queue, limits, spend).
      const key: VirtualKey | undefined = budgets.keys?.find(this.presented);
      if (
        (this.plane.keyDigests.length > 0 || budgets.keysOn) &&
        !key &&
        !isOneOf(this.plane.keyDigests, this.presented)
      ) {
        throw keyRequired();
      }
      const identity = key ? `key=${key.name}` : identityOf(headers, config.provider, this.plane.checksKeys);
      context.identity = identity;
      const tenant = identity === undefined ? undefined : this.plane.tenantOf(identity);
      // One hash: the request log, the request line, metrics and rate limits all name the caller by its first 12 characters.
      if (tenant !== undefined) context.tenantHash = tenant.slice(0, 12);
      const plan = gateway.provider.plan(this.route);
      const json = this.checkContent();
      const generation = this.info.kind === 'generation' && this.info.body !== 'multipart';
      let scope = this.plane.dedupOn && generation ? gateway.dedupScope(headers) : undefined;
      // Known once the upstream's identity is: no turn of the event loop for it.
      if (typeof scope === 'object') scope = await scope;
      const { bodies, calls } = this.plane;
      const head = calls.keyHead({
        method: this.info.method,
        url: this.request.url ?? '',
        credential: identity,
        scope,
      });
      const pieces = this.parts ?? [this.body ?? EMPTY_BODY];
      const print = bodies.printOf(head, pieces, this.size);
      const hash = bodies.keyOf(head, print, pieces, this.size);
      context.requestHash = hash;
      if (scope !== undefined) context.dedupKey = hash;
      const policy = this.plane.policyOf(this.route);
      // A request this process can answer alone (a call in flight under its key, the window) is not sent: its body
      // need not be read. Its bytes are the leader's, so they were valid JSON, and the leader's summary of them
      // (the call's tag) stands for them.
      const local =
        scope !== undefined && json && !config.observability.logPrompts
          ? { key: hash, tenant, reuse: calls.reuseOf(headers['cache-control'], true), trace: context.span }
          : undefined;
      const found = local && calls.peekLocal<RawResponse>(policy, local);
      // Held from the look-up on: admission may wait, and the window may let the stream go meanwhile.
      if (found?.stored) this.holdStored(found.stored);
      const tag = found?.tag as CallTag | undefined;
      const skeleton = json && tag === undefined ? this.scanBody() : undefined;
      if (tag !== undefined) this.summarised(tag.body);
      if (budgets.needsAdmission(key)) await budgets.admit(context, key);
      this.inCall = true;
      if (found) {
        bodies.repeated(print, pieces, this.size, hash);
        // Not sent anywhere: its bytes are let go while it waits for its answer (a herd waits with all of them).
        this.body = this.parts = undefined;
        return this.deliver(calls.answerLocal(policy, local, found));
      }
      this.joinBody();
      const storable = config.windowForSampled || !isSampled(context.body);
      const call = {
        key: context.dedupKey,
        tenant,
        reuse: scope === undefined ? undefined : calls.reuseOf(headers['cache-control'], storable),
        trace: context.span,
        // What a request that reuses the answer reads instead of its own body (never the whole body of --log-prompts).
        // `settled` is there from the start: added once the call is priced, it would give every tag a second object.
        tag: (context.tag = config.observability.logPrompts
          ? undefined
          : { body: context.body as Record<string, unknown>, settled: undefined }),
      };
      const work = this.work(plan, skeleton);
      // The fallback chain of the model the body names (a request answered above shares its flight whatever the chain).
      const chained = this.plane.attempts.policyFor(
        this.route,
        (context.body as { model?: unknown } | undefined)?.model,
        policy,
      );
      const started =
        calls.startLocal<RawResponse>(chained, call, work) ?? (await calls.start<RawResponse>(chained, call, work));
      if (started.outcome === 'joined' || started.outcome === 'cached') bodies.repeated(print, pieces, this.size, hash);
      this.deliver(started);
    } catch (error) {
      this.fail(error);
    }
  }

  /**
   * The body's headers as the route takes them: a JSON object (or value), an upload, or nothing. Whether there is a
   * JSON body to read (see `scanBody`).
   */
  private checkContent(): boolean {
    const info = this.info;
    if (info.method !== 'POST') return false;
    const headers = this.request.headers;
    const upload = info.body === 'multipart';
    const type = headers['content-type'];
    const present = this.size > 0;
    const matches = type !== undefined && (upload ? MULTIPART_TYPE : JSON_TYPE).test(type);
    // Said to be JSON but empty: not JSON (as the platforms' own parsers say when they see it).
    if (matches && !upload && !present)
      throw new ApiError(400, 'The request body is empty: it is not valid JSON.', 'invalid_json');
    if (!present) return false;
    if (!matches) {
      const expected = upload ? 'multipart/form-data' : 'application/json';
      throw new ApiError(
        415,
        `Content-Type must be ${expected}, got ${type ? `"${type.slice(0, 100)}"` : 'none'}.`,
        'unsupported_media_type',
      );
    }
    const encoding = headers['content-encoding'];
    if (encoding !== undefined && encoding.toLowerCase() !== 'identity') {
      throw new ApiError(415, 'The request body encoding is not supported.', 'unsupported_encoding');
    }
    return !upload;
  }

  /**
   * The JSON body's structure, checked without parsing it (see `scanJson`). Sets the context's body to the few
   * fields features read (the whole body only with --log-prompts).
   */
  private scanBody(): JsonSkeleton {
    const info = this.info;
    let skeleton: JsonSkeleton;
    try {
      skeleton = scanJson(this.joinBody()!, MAX_DEPTH);
    } catch (error) {
      if (error instanceof JsonTooDeepError) throw new ApiError(400, error.message, 'nested_too_deep');
      if (error instanceof JsonSyntaxError)
        throw new ApiError(400, 'The request body is not valid JSON.', 'invalid_json');
      throw error;
    }
    if (info.body !== 'json') {
      if (skeleton.type !== 'object') {
        const got = skeleton.type === 'array' ? 'an array' : skeleton.type;
        throw invalidRequest(null, `The request body must be a JSON object, got ${got}.`);
      }
      const stream = skeleton.typeOf('stream');
      if (stream !== undefined && stream !== 'boolean' && stream !== 'null')
        throw invalidRequest('stream', 'stream must be true or false.');
    }
    const summary: Record<string, unknown> = {};
    if (skeleton.type === 'object')
      for (const name of SUMMARY_FIELDS) if (skeleton.has(name)) summary[name] = skeleton.field(name);
    // Kept with the answer (its tag) for as long as the window keeps it: one copy of each model name.
    if (typeof summary.model === 'string') summary.model = MODELS.of(summary.model);
    this.summarised(
      this.plane.parts.config.observability.logPrompts ? JSON.parse(this.body!.toString('utf8')) : summary,
    );
    return skeleton;
  }

  /** The request's body as features read it (its summary, or the whole body with --log-prompts). */
  private summarised(body: unknown): void {
    this.context.body = body;
    const model = (body as { model?: unknown } | undefined)?.model;
    if (this.context.span && typeof model === 'string')
      this.context.span.setAttributes({ 'gen_ai.request.model': model.slice(0, 200) });
  }

  /** The upstream call this request leads (only the leader's runs: joined and cached requests never call it). */
  private work(plan: UpstreamPlan, skeleton: JsonSkeleton | undefined): CallWork<RawResponse> {
    if (plan.translation)
      return (signal, upstream) => this.plane.attempts.label(this.translated(signal, upstream), upstream);
    // One upstream: the work takes no parameter (so no AbortController is made for it: unsubscribing stops it).
    if (!this.plane.pooled) return () => this.passThrough(plan, skeleton, undefined);
    return (_signal, upstream) => this.plane.attempts.label(this.passThrough(plan, skeleton, upstream), upstream);
  }

  /** The client's bytes to the provider (the pool's `upstream` of this attempt), its bytes back as call events. */
  private passThrough(
    plan: UpstreamPlan,
    skeleton: JsonSkeleton | undefined,
    upstream: Upstream | undefined,
  ): Observable<CallEvent<RawResponse>> {
    return new Observable<CallEvent<RawResponse>>((subscriber) => {
      const { parts } = this.plane;
      const { budgets, gateway } = parts;
      const context = this.context;
      const upload = this.info.body === 'multipart';
      // A translated route: the request translated for the provider (a translation reads the body, so it needs one:
      // what it cannot translate is a 400 naming the field); the exchange translates the answer back.
      const translation = plan.translation;
      const clientBody =
        translation && this.body !== undefined && this.body.length > 0
          ? (JSON.parse(this.body.toString('utf8')) as unknown)
          : undefined;
      const added = !translation && this.addsStreamUsage(skeleton);
      const sent = !translation
        ? this.plane.attempts.bodyFor(context, upstream, this.body, skeleton)
        : translation.request
          ? Buffer.from(JSON.stringify(translation.request(requireObject(clientBody))))
          : clientBody === undefined
            ? undefined
            : this.body;
      const body = added ? withIncludeUsage(sent!, skeleton!) : sent;
      const provider = gateway.provider;
      const headers: Record<string, string> = { 'x-request-id': context.id };
      if (body !== undefined)
        headers['content-type'] = upload ? this.request.headers['content-type']! : 'application/json';
      // After the credentials: the client's own answer-changing headers (an API version) override a default.
      Object.assign(
        headers,
        provider.authHeaders({
          clientKey: this.presented,
          headers: this.request.headers,
          upstream: upstream?.target as UpstreamTarget | undefined,
        }),
        provider.forwardedHeaders(this.request.headers),
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
          anyAnswer: this.info.answer === 'any',
          streamEnd: this.info.streamEnd ?? plan.api,
          readUsage: true,
          stripUsage: added,
          presentedKey: this.presented,
          formatError: streamErrorEvent(context.api),
          translation,
          clientBody: clientBody as Record<string, unknown> | undefined,
        },
        this,
      );
      // An earlier attempt's call is over (it failed, or it is let go): this request reads only the latest.
      this.leading?.removeReader();
      this.leading = exchange;
      const { origin, path } = this.plane.target(plan, this.params, this.query, upstream);
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
    this.context.upstreamAnsweredAt = performance.now();
  }

  onUpstreamUsage(found: Usage | undefined): Promise<void> | undefined {
    const { usage, budgets } = this.plane.parts;
    const context = this.context;
    if (context.span?.recording) {
      if (found) GatewayTracing.recordUsage(context.span, found);
      if (this.streamFacts) context.span.setUpstreamAttributes(this.streamFacts.attributes());
    }
    usage.record(context, found);
    const counted = budgets.settle(context, context.body, found);
    return context.caps ? counted : undefined;
  }

  onUpstreamBody(bytes: Buffer): void {
    if (this.route === 'props') this.plane.parts.gateway.identity.observe(parseJson(bytes));
    // Read only for a span that is recorded: tracing off, the answer is never parsed here.
    else if (this.context.span?.recording)
      this.context.span.setUpstreamAttributes(GatewayTracing.responseAttributes(parseJson(bytes)));
  }

  onUpstreamConnectionLost(): void {
    // A lost connection may be a restart: the model behind the URL may have changed.
    const { gateway } = this.plane.parts;
    void gateway.identity.check(
      gateway.provider.authHeaders({ clientKey: this.presented, headers: this.request.headers }),
    );
  }

  /** A route whose client API is not the provider's: the same upstream call, its request and answer translated. */
  private translated(_signal: AbortSignal, upstream: Upstream | undefined): Observable<CallEvent<RawResponse>> {
    if (upstream !== undefined) this.context.upstream = upstream.name;
    return this.passThrough(this.plane.parts.gateway.provider.plan(this.route), undefined, upstream);
  }

  /**
   * An OpenAI stream reports its usage (what spend and token limits count) only when asked: the gateway asks, and
   * hides the answer from a client that did not. Not llama-server: asked, it moves its `timings` into that usage
   * chunk (hiding it would lose them), and its final chunk counts tokens anyway.
   */
  private addsStreamUsage(skeleton: JsonSkeleton | undefined): boolean {
    const { gateway, budgets } = this.plane.parts;
    if (!skeleton || gateway.provider.kind !== 'openai' || !budgets.streamUsage) return false;
    if (this.route !== 'chat' && this.route !== 'completions') return false;
    return needsStreamUsage({ stream: skeleton.field('stream'), stream_options: skeleton.field('stream_options') });
  }

  private deliver(started: StartedCall<RawResponse>): void {
    const context = this.context;
    context.outcome = started.outcome;
    this.ageSeconds = started.ageSeconds;
    const reused = started.outcome === 'joined' || started.outcome === 'cached';
    if (reused) context.tag = started.tag as CallTag | undefined;
    // What a reused answer's call used is read from the answer only when its tag does not say (a joiner's tag is
    // settled by its leader just before the answer reaches it: see `unknownUsage`).
    this.reused = reused && context.tag?.settled === undefined && this.plane.parts.usage.enabled;
    if (this.reused) this.reusedChunks = { last: [] };
    const stored = started.stored;
    if (stored !== undefined && stored.kind !== 'value') return this.replay(stored);
    // This call is the observer of its events (no closures made per request).
    this.subscription = started.events.subscribe(this);
    // Gone while the flight was being found: it is left at once (a flight nobody waits for is let go, not kept
    // waiting for a subscriber that never comes).
    if (this.response.destroyed) this.left();
  }

  /** An answer from the window, written as the window holds it (a body, or a stream's head and chunks). */
  private replay(stored: Exclude<Stored, { kind: 'value' }>): void {
    if (stored.kind === 'bytes') {
      this.inCall = false;
      if (this.unknownUsage) this.learnUsage(usageOfJson(stored.body));
      return this.respond(stored.status ?? 200, stored.contentType, stored.body, stored.headers);
    }
    this.holdStored(stored);
    this.head = { kind: 'head', head: stored.head };
    // The stream's chunks as they came, in one write to the socket.
    this.response.cork();
    for (const chunk of stored.chunks) this.write(chunk);
    this.response.uncork();
    this.complete();
  }

  private holdStored(stored: Stored): void {
    if (stored.kind === 'stream' && this.bytesHeld === undefined) this.bytesHeld = this.plane.arena.hold(stored.chunks);
  }

  /** An event of the call (this call subscribes as its own observer). */
  next(event: CallEvent<RawResponse>): void {
    if (event.kind === 'value') {
      const value = event.value;
      if (this.unknownUsage) this.learnUsage(usageOfJson(value.body));
      this.respond(value.status ?? 200, value.contentType, value.body, value.headers);
    } else if (event.kind === 'head') {
      this.head = event;
      // Past the head nothing is retried or sent elsewhere: a long stream need not keep the request's bytes.
      this.body = undefined;
      if (event.flow instanceof UpstreamExchange) this.flow = event.flow;
    } else this.write(event.chunk);
  }

  error(error: unknown): void {
    this.inCall = false;
    if (!this.response.headersSent) return this.fail(error);
    this.breakStream(error);
  }

  complete(): void {
    this.inCall = false;
    if (this.unknownUsage && this.streaming) this.learnUsage(this.streamedUsage());
    // A stream that ended before its first chunk: an empty stream.
    if (!this.streaming && this.head) this.startStream();
    if (this.streaming && !this.response.writableEnded) this.response.end();
  }

  /** A reused answer whose call's usage its tag does not give (yet): it is read from the answer itself. */
  private get unknownUsage(): boolean {
    return this.reused && this.context.tag?.settled === undefined;
  }

  /**
   * What a reused answer's call used, read from the answer (its call was led elsewhere: another replica or worker,
   * or a stored answer made by one), and kept in its tag for the next request that reuses it here.
   */
  private learnUsage(usage: Usage | undefined): void {
    const context = this.context;
    const tag = context.tag;
    if (usage === undefined) return;
    if (!tag) return void (context.reusedUsage = usage);
    tag.settled = this.plane.parts.budgets.priced(modelOf(tag.body), usage);
  }

  /** The usage a relayed stream reported, read from the chunks it kept (see `reusedChunks`). */
  private streamedUsage(): Usage | undefined {
    const format = this.info.streamEnd ?? this.context.api;
    const kept = this.reusedChunks;
    if (format === false || !kept?.first) return undefined;
    const start = new SseScan(format, true, false);
    start.feed(kept.first);
    const end = new SseScan(format, true, false);
    for (const chunk of kept.last) end.feed(chunk);
    return end.usage ? mergeUsage(start.usage, end.usage) : start.usage;
  }

  /** Headers every answer carries: its id, timing, dedup outcome and age, and CORS when it is on. */
  private headersOf(ageSeconds: number | undefined): Array<string> {
    const context = this.context;
    const headers = ['x-request-id', context.id, 'server-timing', serverTiming(context, performance.now())];
    if (context.outcome) headers.push('x-orchestrator-dedup', context.outcome);
    if (ageSeconds !== undefined) headers.push('age', String(ageSeconds));
    if (this.plane.corsOrigins) {
      const origin = this.request.headers.origin;
      if (typeof origin === 'string' && this.plane.allowsOrigin(origin))
        headers.push('access-control-allow-origin', origin);
      headers.push('vary', 'Origin', 'access-control-expose-headers', this.plane.exposedHeaders);
    }
    return headers;
  }

  /** A whole answer, written with the others of this turn of the event loop (see `ReplyBatch`). */
  private respond(status: number, contentType: string, body: Buffer, extra: Record<string, string> | undefined): void {
    const response = this.response;
    if (response.headersSent || response.destroyed || this.replyBody !== undefined) return;
    this.replyStatus = status;
    this.replyType = contentType;
    this.replyBody = body;
    this.replyHeaders = extra;
    this.plane.replies.add(this);
  }

  /** See `PendingReply`: the answer `respond` was given, unless the client has gone meanwhile. */
  writeReply(): void {
    const body = this.replyBody!;
    const extra = this.replyHeaders;
    this.replyBody = this.replyHeaders = undefined;
    const response = this.response;
    if (response.headersSent || response.destroyed) return;
    // Built now: Server-Timing's total includes the wait for the rest of the turn.
    const headers = this.headersOf(this.ageSeconds);
    headers.push('content-type', this.replyType, 'content-length', String(body.length));
    if (extra) for (const name in extra) headers.push(name, extra[name]);
    try {
      response.writeHead(this.replyStatus, headers);
    } catch (error) {
      // A header Node refuses (a provider's value with a control character): the client is told, the batch goes on.
      return this.fail(error);
    }
    response.end(body);
  }

  private startStream(): void {
    this.streaming = true;
    const head = this.head!.head;
    const headers = this.headersOf(this.ageSeconds);
    headers.push('content-type', head.contentType, 'cache-control', 'no-cache', 'x-accel-buffering', 'no');
    if (head.headers) for (const name in head.headers) headers.push(name, head.headers[name]);
    this.response.writeHead(200, headers);
    if (this.flow !== this.leading) this.flow?.addReader();
  }

  /**
   * One chunk to this caller, with the socket's backpressure: it tells the stream's source how far it got (the
   * upstream pauses while no caller keeps up); one that falls too far behind the others is cut.
   */
  private write(chunk: string | Buffer): void {
    const response = this.response;
    if (response.destroyed || response.writableEnded) return;
    if (!this.streaming) this.startStream();
    const flow = this.flow;
    // Joining late, a caller is first given what the stream already sent: shared bytes, not its own backlog.
    if (flow && this.received < flow.emitted - chunk.length) this.replayed += chunk.length;
    this.received += chunk.length;
    const kept = this.reusedChunks;
    if (kept) {
      const bytes = typeof chunk === 'string' ? Buffer.from(chunk) : chunk;
      if (!kept.first) kept.first = bytes;
      else if (kept.last.push(bytes) > KEPT_LAST_CHUNKS) kept.last.shift();
    }
    this.context.firstChunkAt ??= performance.now();
    // Behind a reader that is not keeping up, a chunk waits in its socket's buffer until the client reads it. A chunk
    // is a view of the socket read it came in (64 KiB, however few bytes of it the chunk is): waiting, it would hold
    // all of that read, so what a slow reader holds would depend on how the provider's bytes were cut, not on how far
    // behind it is. It waits as a copy of its own size instead.
    if (
      response.writableLength > 0 &&
      typeof chunk !== 'string' &&
      chunk.buffer.byteLength > 2 * chunk.length + SPARSE_SLACK
    )
      chunk = Buffer.from(chunk);
    const ok = response.write(chunk);
    flow?.progress(this.received - response.writableLength);
    if (!ok && !this.slow) {
      this.slow = true;
      // Closures made only for a reader that is slow: most never are.
      response.once('drain', () => this.drained());
      // A reader that takes nothing for as long as a provider may stay silent holds its stream (and its upstream
      // slot) for nobody: it is cut, and the stream flows on for the others.
      this.stall ??= setTimeout(() => this.stalled(), this.plane.parts.config.timeoutMs);
      this.stall.refresh();
    }
    const behind = response.writableLength - this.replayed;
    if (behind > (flow ? MAX_BEHIND_BYTES : MAX_BEHIND_UNHELD_BYTES)) this.cut();
  }

  private drained(): void {
    if (!this.slow) return;
    this.slow = false;
    clearTimeout(this.stall);
    this.flow?.progress(this.received);
  }

  private stalled(): void {
    if (this.slow && !this.response.writableFinished) this.response.destroy();
  }

  /** Too far behind while others read on: this caller leaves the stream with an error event, and its socket closes. */
  private cut(): void {
    this.subscription?.unsubscribe();
    this.inCall = false;
    this.breakStream(
      new ApiError(502, 'This client read the stream too slowly and was cut off from it.', 'reader_too_slow'),
    );
    setTimeout(() => this.response.destroy(), CUT_GRACE_MS).unref();
  }

  /** The stream broke after it started: its last event says so, if its format has a way to. */
  private breakStream(error: unknown): void {
    const response = this.response;
    if (response.writableEnded) return;
    const last = this.head?.formatError?.(error);
    // No way to say "error" inside this stream: cutting it is what the client can see.
    if (last === undefined) return void response.destroy();
    if (last) response.write(last);
    response.end();
  }

  /** The error as the client's API says it, unless the answer has started (then the connection is cut). */
  private fail(error: unknown): void {
    this.inCall = false;
    // An answer is already on its way (see `respond`).
    if (this.replyBody !== undefined) return;
    const response = this.response;
    if (response.headersSent) {
      if (!response.writableEnded) response.destroy();
      return;
    }
    if (response.destroyed) return;
    const { parts } = this.plane;
    const reply = errorReply(
      error,
      { api: this.context.api, requestId: this.context.id, presented: this.presented, context: this.context },
      { warn: parts.warn },
    );
    const send = () => {
      if (response.headersSent || response.destroyed) return;
      const headers = this.headersOf(undefined);
      for (const name in reply.headers) headers.push(name, reply.headers[name]);
      headers.push('content-length', String(reply.body.length));
      response.writeHead(reply.status, headers);
      response.end(reply.body);
    };
    // A client still sending a body that is too large would read a reset instead of this 413 (and its SDK would
    // retry): the rest of the body is read and dropped first, up to a bound.
    if (reply.status === 413 && !this.request.complete)
      drainRequest(this.request, drainBound(parts.config.maxBodyBytes)).then(send, send);
    else send();
  }

  /** The client hung up before its answer was written: it leaves the flight (which goes on for whoever else is in it). */
  private left(): void {
    this.subscription?.unsubscribe();
    if (this.inCall) this.plane.calls.noteClientGone();
    this.inCall = false;
  }

  /** The response is over (sent, or the client gone): one place for every account of it. */
  private readonly closed = (): void => {
    const response = this.response;
    const { lifecycle, telemetry, budgets } = this.plane.parts;
    lifecycle.leave(response, this.inFlightSlot);
    clearTimeout(this.stall);
    this.bytesHeld?.();
    if (!response.writableFinished) this.left();
    // The request that made the call counts as its reader from the start (see `UpstreamExchange.readers`).
    if (this.leading) this.leading.removeReader();
    if (this.streaming && this.flow !== this.leading) this.flow?.removeReader();
    this.leading = undefined;
    const status = statusOf(response);
    if (telemetry.enabled) telemetry.finished(this.context, this.info.method, this.route, status);
    budgets.finished(this.context, status);
  };
}

const EMPTY_BODY = Buffer.alloc(0);

function tooLarge(max: number): ApiError {
  return new ApiError(413, `The request body is larger than this gateway accepts (${max} bytes).`, 'request_too_large');
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

function noop(): void {}

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
