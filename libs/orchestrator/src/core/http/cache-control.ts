import type { Reuse } from '../orchestrator.js';

/**
 * What a request's `Cache-Control` asks of the window (RFC 9111's request
 * directives that apply to a shared answer): `no-cache` and `max-age=0` want a
 * fresh answer, `no-store` wants this one not kept, `max-age=N` accepts a
 * stored one at most N s old. Anything else is ignored.
 */
export function reuseOf(cacheControl: string | string[] | undefined, storable: boolean): Reuse | undefined {
  if (cacheControl === undefined) return storable ? undefined : { noStore: true };
  const reuse: Reuse = storable ? {} : { noStore: true };
  for (const directive of (Array.isArray(cacheControl) ? cacheControl.join(',') : cacheControl)
    .toLowerCase()
    .split(',')) {
    const [name, value] = directive.trim().split('=', 2);
    if (name === 'no-cache') reuse.noCache = true;
    else if (name === 'no-store') reuse.noStore = true;
    else if (name === 'max-age') {
      const seconds = Number(value?.replace(/"/g, ''));
      if (Number.isInteger(seconds) && seconds >= 0) {
        if (seconds === 0) reuse.noCache = true;
        else reuse.maxAgeMs = seconds * 1000;
      }
    }
  }
  return reuse;
}
