import { readFileSync } from 'node:fs';

/** USD per 1M tokens. `cached` is the price of prompt tokens served from the provider's own prompt cache. */
export interface ModelPrice {
  input: number;
  output: number;
  cached?: number;
  /** Output tokens reserved under a spend cap when a request does not bound its answer (prices file only). */
  maxOutput?: number;
}

// A price table is a short list written by hand.
const MAX_FILE_BYTES = 1024 * 1024;
const MAX_MODELS = 10_000;

/** Reads `--prices FILE`; throws an error naming the problem (the gateway then does not start). */
export function readPricesFile(file: string): Record<string, ModelPrice> {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (error) {
    throw new Error(`--prices ${file}: cannot be read (${(error as NodeJS.ErrnoException).code ?? 'error'})`, {
      cause: error,
    });
  }
  try {
    return parsePrices(text);
  } catch (error) {
    throw new Error(`--prices ${file}: ${(error as Error).message}`, { cause: error });
  }
}

/**
 * `{ "<model or prefix or *>": { "input": n, "output": n, "cached"?: n, "maxOutput"?: n } }`, USD per 1M tokens;
 * `maxOutput` is how many output tokens to reserve under a spend cap when a request does not say.
 */
export function parsePrices(text: string): Record<string, ModelPrice> {
  if (Buffer.byteLength(text) > MAX_FILE_BYTES) throw new Error(`larger than ${MAX_FILE_BYTES} bytes`);
  let document: unknown;
  try {
    document = JSON.parse(text);
  } catch (error) {
    throw new Error(`not valid JSON (${(error as Error).message.slice(0, 120)})`, { cause: error });
  }
  if (typeof document !== 'object' || document === null || Array.isArray(document)) {
    throw new Error(
      'must be a JSON object mapping model names to { "input", "output", "cached"? } (USD per 1M tokens)',
    );
  }
  const entries = Object.entries(document as Record<string, unknown>);
  if (entries.length > MAX_MODELS) throw new Error(`more than ${MAX_MODELS} models`);
  const table: Record<string, ModelPrice> = Object.create(null) as Record<string, ModelPrice>;
  for (const [model, value] of entries) {
    const name = JSON.stringify(model.slice(0, 80));
    if (model === '' || model.length > 200) throw new Error(`model names must be 1-200 characters, got ${name}`);
    if (typeof value !== 'object' || value === null || Array.isArray(value))
      throw new Error(`${name}: must be an object with "input" and "output"`);
    const v = value as Record<string, unknown>;
    for (const field of Object.keys(v))
      if (!['input', 'output', 'cached', 'maxOutput'].includes(field))
        throw new Error(`${name}: unknown field ${JSON.stringify(field.slice(0, 40))}`);
    const price = (field: string, required: boolean) => {
      const n = v[field];
      if (n === undefined && !required) return undefined;
      if (typeof n !== 'number' || !Number.isFinite(n) || n < 0 || n > 1e6)
        throw new Error(`${name}: "${field}" must be a number of USD per 1M tokens (0 to 1000000)`);
      return n;
    };
    const maxOutput = v.maxOutput;
    if (
      maxOutput !== undefined &&
      (typeof maxOutput !== 'number' || !Number.isInteger(maxOutput) || maxOutput < 1 || maxOutput > 10_000_000)
    ) {
      throw new Error(`${name}: "maxOutput" must be a whole number of tokens (1 to 10000000)`);
    }
    const entry: ModelPrice = {
      input: price('input', true)!,
      output: price('output', true)!,
      cached: price('cached', false),
    };
    if (maxOutput !== undefined) entry.maxOutput = maxOutput;
    table[model] = entry;
  }
  return table;
}

/** `--default-price 3/15` or `3/15/0.3`: USD per 1M input / output (/ cached input) tokens. */
export function parsePrice(text: string, what: string): ModelPrice {
  const match = /^\s*(\d+(?:\.\d+)?)\s*\/\s*(\d+(?:\.\d+)?)\s*(?:\/\s*(\d+(?:\.\d+)?)\s*)?$/.exec(text);
  if (!match)
    throw new Error(
      `${what} must look like INPUT/OUTPUT or INPUT/OUTPUT/CACHED in USD per 1M tokens (e.g. 3/15), got "${text.slice(0, 60)}"`,
    );
  return {
    input: Number(match[1]),
    output: Number(match[2]),
    cached: match[3] === undefined ? undefined : Number(match[3]),
  };
}
