import type { IncomingMessage, ServerResponse } from 'node:http';
import { ShuttingDownError, type RawResponse } from 'nest-prompt-orchestrator/core';
import type { VirtualKey } from '../budgets/virtual-keys.js';
import { clientKey } from '../common/credentials.js';
import { GatewayTracing } from '../observability/gateway-tracing.js';
import {
  newContext,
  pathOfUrl,
  requestIdOf,
  type CallTag,
  type RequestContext,
} from '../observability/request-context.js';
import { ROUTES, type GatewayRoute, type RouteInfo } from '../providers/provider.js';
import { accountClosed, type ReusedChunks } from './accounting.js';
import { admit, identify } from './admission.js';
import type { DataPlane } from './data-plane.js';
import { Delivery } from './delivery.js';
import { answeredLocally, dedupScope, keyRequest, localRequest, noteRepeated } from './keying.js';
import { EMPTY_BODY, checkContent, joinBody, readBody, readChunk, scanBody, summarised } from './request-body.js';
import { startFlight, type UpstreamCall } from './upstream-call.js';

/**
 * One proxied request, from its first byte to its log line: the context its stages share, and the order they run in
 * (`serve`). Each stage is a plain function over this context (request-body, admission, keying, accounting), or an
 * object made once for the request (its `Delivery`; its `UpstreamCall` when it leads the call), so a request makes
 * no closures of its own beyond its three listeners.
 */
export class ProxiedCall {
  readonly context: RequestContext;
  readonly info: RouteInfo;
  readonly presented: string | undefined;
  /** Where the answer goes: a whole answer through the plane's reply batch, or a stream. */
  readonly delivery: Delivery;

  // Reading the body (request-body.ts).
  /** The request's bytes: its first chunk (most bodies come in one), or all of them once joined (`joinBody`). */
  body?: Buffer;
  /** Every chunk, when more than one came, until they are joined. */
  parts?: Buffer[];
  size = 0;

  // Admission (admission.ts).
  /** The virtual key presented, when keys are on. */
  key?: VirtualKey;
  /** The caller's tenant (a hash of its identity). */
  tenant?: string;

  // Keying (keying.ts): the body's print and pieces, kept until the call says whether the body was repeated.
  print = '';
  pieces?: readonly Buffer[];

  // The call (upstream-call.ts).
  /** The call this request leads, once it leads one. */
  upstream?: UpstreamCall;
  /** In a flight (admitted, not yet answered): a client leaving now is counted as gone. */
  inCall = false;

  // Accounting (accounting.ts).
  /** Its place among the responses in flight (`Lifecycle.enter`). */
  inFlightSlot = -1;
  /** The answer was another's (joined, or from the window): what it used is counted as saved. */
  reused = false;
  /**
   * A joined or replayed stream keeps its first chunk and last few (references to the shared Buffers): when its
   * call was led elsewhere, its usage is read from them at the end (Anthropic's input at the start, every API's
   * output at the end).
   */
  reusedChunks?: ReusedChunks;

  // The request's and the response's listeners: `on`, not `once` (each fires once anyway, and `once` wraps every
  // listener in a closure of its own).
  readonly data = (chunk: Buffer): void => readChunk(this, chunk);
  readonly ended = (): void => {
    this.body ??= EMPTY_BODY;
    void this.serve();
  };
  readonly closed = (): void => accountClosed(this);

  constructor(
    readonly plane: DataPlane,
    readonly request: IncomingMessage,
    readonly response: ServerResponse,
    readonly route: GatewayRoute,
    readonly params: Record<string, string>,
    readonly query: string,
  ) {
    const { id, given } = requestIdOf(request.headers);
    this.info = ROUTES[route];
    this.context = newContext(id, given, this.info.api, route);
    this.presented = clientKey(request.headers);
    this.delivery = new Delivery(this);
  }

  start(): void {
    const { lifecycle, orchestrator, config } = this.plane.parts;
    const response = this.response;
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
    if (lifecycle.isDraining) return this.delivery.fail(new ShuttingDownError());
    readBody(this);
  }

  /** The request is in: who it is, whether it may pass, its key, and then its flight. */
  async serve(): Promise<void> {
    const { gateway } = this.plane.parts;
    const delivery = this.delivery;
    try {
      identify(this);
      const plan = gateway.provider.plan(this.route);
      const json = checkContent(this);
      let scope = dedupScope(this);
      // Known once the upstream's identity is: no turn of the event loop for it.
      if (typeof scope === 'object') scope = await scope;
      const hash = keyRequest(this, scope);
      const policy = this.plane.policyOf(this.route);
      const local = localRequest(this, scope, json, hash);
      const found = local && this.plane.calls.peekLocal<RawResponse>(policy, local);
      // Held from the look-up on: admission may wait, and the window may let the stream go meanwhile.
      if (found?.stored) delivery.hold(found.stored);
      const tag = found?.tag as CallTag | undefined;
      const skeleton = json && tag === undefined ? scanBody(this) : undefined;
      if (tag !== undefined) summarised(this, tag.body);
      const admitting = admit(this);
      if (admitting) await admitting;
      this.inCall = true;
      if (found) {
        answeredLocally(this);
        return delivery.deliver(this.plane.calls.answerLocal(policy, local, found));
      }
      joinBody(this);
      let started = startFlight(this, plan, skeleton, scope, policy);
      if (started instanceof Promise) started = await started;
      if (started.outcome === 'joined' || started.outcome === 'cached') noteRepeated(this, hash);
      this.pieces = undefined;
      delivery.deliver(started);
    } catch (error) {
      delivery.fail(error);
    }
  }
}
