import { ROUTES, type GatewayRoute } from '../providers/provider.js';
import { invalidRequest } from '../common/api-error.js';

type Json = Record<string, unknown>;

/**
 * What the gateway checks in a request body before it goes anywhere: only
 * what it cannot serve safely, never more than the provider it fronts would
 * refuse. Whether `model` is there, which roles the messages have, whether a
 * sampling parameter is in range: the provider judges, and its answer (status,
 * error body, bytes) reaches the client unchanged. The JSON itself (parsed by
 * the platform), its nesting depth (bounded by the guard's walk) and its
 * Content-Type are checked elsewhere; a translation checks, with a 400 naming
 * the field, what it has to read.
 */

export function isObject(value: unknown): value is Json {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** The body as an object, or a 400 that says what was sent instead. */
export function requireObject(body: unknown): Json {
  if (!isObject(body)) {
    throw invalidRequest(
      null,
      body === undefined
        ? 'The request body must be a JSON object (Content-Type: application/json).'
        : `The request body must be a JSON object, got ${body === null ? 'null' : Array.isArray(body) ? 'an array' : typeof body}.`,
    );
  }
  return body;
}

/**
 * A JSON object, or no body at all (the provider decides what an empty
 * request means); `stream`, which the gateway reads to pick how to answer,
 * must be a boolean.
 */
export function validateObjectBody(body: unknown): Json | undefined {
  if (body === undefined) return undefined;
  const o = requireObject(body);
  if (o.stream !== undefined && o.stream !== null && typeof o.stream !== 'boolean') {
    throw invalidRequest('stream', 'stream must be true or false.');
  }
  return o;
}

/** Any JSON value (e.g. the array `POST /lora-adapters` takes), or no body. */
export function validateJsonBody(body: unknown): unknown {
  return body;
}

/** An upload: the bytes the client sent (read by the provider, not by the gateway), or no body. */
export function validateUpload(body: unknown): unknown {
  if (body !== undefined && !Buffer.isBuffer(body)) {
    throw invalidRequest(null, 'The request body must be multipart/form-data.');
  }
  return body;
}

/** The body check of a POST route, from its entry in `ROUTES`. */
export function validateBody(route: GatewayRoute): (body: unknown) => unknown {
  const body = ROUTES[route].body;
  return body === 'json' ? validateJsonBody : body === 'multipart' ? validateUpload : validateObjectBody;
}
