import { describe, expect, it } from '@jest/globals';
import {
  CircuitOpenError,
  ClientClosedError,
  NoUpstreamAvailableError,
  OverloadedError,
  QueueTimeoutError,
  ShuttingDownError,
  UpstreamTimeoutError,
  isOrchestratorError,
  type OrchestratorError,
} from '../errors.js';
import { isTransientFailure } from '../breaker/failure-classifier.js';
import { errorBody, errorHeaders } from '../http/errors.js';
import { DEFAULT_ERROR_CODEC, RemoteCallError } from './coordination.js';

/** An error as it reaches a follower: encoded by the leader, through JSON (Redis, IPC), decoded by the follower. */
const across = (error: unknown) =>
  DEFAULT_ERROR_CODEC.decode(JSON.parse(JSON.stringify(DEFAULT_ERROR_CODEC.encode(error))) as Record<string, unknown>);

describe("the leader's error, as its followers on other replicas get it", () => {
  it.each<[string, OrchestratorError]>([
    ['a timeout', new UpstreamTimeoutError('total', 1_000)],
    ['an open breaker', new CircuitOpenError('upstream', 17)],
    ['a full queue', new OverloadedError('upstream', 2)],
    ['a queue wait that ran out', new QueueTimeoutError('upstream', 1_000, 3)],
    ['a replica shutting down', new ShuttingDownError()],
    ['no upstream in rotation', new NoUpstreamAvailableError('upstream', 5_000)],
  ])('%s: the same orchestrator error, answered with the same status, headers and body', (_what, error) => {
    const followed = across(error);
    expect(isOrchestratorError(followed)).toBe(true);
    const relayed = followed as OrchestratorError;
    expect({ code: relayed.code, status: relayed.status, type: relayed.type, message: relayed.message }).toEqual({
      code: error.code,
      status: error.status,
      type: error.type,
      message: error.message,
    });
    expect(errorHeaders(relayed)).toEqual(errorHeaders(error));
    expect(errorBody(relayed, 'openai')).toEqual(errorBody(error, 'openai'));
    expect(errorBody(relayed, 'nest')).toEqual(errorBody(error, 'nest'));
    // Not mistaken for the provider being unreachable.
    expect(isTransientFailure(relayed)).toBe(false);
  });

  it("a connection error wrapped by the HTTP client keeps its cause's code", () => {
    const error = new Error('fetch failed', {
      cause: Object.assign(new Error('read ECONNRESET'), { code: 'ECONNRESET' }),
    });
    const followed = across(error);
    expect(followed).toMatchObject({ code: 'ECONNRESET' });
    expect(isTransientFailure(followed)).toBe(isTransientFailure(error));
  });

  it('crosses bounded and without a stack; a caller hanging up, or what does not decode as a known error, stays a RemoteCallError', () => {
    const long = new Error('x'.repeat(100_000));
    const wire = DEFAULT_ERROR_CODEC.encode(long);
    expect(JSON.stringify(wire).length).toBeLessThan(2_000);
    expect(JSON.stringify(wire)).not.toContain('at ');
    // A caller hanging up is never an answer to send: its followers take the call over instead.
    expect(isOrchestratorError(across(new ClientClosedError()))).toBe(false);
    // A code no version of the package relays, or a status that is not an error's: not made an orchestrator error.
    expect(
      DEFAULT_ERROR_CODEC.decode({ message: 'm', status: 503, code: 'made_up', o: { type: 't', retryable: true } }),
    ).toBeInstanceOf(RemoteCallError);
    expect(
      DEFAULT_ERROR_CODEC.decode({
        message: 'm',
        status: 200,
        code: 'circuit_open',
        o: { type: 't', retryable: false },
      }),
    ).toBeInstanceOf(RemoteCallError);
    // What a replica of an earlier version sends (no `o`): read as before.
    expect(DEFAULT_ERROR_CODEC.decode({ message: 'm', status: 504, code: 'upstream_timeout' })).toMatchObject({
      name: 'RemoteCallError',
      status: 504,
    });
  });
});
