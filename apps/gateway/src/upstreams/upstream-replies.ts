import { RemoteCallError, isOrchestratorError } from 'nest-prompt-orchestrator/core';
import { UpstreamStreamError } from '../apis/errors.js';
import { API_FORMATS } from '../apis/formats.js';
import type { ClientApi, UpstreamPlan } from '../providers/provider.js';

// What both forwarding paths (the data plane and the Nest service) make of a call upstream: its URL, its JSON
// body, the last event of a stream that broke.

/** The provider's URL for a route: its fixed path, `:param` segments filled in (escaped), the client's query string. */
export function upstreamUrl(plan: UpstreamPlan, params: Record<string, string>, query: string): string {
  const url = plan.url.replace(/:([A-Za-z_]+)/g, (match, name: string) =>
    params[name] === undefined ? match : encodeURIComponent(params[name]),
  );
  return url + query;
}

/** A body parsed as JSON, or undefined when it is not JSON. */
export function parseJson(bytes: Buffer): unknown {
  try {
    return JSON.parse(bytes.toString('utf8'));
  } catch {
    return undefined;
  }
}

/**
 * The last event of a stream that broke after it started, in the client's own
 * stream format (its table's error shape), so the SDK raises an error instead of
 * seeing a clean end. The leading blank line closes any event the provider left
 * half-written.
 */
export function streamErrorEvent(api: ClientApi): (error: unknown) => string {
  let format = STREAM_ERROR_EVENTS.get(api);
  if (!format) STREAM_ERROR_EVENTS.set(api, (format = makeStreamErrorEvent(api)));
  return format;
}

/** One formatter per API, made once. */
const STREAM_ERROR_EVENTS = new Map<ClientApi, (error: unknown) => string>();

function makeStreamErrorEvent(api: ClientApi): (error: unknown) => string {
  return (error) => {
    // The provider's own error event already reached the client with the stream.
    if (error instanceof UpstreamStreamError && error.delivered) return '';
    const timeout = isOrchestratorError(error) && error.code === 'upstream_timeout';
    // A follower's leader (another replica) went away mid-answer: said as such, not blamed on the provider.
    const lost = error instanceof RemoteCallError && error.code === 'leader_lost';
    const message = timeout || lost ? (error as Error).message : 'The provider interrupted the stream.';
    return '\n\n' + API_FORMATS[api].streamError(message, timeout, lost ? 'leader_lost' : 'stream_interrupted');
  };
}
