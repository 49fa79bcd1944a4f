import { describe, expect, it } from '@jest/globals';
import { CircuitOpenError, QueueTimeoutError, UpstreamTimeoutError } from 'nest-prompt-orchestrator/core';
import { ApiError } from '../common/api-error.js';
import { errorReply, type ErrorReply } from '../http/error-reply.js';
import { redactor } from '../common/redaction.js';
import type { ClientApi } from '../providers/provider.js';
import { MAX_ERROR_BODY, UpstreamHttpError, UpstreamProtocolError } from '../apis/errors.js';
import { GATEWAY_ERROR_CODEC } from './shared-state.js';

/**
 * A follower (another replica through Redis, another worker through the primary) answers its callers with the
 * leader's error: the reply rendered from the error as it crossed equals the one the leader's own callers got.
 */

const quiet = { warn: () => undefined };
const APIS: ClientApi[] = ['openai', 'anthropic', 'llama'];

/** The error as the follower decodes it, after the JSON round trip of Redis and IPC. */
const across = (error: unknown) =>
  GATEWAY_ERROR_CODEC.decode(JSON.parse(JSON.stringify(GATEWAY_ERROR_CODEC.encode(error))) as Record<string, unknown>);

const reply = (error: unknown, api: ClientApi): ErrorReply =>
  errorReply(error, { api, requestId: 'req-1', presented: 'sk-follower-key-0001' }, quiet);

const asSent = (r: ErrorReply) => ({ status: r.status, headers: r.headers, body: r.body.toString('utf8') });

function rateLimited(): ApiError {
  const error = new ApiError(
    429,
    'Too many requests for this key; try again in 3 s.',
    'rate_limited',
    null,
    'rate_limit_error',
  );
  error.retryAfter = '3';
  error.retryable = true;
  return error;
}

describe("the leader's error, as a follower on another replica or worker answers it", () => {
  it.each<[string, () => unknown]>([
    ['a timeout', () => new UpstreamTimeoutError('total', 1_000)],
    ['an open breaker (Retry-After)', () => new CircuitOpenError('upstream', 17)],
    ['a queue wait that ran out (Retry-After)', () => new QueueTimeoutError('upstream', 1_000, 3)],
    ["the gateway's own refusal with Retry-After and x-should-retry: true", rateLimited],
    [
      'a 2xx that was not what the route expects',
      () => new UpstreamProtocolError('The provider sent a body that is not JSON.'),
    ],
    [
      'a connection reset the HTTP client wrapped',
      () => new Error('fetch failed', { cause: Object.assign(new Error('read ECONNRESET'), { code: 'ECONNRESET' }) }),
    ],
  ])('%s: the same status, headers and body, in every API', (_what, make) => {
    for (const api of APIS) expect(asSent(reply(across(make()), api))).toEqual(asSent(reply(make(), api)));
  });

  it("the provider's error: its status, bytes and Retry-After, bounded, and no known key left in what crosses", () => {
    const known = 'sk-provider-key-for-codec-test-0001';
    redactor.add([known]);
    const body = Buffer.from(
      JSON.stringify({
        error: {
          message: `Incorrect API key provided: ${known}.`,
          type: 'invalid_request_error',
          param: null,
          code: 'service_unavailable',
        },
      }),
    );
    const error = new UpstreamHttpError(503, body, 'application/json', 'openai', '7');
    const wire = JSON.stringify(GATEWAY_ERROR_CODEC.encode(error));
    expect(Buffer.from((JSON.parse(wire) as { body: string }).body, 'base64').toString()).not.toContain(known);
    for (const api of APIS) expect(asSent(reply(across(error), api))).toEqual(asSent(reply(error, api)));
    expect(reply(across(error), 'openai').headers['retry-after']).toBe('7');

    // A body above the upstream client's bound (from a peer that did not bound it) is cut to it on arrival.
    const huge = GATEWAY_ERROR_CODEC.decode({
      t: 'upstream',
      status: 500,
      body: Buffer.alloc(MAX_ERROR_BODY * 2, 0x61).toString('base64'),
      api: 'openai',
    });
    expect((huge as UpstreamHttpError).body.length).toBe(MAX_ERROR_BODY);
  });
});
