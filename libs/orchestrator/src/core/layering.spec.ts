import { describe, expect, it } from '@jest/globals';
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const core = dirname(fileURLToPath(import.meta.url));

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return sources(path);
    return entry.name.endsWith('.ts') && !entry.name.endsWith('.spec.ts') ? [path] : [];
  });
}

describe('core/ is framework-free', () => {
  const files = sources(core);

  it('finds the core sources', () => {
    expect(files.map((f) => relative(core, f))).toEqual(
      expect.arrayContaining(['orchestrator.ts', 'call.ts', 'policy.ts']),
    );
  });

  it.each(files.map((f) => [relative(core, f), f]))(
    '%s imports nothing from Nest nor from the Nest adapter',
    (_name, file) => {
      const imports = [...readFileSync(file, 'utf8').matchAll(/from '([^']+)'/g)].map((m) => m[1]);
      expect(
        imports.filter((spec) => spec.startsWith('@nestjs/') || spec.includes('/nest/') || spec === 'reflect-metadata'),
      ).toEqual([]);
    },
  );
});
