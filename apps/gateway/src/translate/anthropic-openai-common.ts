import { invalidRequest } from '../common/api-error.js';

/** What the request, response and stream translations between Anthropic and OpenAI share. */

export type Json = Record<string, unknown>;

const OPENAI_TO_ANTHROPIC_STOP: Record<string, string> = {
  stop: 'end_turn',
  length: 'max_tokens',
  tool_calls: 'tool_use',
  function_call: 'tool_use',
  content_filter: 'refusal',
};
const ANTHROPIC_TO_OPENAI_STOP: Record<string, string> = {
  end_turn: 'stop',
  stop_sequence: 'stop',
  max_tokens: 'length',
  tool_use: 'tool_calls',
  refusal: 'content_filter',
  pause_turn: 'stop',
  model_context_window_exceeded: 'length',
};

export function toAnthropicStop(reason: unknown): string | null {
  return typeof reason === 'string' ? (OPENAI_TO_ANTHROPIC_STOP[reason] ?? 'end_turn') : null;
}

export function toOpenAIStop(reason: unknown): string | null {
  return typeof reason === 'string' ? (ANTHROPIC_TO_OPENAI_STOP[reason] ?? 'stop') : null;
}

export function isObject(value: unknown): value is Json {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** Absent, or null (which both APIs read as absent). */
export function absent(value: unknown): boolean {
  return value === undefined || value === null;
}

export function untranslatable(field: string, why: string): never {
  throw invalidRequest(field, `${field} ${why}`);
}

/** Fields other than `known` are refused by name: nothing a client asked for is dropped without a word. */
export function refuseUnknown(body: Json, known: ReadonlySet<string>, provider: string, where = ''): void {
  for (const [field, value] of Object.entries(body)) {
    if (!known.has(field) && !absent(value)) {
      untranslatable(
        `${where}${field}`,
        `cannot be translated for ${provider}; remove it, or use a provider that has it.`,
      );
    }
  }
}

export function requireArray(value: unknown, field: string): unknown[] {
  if (!Array.isArray(value)) untranslatable(field, value === undefined ? 'is required.' : 'must be an array.');
  return value;
}

export function requireObjectAt(value: unknown, field: string): Json {
  if (!isObject(value)) untranslatable(field, 'must be an object.');
  return value;
}

export function parseArguments(text: unknown, field: string): unknown {
  if (typeof text !== 'string' || text === '') return {};
  try {
    return JSON.parse(text);
  } catch {
    return untranslatable(field, 'must be a JSON object (the tool call arguments).');
  }
}

/** A tool's arguments as the provider sent them: an object when they parse, else the text itself (never lost). */
export function argumentsOf(text: unknown): unknown {
  if (typeof text !== 'string' || text === '') return {};
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

/** Anthropic's input_tokens leave out the prompt tokens read from the cache; OpenAI's prompt_tokens include them. */
export function anthropicUsage(usage: Json | undefined): Json {
  const prompt = Number(usage?.prompt_tokens ?? 0);
  const cached = Number((usage?.prompt_tokens_details as Json | undefined)?.cached_tokens ?? 0);
  return {
    input_tokens: Math.max(0, prompt - cached),
    output_tokens: Number(usage?.completion_tokens ?? 0),
    cache_read_input_tokens: cached,
    cache_creation_input_tokens: 0,
  };
}

/** OpenAI's prompt_tokens count every prompt token; Anthropic's input_tokens leave out the cached ones. */
export function openAIUsage(usage: Json | undefined): Json {
  const input = Number(usage?.input_tokens ?? 0);
  const cacheRead = Number(usage?.cache_read_input_tokens ?? 0);
  const cacheWrite = Number(usage?.cache_creation_input_tokens ?? 0);
  const output = Number(usage?.output_tokens ?? 0);
  const prompt = input + cacheRead + cacheWrite;
  return {
    prompt_tokens: prompt,
    completion_tokens: output,
    total_tokens: prompt + output,
    prompt_tokens_details: { cached_tokens: cacheRead },
  };
}
