import type { Usage } from '../budgets/prices.js';
import { API_FORMATS } from './formats.js';

// What an answer used, read where each API's table says it is (see `ApiFormat.usageAt` and `tokenCounts`).

// A usage object is a few hundred bytes; past this the bytes after `"usage"` are not one.
const MAX_USAGE_BYTES = 8 * 1024;
const USAGE = Buffer.from('"usage"');

/** The usage objects' places across the APIs, each once, in the order they are tried. */
const USAGE_PATHS: readonly (readonly string[])[] = (() => {
  const paths = new Map<string, readonly string[]>();
  for (const format of [API_FORMATS.openai, API_FORMATS.anthropic, API_FORMATS.responses, API_FORMATS.llama])
    for (const path of format.usageAt) if (!paths.has(path.join('.'))) paths.set(path.join('.'), path);
  return [...paths.values()];
})();

const COUNTS = API_FORMATS.llama.tokenCounts!;
const COUNT_MARKER = Buffer.from(`"${COUNTS.output}"`);
const COUNT_INPUT = new RegExp(`"${COUNTS.input}"\\s*:\\s*(\\d+)`);
const COUNT_OUTPUT = new RegExp(`"${COUNTS.output}"\\s*:\\s*(\\d+)`);

/**
 * The usage of a whole JSON answer, read from its tail: the last `"usage"`
 * field (providers put it at or near the end) is located and only that object
 * parsed, so a large answer is not parsed a second time.
 */
export function usageOfJson(bytes: Buffer): Usage | undefined {
  let at = bytes.lastIndexOf(USAGE);
  if (at < 0) return tokenCountsOf(bytes);
  // Inside a string the quotes are escaped (`\"usage\"`): not the field.
  while (at > 0 && bytes[at - 1] === 0x5c) at = bytes.lastIndexOf(USAGE, at - 1);
  if (at < 0) return undefined;
  const start = bytes.indexOf(0x7b, at + USAGE.length);
  if (start < 0 || start - at > 32) return undefined;
  const end = objectEnd(bytes, start, Math.min(bytes.length, start + MAX_USAGE_BYTES));
  if (end < 0) return undefined;
  try {
    return normalise(JSON.parse(bytes.subarray(start, end + 1).toString('utf8')));
  } catch {
    return undefined;
  }
}

/** llama.cpp's own routes report their token counts side by side at the top level, near the end. */
function tokenCountsOf(bytes: Buffer): Usage | undefined {
  const at = bytes.lastIndexOf(COUNT_MARKER);
  if (at < 0) return undefined;
  const text = bytes.toString('utf8', Math.max(0, at - 200), Math.min(bytes.length, at + 200));
  const output = COUNT_OUTPUT.exec(text);
  const input = COUNT_INPUT.exec(text);
  return output ? { input: input ? Number(input[1]) : 0, output: Number(output[1]), cached: 0 } : undefined;
}

/** Index of the `}` closing the object opened at `start`, or -1 before `limit`. */
function objectEnd(bytes: Buffer, start: number, limit: number): number {
  let depth = 0;
  let inString = false;
  for (let i = start; i < limit; i++) {
    const c = bytes[i];
    if (inString) {
      if (c === 0x5c) i++;
      else if (c === 0x22) inString = false;
    } else if (c === 0x22) inString = true;
    else if (c === 0x7b) depth++;
    else if (c === 0x7d && --depth === 0) return i;
  }
  return -1;
}

/** The token counts of any provider's usage object (OpenAI chat, completions, embeddings, Responses; Anthropic). */
export function normalise(usage: unknown): Usage | undefined {
  if (typeof usage !== 'object' || usage === null) return undefined;
  const u = usage as Record<string, unknown>;
  const n = (value: unknown) =>
    typeof value === 'number' && Number.isFinite(value) && value > 0 ? Math.floor(value) : 0;
  const details = (u.prompt_tokens_details ?? u.input_tokens_details) as Record<string, unknown> | undefined;
  if ('prompt_tokens' in u || 'completion_tokens' in u) {
    return { input: n(u.prompt_tokens), output: n(u.completion_tokens), cached: n(details?.cached_tokens) };
  }
  if ('input_tokens' in u || 'output_tokens' in u) {
    // Anthropic counts prompt-cache reads and writes apart from input_tokens; OpenAI's Responses API includes them.
    const cacheRead = n(u.cache_read_input_tokens);
    const anthropic = 'cache_read_input_tokens' in u || 'cache_creation_input_tokens' in u;
    const input = n(u.input_tokens) + (anthropic ? cacheRead + n(u.cache_creation_input_tokens) : 0);
    return { input, output: n(u.output_tokens), cached: anthropic ? cacheRead : n(details?.cached_tokens) };
  }
  return undefined;
}

/** llama.cpp's final stream event carries its token counts beside its `stop: true`. */
function tokenCounts(data: Record<string, unknown>): Usage | undefined {
  const output = data[COUNTS.output];
  if (typeof output !== 'number') return undefined;
  const input = data[COUNTS.input];
  return {
    input: typeof input === 'number' && input > 0 ? Math.floor(input) : 0,
    output: Math.max(0, Math.floor(output)),
    cached: 0,
  };
}

/** Larger of each count: Anthropic streams report input at the start and output at the end. */
export function mergeUsage(a: Usage | undefined, b: Usage): Usage {
  return a
    ? { input: Math.max(a.input, b.input), output: Math.max(a.output, b.output), cached: Math.max(a.cached, b.cached) }
    : b;
}

/** The usage in one SSE data object, wherever an API puts it (see `ApiFormat.usageAt`). */
export function usageOfEvent(data: unknown): Usage | undefined {
  if (typeof data !== 'object' || data === null) return undefined;
  for (const path of USAGE_PATHS) {
    let value: unknown = data;
    for (const field of path) value = (value as Record<string, unknown> | undefined)?.[field];
    const found = normalise(value);
    if (found) return found;
  }
  return tokenCounts(data as Record<string, unknown>);
}

/** Whether an OpenAI chunk is the usage-only chunk `include_usage` adds (no choices, usage set). */
export function isUsageChunk(data: unknown): boolean {
  const d = data as { choices?: unknown; usage?: unknown } | null;
  return (
    typeof d === 'object' &&
    d !== null &&
    Array.isArray(d.choices) &&
    d.choices.length === 0 &&
    typeof d.usage === 'object' &&
    d.usage !== null
  );
}
