/**
 * List prices, US dollars per million tokens (input, output), of common
 * models, matched by the longest prefix of the model name. An estimate of
 * what deduplication saved, not a bill: prices change, and a provider may
 * charge cached input less. Models not listed (local models, llama.cpp) show
 * tokens saved only.
 */
const PRICES = ([
  ['gpt-4o-mini', 0.15, 0.6],
  ['gpt-4o', 2.5, 10],
  ['gpt-4.1-nano', 0.1, 0.4],
  ['gpt-4.1-mini', 0.4, 1.6],
  ['gpt-4.1', 2, 8],
  ['gpt-5-nano', 0.05, 0.4],
  ['gpt-5-mini', 0.25, 2],
  ['gpt-5', 1.25, 10],
  ['o4-mini', 1.1, 4.4],
  ['o3-mini', 1.1, 4.4],
  ['o3', 2, 8],
  ['gpt-4-turbo', 10, 30],
  ['gpt-3.5-turbo', 0.5, 1.5],
  ['text-embedding-3-small', 0.02, 0],
  ['text-embedding-3-large', 0.13, 0],
  ['claude-opus-4', 15, 75],
  ['claude-sonnet-4', 3, 15],
  ['claude-3-7-sonnet', 3, 15],
  ['claude-3-5-sonnet', 3, 15],
  ['claude-3-5-haiku', 0.8, 4],
  ['claude-haiku-4', 1, 5],
  ['claude-3-haiku', 0.25, 1.25],
] as Array<[prefix: string, input: number, output: number]>).sort((a, b) => b[0].length - a[0].length);

/** Dollars `input` and `output` tokens of `model` cost at list price, or `undefined` when its price is not known. */
export function priceOf(model: string, input: number, output: number): number | undefined {
  const name = model.toLowerCase().replace(/^[\w-]+\//, '');
  const price = PRICES.find(([prefix]) => name.startsWith(prefix));
  return price && (input * price[1] + output * price[2]) / 1_000_000;
}
