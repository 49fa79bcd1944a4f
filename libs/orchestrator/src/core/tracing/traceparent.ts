/**
 * A span's identity as it crosses processes: the W3C `traceparent` header
 * (`00-<trace id>-<span id>-<flags>`). The orchestrator publishes a flight's
 * leader in this form (in memory and in the Redis lease), so that joiners link
 * to it without any tracing library on the wire.
 */
export interface TraceParent {
  traceId: string;
  spanId: string;
  /** 1 when the caller sampled the trace. */
  traceFlags: number;
}

const HEX_TRACEPARENT = /^([\da-f]{2})-([\da-f]{32})-([\da-f]{16})-([\da-f]{2})(-.*)?$/;
const ZERO_TRACE = '0'.repeat(32);
const ZERO_SPAN = '0'.repeat(16);

/** Reads a `traceparent` header; `undefined` for anything the W3C spec says to ignore. */
export function parseTraceParent(header: string | string[] | undefined): TraceParent | undefined {
  const value = Array.isArray(header) ? header[0] : header;
  if (value === undefined || value.length > 512) return undefined;
  const match = HEX_TRACEPARENT.exec(value.trim());
  if (!match) return undefined;
  const [, version, traceId, spanId, flags, rest] = match;
  // Version ff is forbidden; version 00 has exactly four fields (later versions may add some).
  if (version === 'ff' || (version === '00' && rest !== undefined)) return undefined;
  if (traceId === ZERO_TRACE || spanId === ZERO_SPAN) return undefined;
  return { traceId, spanId, traceFlags: parseInt(flags, 16) & 1 };
}

/** The `traceparent` header of a span. */
export function formatTraceParent(parent: TraceParent): string {
  return `00-${parent.traceId}-${parent.spanId}-0${parent.traceFlags & 1}`;
}
