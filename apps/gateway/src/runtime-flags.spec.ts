import { describe, expect, it } from '@jest/globals';
import { readFileSync } from 'node:fs';
import { GATEWAY_NODE_FLAGS } from './runtime-flags.js';

describe('the V8 flags the gateway runs with', () => {
  it('are what `npm start` passes to node, before the entry point', () => {
    const manifest = JSON.parse(readFileSync(new URL('../../../package.json', import.meta.url), 'utf8')) as {
      scripts: Record<string, string>;
    };
    expect(manifest.scripts.start).toBe(`node ${GATEWAY_NODE_FLAGS.join(' ')} dist/gateway/main.js`);
  });
});
