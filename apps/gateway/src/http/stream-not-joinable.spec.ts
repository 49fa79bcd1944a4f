import { describe, expect, it } from '@jest/globals';
import { FlightOutgrownError } from 'nest-prompt-orchestrator/core';
import { errorReply } from './error-reply.js';

/**
 * A request that joined a stream whose start is no longer kept for joiners (in this process, or in Redis for a
 * fleet) is refused: the client is told to try again shortly (the answer is then likely in the window), never
 * given a gateway failure.
 */
describe('a stream joined too late', () => {
  it('is answered 503 stream_not_joinable, with Retry-After and x-should-retry: true', () => {
    const reply = errorReply(
      new FlightOutgrownError(),
      { api: 'openai', requestId: 'req-1', presented: 'sk-late-joiner-0001' },
      { warn: () => undefined },
    );
    expect(reply.status).toBe(503);
    expect(reply.headers['x-should-retry']).toBe('true');
    expect(reply.headers['retry-after']).toBe('1');
    const body = JSON.parse(reply.body.toString('utf8')) as { error: { code: string; message: string } };
    expect(body.error.code).toBe('stream_not_joinable');
    expect(body.error.message).toMatch(/try again/);
  });
});
