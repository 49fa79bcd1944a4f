import { RawResponse, type Orchestrator, type RoutePolicy, type Upstream } from 'nest-prompt-orchestrator/core';
import { lowLevelCalls, type CallEvent } from 'nest-prompt-orchestrator/low-level';
import { map, type Observable } from 'rxjs';
import type { GatewayConfig } from '../config/gateway-config.js';
import type { JsonSkeleton } from '../data-plane/json-skeleton.js';
import type { RequestContext } from '../observability/request-context.js';
import type { GatewayRoute } from '../providers/provider.js';
import { UPSTREAM_POOL, attemptsNeedUpstream } from './upstream-set.js';
import type { FallbackStep, UpstreamsFile } from '../config/upstreams-file.js';

/**
 * The routes a fallback chain serves: OpenAI-compatible model calls whose body names its model at the top level, so
 * that another deployment (or another model) can be asked the same question. Never the translated routes, metadata
 * or uploads.
 */
export const FALLBACK_ROUTES: ReadonlySet<GatewayRoute> = new Set<GatewayRoute>([
  'chat',
  'completions',
  'embeddings',
  'responses',
]);

/** The response header naming the upstream (pool member) whose answer this is. */
export const SERVED_BY_HEADER = 'x-orchestrator-upstream';

/** Any model the upstreams file does not list by name. */
const ANY_MODEL = '*';

/**
 * What each attempt of a proxied call needs from the upstreams file, kept out
 * of the data plane: the policy of a request (its route's, with the fallback
 * chain of its model when it has one), the body an attempt sends (the
 * client's bytes, with `model` spliced in when a fallback group is asked for
 * another model), and the answer labelled with the upstream that served it.
 *
 * The chain is chosen by the model the client asked for, and the dedup key is
 * the client's request: identical requests share one flight whichever
 * upstream, in whichever group, ends up answering it.
 */
export class UpstreamAttempts {
  private chains: ReadonlyMap<string, FallbackStep[]>;
  private readonly policies = new Map<string, RoutePolicy>();
  /** Answers name their upstream when there is more than one to tell apart (or the operator named it). */
  private labelled: boolean;

  constructor(
    config: Pick<GatewayConfig, 'upstreams' | 'upstreamsFile'>,
    private readonly orchestrator: Orchestrator,
  ) {
    this.chains = config.upstreamsFile?.fallbacks ?? new Map();
    this.labelled = attemptsNeedUpstream(config);
  }

  /**
   * The upstreams file was reloaded: its chains from now on. The policies made for the old chains are dropped (a
   * group may be another pool now); calls that hold one finish on it.
   */
  update(file: UpstreamsFile): void {
    this.chains = file.fallbacks;
    this.labelled = attemptsNeedUpstream({ upstreams: [], upstreamsFile: file });
    this.policies.clear();
  }

  /** The chain of a requested model: its own, else `*`'s; undefined when it has none (or names no model). */
  chainOf(model: unknown): FallbackStep[] | undefined {
    if (typeof model !== 'string') return undefined;
    return this.chains.get(model) ?? this.chains.get(ANY_MODEL);
  }

  /**
   * The policy of a request: its route's (`base`), or, on a route fallback chains serve, the same with the groups
   * of its model's chain tried after the primary pool. One policy per route and chain, made on first use.
   */
  policyFor(route: GatewayRoute, model: unknown, base: RoutePolicy): RoutePolicy {
    if (this.chains.size === 0 || !FALLBACK_ROUTES.has(route) || typeof model !== 'string') return base;
    const name = this.chains.has(model) ? model : ANY_MODEL;
    const chain = this.chains.get(name);
    if (!chain) return base;
    const id = `${route}\n${name}`;
    let policy = this.policies.get(id);
    if (!policy) {
      const pools = this.orchestrator.upstreams;
      const pool = (group: string) => {
        const found = pools.get(group);
        if (!found) throw new Error(`fallback group "${group}" is not a pool of the orchestrator`);
        return found;
      };
      policy = lowLevelCalls(this.orchestrator).withFallbacks(
        base,
        pool(UPSTREAM_POOL),
        chain.map((step) => pool(step.group)),
      );
      this.policies.set(id, policy);
    }
    return policy;
  }

  /**
   * The body an attempt sends: the client's bytes, unless the attempt goes to a fallback group that is asked for
   * another model; then the same bytes with the top-level `model` value replaced (spliced at the span the
   * request's skeleton found, never re-serialised). The model the attempt asked for is noted on the context, so
   * that its usage is priced (and logged) as the model that answered.
   */
  bodyFor(
    context: RequestContext,
    upstream: Upstream | undefined,
    body: Buffer | undefined,
    skeleton: JsonSkeleton | undefined,
  ): Buffer | undefined {
    context.servedModel = undefined;
    if (upstream === undefined || upstream.pool === UPSTREAM_POOL || body === undefined || skeleton === undefined)
      return body;
    const requested = (context.body as { model?: unknown } | undefined)?.model;
    const model = this.chainOf(requested)?.find((step) => step.group === upstream.pool)?.model;
    if (model === undefined || model === requested) return body;
    context.servedModel = model;
    return withModel(body, skeleton, model);
  }

  /**
   * An attempt's events with `x-orchestrator-upstream` naming the upstream that answered: part of the shared
   * answer, so a joined or replayed copy says it too. Nothing to name with one unnamed upstream.
   */
  label(
    events: Observable<CallEvent<RawResponse>>,
    upstream: Upstream | undefined,
  ): Observable<CallEvent<RawResponse>> {
    if (!this.labelled || upstream === undefined) return events;
    const name = upstream.name;
    return events.pipe(
      map((event): CallEvent<RawResponse> => {
        if (event.kind === 'value') {
          const { body, contentType, headers, status } = event.value;
          return {
            kind: 'value',
            value: new RawResponse(body, contentType, { ...headers, [SERVED_BY_HEADER]: name }, status),
          };
        }
        if (event.kind === 'head')
          return { ...event, head: { ...event.head, headers: { ...event.head.headers, [SERVED_BY_HEADER]: name } } };
        return event;
      }),
    );
  }
}

/** The body with its top-level `model` value replaced by `model` (a JSON string), the rest of its bytes as they were. */
export function withModel(body: Buffer, skeleton: JsonSkeleton, model: string): Buffer {
  const span = skeleton.bytes === body ? skeleton.fields.get('model') : undefined;
  // A chain is chosen by a string `model`, so its span is there; anything else is sent as the client sent it.
  if (span === undefined) return body;
  return Buffer.concat([body.subarray(0, span.start), Buffer.from(JSON.stringify(model)), body.subarray(span.end)]);
}
