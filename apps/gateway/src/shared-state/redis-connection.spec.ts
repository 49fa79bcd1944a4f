import { describe, expect, it } from '@jest/globals';
import { firstKey } from './redis-connection.js';

describe('the Redis connection', () => {
  it('in a cluster a command goes to the node of its first key (a script: its first KEYS entry)', () => {
    expect(firstKey(['EVAL', 'return 1', '2', 'npo:{f:1}:stream', 'npo:{f:1}:events', 'x'])).toBe('npo:{f:1}:stream');
    expect(firstKey(['EVAL', 'return 1', '0'])).toBeUndefined();
    expect(firstKey(['SET', 'npo:lease:k', 'v', 'NX'])).toBe('npo:lease:k');
    expect(firstKey(['PING'])).toBeUndefined();
  });
});
