import { describe, expect, it } from '@jest/globals';
import { readFileSync } from 'node:fs';
import { helpText } from '../../apps/gateway/src/config/gateway-config.js';

/** Every flag `--help` lists has its row in docs/configuration.md (a flag nobody can look up is a flag nobody uses). */
describe('gateway flags in docs/configuration.md', () => {
  const flags = [...helpText().matchAll(/^ {2}(--[a-z][a-z-]*)/gm)]
    .map((m) => m[1])
    .filter((flag) => flag !== '--help');
  const reference = readFileSync(new URL('../../docs/configuration.md', import.meta.url), 'utf8');

  it('finds the flags in --help', () => {
    expect(flags.length).toBeGreaterThan(20);
  });

  it.each(flags)('%s is documented', (flag) => {
    expect(reference).toMatch(new RegExp('\\| `' + flag + '(?=[ `])'));
  });
});
