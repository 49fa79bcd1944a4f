import { readFileSync } from 'node:fs';

/** USD per 1M tokens. `cached` is the price of prompt tokens served from the provider's own prompt cache. */
export interface ModelPrice {
  input: number;
  output: number;
  cached?: number;
}

/** Token counts of one answer, as the provider reported them. */
export interface Usage {
  input: number;
  output: number;
  /** Of `input`, those the provider served from its prompt cache. */
  cached: number;
}

/**
 * Defaults (list prices, USD per 1M tokens) for common models; `--prices FILE`
 * replaces the table. A model is matched by its exact name, then by the
 * longest name it starts with (`gpt-4o-mini-2024-07-18` is priced as
 * `gpt-4o-mini`), then by `*` (the price of anything else; local models cost 0).
 */
export const DEFAULT_PRICES: Readonly<Record<string, ModelPrice>> = {
  'gpt-4.1': { input: 2, output: 8, cached: 0.5 },
  'gpt-4.1-mini': { input: 0.4, output: 1.6, cached: 0.1 },
  'gpt-4.1-nano': { input: 0.1, output: 0.4, cached: 0.025 },
  'gpt-4o': { input: 2.5, output: 10, cached: 1.25 },
  'gpt-4o-mini': { input: 0.15, output: 0.6, cached: 0.075 },
  'gpt-5': { input: 1.25, output: 10, cached: 0.125 },
  'gpt-5-mini': { input: 0.25, output: 2, cached: 0.025 },
  'gpt-5-nano': { input: 0.05, output: 0.4, cached: 0.005 },
  o3: { input: 2, output: 8, cached: 0.5 },
  'o4-mini': { input: 1.1, output: 4.4, cached: 0.275 },
  'text-embedding-3-small': { input: 0.02, output: 0 },
  'text-embedding-3-large': { input: 0.13, output: 0 },
  'claude-opus-4': { input: 15, output: 75, cached: 1.5 },
  'claude-sonnet-4': { input: 3, output: 15, cached: 0.3 },
  'claude-3-7-sonnet': { input: 3, output: 15, cached: 0.3 },
  'claude-3-5-haiku': { input: 0.8, output: 4, cached: 0.08 },
  'claude-haiku-4-5': { input: 1, output: 5, cached: 0.1 },
  // llama.cpp, vLLM and other models served locally: no per-token bill.
  '*': { input: 0, output: 0, cached: 0 },
};

// A price table is a short list written by hand.
const MAX_FILE_BYTES = 1024 * 1024;
const MAX_MODELS = 10_000;

/** Prices per model, looked up once per model name and remembered (bounded). */
export class PriceTable {
  private readonly names: string[];
  private readonly resolved = new Map<string, ModelPrice | undefined>();

  constructor(private readonly prices: Readonly<Record<string, ModelPrice>> = DEFAULT_PRICES) {
    // Longest first: the most specific prefix wins.
    this.names = Object.keys(prices).filter((name) => name !== '*').sort((a, b) => b.length - a.length);
  }

  /** Reads `--prices FILE`; throws an error naming the problem (the gateway then does not start). */
  static fromFile(file: string): PriceTable {
    let text: string;
    try {
      text = readFileSync(file, 'utf8');
    } catch (error) {
      throw new Error(`--prices ${file}: cannot be read (${(error as NodeJS.ErrnoException).code ?? 'error'})`);
    }
    try {
      return new PriceTable(parsePrices(text));
    } catch (error) {
      throw new Error(`--prices ${file}: ${(error as Error).message}`);
    }
  }

  priceOf(model: string | undefined): ModelPrice | undefined {
    const name = (model ?? '').slice(0, 200);
    if (this.resolved.has(name)) return this.resolved.get(name);
    const price = this.prices[name] ?? this.prices[this.names.find((known) => name.startsWith(known)) ?? '*'];
    if (this.resolved.size > 10_000) this.resolved.clear();
    this.resolved.set(name, price);
    return price;
  }

  /** USD for an answer's usage; an unpriced model (no `*` entry) costs 0. */
  costOf(model: string | undefined, usage: Usage): number {
    const price = this.priceOf(model);
    if (!price) return 0;
    const cached = Math.min(usage.cached, usage.input);
    const fresh = usage.input - cached;
    return (fresh * price.input + cached * (price.cached ?? price.input) + usage.output * price.output) / 1e6;
  }
}

/** `{ "<model or prefix or *>": { "input": n, "output": n, "cached"?: n } }`, USD per 1M tokens. */
export function parsePrices(text: string): Record<string, ModelPrice> {
  if (Buffer.byteLength(text) > MAX_FILE_BYTES) throw new Error(`larger than ${MAX_FILE_BYTES} bytes`);
  let document: unknown;
  try {
    document = JSON.parse(text);
  } catch (error) {
    throw new Error(`not valid JSON (${(error as Error).message.slice(0, 120)})`);
  }
  if (typeof document !== 'object' || document === null || Array.isArray(document)) {
    throw new Error('must be a JSON object mapping model names to { "input", "output", "cached"? } (USD per 1M tokens)');
  }
  const entries = Object.entries(document as Record<string, unknown>);
  if (entries.length > MAX_MODELS) throw new Error(`more than ${MAX_MODELS} models`);
  const table: Record<string, ModelPrice> = Object.create(null) as Record<string, ModelPrice>;
  for (const [model, value] of entries) {
    const name = JSON.stringify(model.slice(0, 80));
    if (model === '' || model.length > 200) throw new Error(`model names must be 1-200 characters, got ${name}`);
    if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new Error(`${name}: must be an object with "input" and "output"`);
    const v = value as Record<string, unknown>;
    for (const field of Object.keys(v)) if (!['input', 'output', 'cached'].includes(field)) throw new Error(`${name}: unknown field ${JSON.stringify(field.slice(0, 40))}`);
    const price = (field: string, required: boolean) => {
      const n = v[field];
      if (n === undefined && !required) return undefined;
      if (typeof n !== 'number' || !Number.isFinite(n) || n < 0 || n > 1e6) throw new Error(`${name}: "${field}" must be a number of USD per 1M tokens (0 to 1000000)`);
      return n;
    };
    table[model] = { input: price('input', true)!, output: price('output', true)!, cached: price('cached', false) };
  }
  return table;
}
