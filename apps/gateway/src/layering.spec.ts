import { describe, expect, it } from '@jest/globals';
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';

const src = dirname(fileURLToPath(import.meta.url));

/**
 * The gateway's folders, lowest first: a file may import at run time from its own layer or a lower one, never a
 * higher one. `.` is the files at the top (Nest wiring, the Nest service, health routes, main). `status/page` is the
 * browser script, built on its own; `audit` is a command of its own that imports nothing here. `apis` is what each
 * upstream API says and how (its tables), below the translations and providers that speak them and the upstream
 * calls that read them.
 */
const LAYERS = [
  'audit',
  'common',
  'config',
  'apis',
  'translate',
  'providers',
  'upstreams',
  'shared-state',
  'budgets',
  'cluster',
  'status',
  'observability',
  'http',
  'data-plane',
  '.',
];

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return path === join(src, 'status', 'page') ? [] : sources(path);
    return entry.name.endsWith('.ts') && !entry.name.endsWith('.spec.ts') ? [path] : [];
  });
}

function folderOf(file: string): string {
  const rel = relative(src, file);
  return rel.includes(sep) ? rel.split(sep)[0] : '.';
}

/** The files a source imports at run time: `import type` and imports of types alone are left out. */
function runtimeImports(file: string): string[] {
  const text = readFileSync(file, 'utf8');
  const found: string[] = [];
  for (const m of text.matchAll(/^(import|export)\s+(type\s+)?([^;]*?)\s*from\s+'(\.[^']+)'/gms)) {
    if (m[2]) continue;
    const names = /^\{([^}]*)\}$/
      .exec(m[3].trim())?.[1]
      .split(',')
      .map((n) => n.trim())
      .filter(Boolean);
    if (names && names.length > 0 && names.every((n) => n.startsWith('type '))) continue;
    found.push(resolve(dirname(file), m[4]));
  }
  for (const m of text.matchAll(/^import\s+'(\.[^']+)'/gm)) found.push(resolve(dirname(file), m[1]));
  return found;
}

const files = sources(src);
const edges = files.flatMap((file) =>
  runtimeImports(file).map((target) => ({
    file: relative(src, file),
    from: folderOf(file),
    to: folderOf(target),
    spec: relative(src, target),
  })),
);

describe('gateway layering', () => {
  it('knows every folder', () => {
    const folders = [...new Set(files.map(folderOf))].sort();
    expect(folders).toEqual([...LAYERS].sort());
  });

  it('imports only from its own layer or below', () => {
    const upward = edges
      .filter((e) => LAYERS.indexOf(e.to) > LAYERS.indexOf(e.from))
      .map((e) => `${e.file} -> ${e.spec}`);
    expect(upward).toEqual([]);
  });

  it('has no cycle between folders', () => {
    const next = new Map<string, Set<string>>();
    for (const e of edges)
      if (e.from !== e.to) (next.get(e.from) ?? next.set(e.from, new Set()).get(e.from)!).add(e.to);
    const cycles: string[] = [];
    const walk = (folder: string, path: string[]) => {
      for (const to of next.get(folder) ?? []) {
        if (to === path[0]) cycles.push([...path, to].join(' -> '));
        else if (!path.includes(to) && to > path[0]) walk(to, [...path, to]);
      }
    };
    for (const folder of next.keys()) walk(folder, [folder]);
    expect(cycles).toEqual([]);
  });
});
