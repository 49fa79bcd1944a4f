import type { ExecutionContext } from '@nestjs/common';
import { randomUUID } from 'node:crypto';
import type { DedupRequest } from '../../core/dedup/dedup.options.js';

/** The execution contexts the interceptor serves besides HTTP. */
export type OtherContextKind = 'rpc' | 'ws' | 'graphql';

const OTHER_KINDS: ReadonlySet<string> = new Set<OtherContextKind>(['rpc', 'ws', 'graphql']);

export function isOtherContextKind(kind: string): kind is OtherContextKind {
  return OTHER_KINDS.has(kind);
}

/**
 * One message, event or resolver call, as dedup sees it: `method` says whether
 * finished answers are replayed without being asked (`GET`: GraphQL queries)
 * or only shared while in flight unless the handler asks for the window with
 * `windowMs` (`POST`: mutations, microservice messages, WebSocket messages).
 * `request` is what `dedup.key` and `dedup.store` receive.
 */
export interface ContextCall {
  readonly method: 'GET' | 'POST';
  readonly request: DedupRequest;
  /** GraphQL subscriptions are passed through: their answer is a stream of events, not one value to share. */
  readonly passThrough?: boolean;
}

interface GraphQLInfo {
  fieldName?: string;
  parentType?: { name?: string };
  operation?: { operation?: string };
}

/** The HTTP request behind a GraphQL operation (Apollo's and Mercurius' contexts keep it as `req` or `request`). */
export function graphqlRequestOf(
  context: ExecutionContext,
): (DedupRequest['request'] & { headers?: DedupRequest['headers'] }) | undefined {
  const gqlContext = context.getArgByIndex<{ req?: unknown; request?: unknown } | undefined>(2);
  const request = gqlContext?.req ?? gqlContext?.request;
  return typeof request === 'object' && request !== null && 'headers' in request
    ? (request as { headers: DedupRequest['headers'] })
    : undefined;
}

const ROOT_TYPES = new Set(['Query', 'Mutation', 'Subscription']);
const NO_HEADERS: DedupRequest['headers'] = Object.freeze({});

/**
 * The operation and payload of a call in a non-HTTP context (see `ContextCall`):
 * - rpc: the message pattern and its data;
 * - ws: the event and the message's data;
 * - graphql: `Type.field`, the field's arguments, and the parent object for a field of a non-root type.
 */
export function describeContextCall(kind: OtherContextKind, context: ExecutionContext, name: string): ContextCall {
  if (kind === 'rpc') {
    const rpc = context.switchToRpc();
    const pattern = patternOf(context.getHandler(), 'microservices:pattern') ?? patternOfContext(rpc.getContext());
    return {
      method: 'POST',
      request: {
        method: 'RPC',
        url: `${name} ${pattern ?? ''}`,
        headers: NO_HEADERS,
        body: rpc.getData(),
        request: rpc.getContext<object>(),
      },
    };
  }
  if (kind === 'ws') {
    const ws = context.switchToWs();
    const pattern = ws.getPattern?.() ?? patternOf(context.getHandler(), 'message');
    return {
      method: 'POST',
      request: {
        method: 'WS',
        url: `${name} ${String(pattern ?? '')}`,
        headers: NO_HEADERS,
        body: ws.getData(),
        request: ws.getClient<object>(),
      },
    };
  }
  const [root, args, , info] = context.getArgs<[unknown, unknown, unknown, GraphQLInfo | undefined]>();
  const type = info?.parentType?.name ?? '';
  const operation = info?.operation?.operation;
  const http = graphqlRequestOf(context);
  return {
    method: operation === 'query' ? 'GET' : 'POST',
    passThrough: operation === 'subscription',
    request: {
      method: operation === 'mutation' ? 'MUTATION' : 'QUERY',
      url: `${name} ${type}.${info?.fieldName ?? ''}`,
      headers: http?.headers ?? NO_HEADERS,
      // A field of an object type answers for its parent: two parents are two questions.
      body: ROOT_TYPES.has(type) ? args : { parent: root, args },
      request: http,
    },
  };
}

function patternOf(handler: object, key: string): string | undefined {
  const pattern: unknown = Reflect.getMetadata(key, handler);
  if (pattern === undefined) return undefined;
  return typeof pattern === 'string' ? pattern : JSON.stringify(pattern);
}

function patternOfContext(context: unknown): string | undefined {
  const candidate = context as
    { getPattern?: () => unknown; getChannel?: () => unknown; getSubject?: () => unknown } | undefined;
  const pattern = candidate?.getPattern?.() ?? candidate?.getChannel?.() ?? candidate?.getSubject?.();
  return pattern === undefined ? undefined : String(pattern);
}

// WebSocket clients of the `ws` platform carry no id: each gets one of its own, for as long as it lives.
const clientIds = new WeakMap<object, string>();

/** A WebSocket client's identity: socket.io's socket id, else an id given to that connection. */
export function wsClientIdentity(client: unknown): string | undefined {
  if (typeof client !== 'object' || client === null) return undefined;
  const id = (client as { id?: unknown }).id;
  if (typeof id === 'string' && id !== '') return `ws:${id}`;
  let given = clientIds.get(client);
  if (!given) clientIds.set(client, (given = `ws:${randomUUID()}`));
  return given;
}
