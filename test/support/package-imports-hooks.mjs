// Module hooks of package-imports-preload.mjs (they run on the loader's own thread; hence a file, written at once).
import { appendFileSync } from 'node:fs';

let file;
const seen = new Set();

export function initialize(data) {
  file = data?.file;
}

export async function resolve(specifier, context, next) {
  const named = !/^(\.|\/|node:|file:|data:)/.test(specifier);
  if (file && named && !seen.has(specifier)) {
    seen.add(specifier);
    appendFileSync(file, `${specifier}\n`);
  }
  return next(specifier, context);
}
