import {
  calcPrice,
  findProvider,
  type ModelInfo,
  type ModelPrice as CataloguePrice,
  type Provider,
  type TieredPrices,
} from '@pydantic/genai-prices';
import type { ModelPrice } from '../config/prices-file.js';

/** Token counts of one answer, as the provider reported them. */
export interface Usage {
  input: number;
  output: number;
  /** Of `input`, those the provider served from its prompt cache. */
  cached: number;
}

/** Where a model's price came from; `undefined` from `resolve` means it has none. */
export type PriceSource = 'prices-file' | 'catalogue' | 'default' | 'local';

interface Resolved {
  source: PriceSource;
  /** The operator's price (prices file, `*`, --default-price, or 0 for a local server). */
  price?: ModelPrice;
  /** A catalogue model, kept alone in a provider of its own: pricing it again skips the catalogue's search. */
  catalogue?: Provider;
  /** Its prices in force (some change by date or time of day), and when they were chosen. */
  current?: CataloguePrice;
  chosenAt?: number;
  maxOutput?: number;
}

// Some catalogue prices hold from a date or at certain hours: the prices in force are chosen again this often.
const RECHOOSE_MS = 60_000;

export interface PriceTableOptions {
  /** The operator's prices (`--prices FILE`): exact name, then longest prefix, then `*`; case does not matter. */
  operator?: Readonly<Record<string, ModelPrice>>;
  /** `--default-price`: what a model priced nowhere else costs. */
  defaultPrice?: ModelPrice;
  /** The upstream URL: a known provider's address (api.openai.com, ...) limits the catalogue to that provider. */
  upstreamUrl?: string;
  /** A llama.cpp server bills nothing per token: its models cost 0 unless the operator prices them. */
  localModels?: boolean;
}

/**
 * Prices per model: the operator's prices file first, then the catalogue of
 * `@pydantic/genai-prices` (bundled with the package, read offline: prices are
 * never fetched at run time), then the operator's default. A model none of
 * them prices has no price: under a spend cap it is refused rather than free.
 * Names are matched as providers spell them: any case, dated snapshots
 * (`gpt-4o-2024-08-06`) and fine-tunes (`ft:gpt-4o-mini-2024-07-18:org::id`).
 */
export class PriceTable {
  private readonly operator = new Map<string, ModelPrice>();
  private readonly prefixes: string[];
  private readonly provider?: Provider;
  private readonly resolved = new Map<string, Resolved | undefined>();

  constructor(private readonly options: PriceTableOptions = {}) {
    for (const [name, price] of Object.entries(options.operator ?? {})) this.operator.set(name.toLowerCase(), price);
    // Longest first: the most specific prefix wins.
    this.prefixes = [...this.operator.keys()].filter((name) => name !== '*').sort((a, b) => b.length - a.length);
    // An address the catalogue knows fixes the provider; any other (a self-hosted server, a proxy) leaves the
    // model's name to say whose it is (`gpt-` is OpenAI's, `claude-` Anthropic's).
    this.provider = options.upstreamUrl ? findProvider({ providerApiUrl: options.upstreamUrl }) : undefined;
  }

  /** Where the model's price comes from, or undefined when nothing prices it. */
  sourceOf(model: string | undefined): PriceSource | undefined {
    return this.resolve(model)?.source;
  }

  /** Output tokens to reserve for a request that does not bound its answer: the prices file's `maxOutput`, if any. */
  maxOutputOf(model: string | undefined): number | undefined {
    return this.resolve(model)?.maxOutput;
  }

  /** USD for an answer's usage; 0 for a model without a price (callers that must not let it pass check `sourceOf`). */
  costOf(model: string | undefined, usage: Usage): number {
    const found = this.resolve(model);
    if (!found) return 0;
    const cached = Math.min(usage.cached, usage.input);
    if (found.price) {
      const price = found.price;
      return (
        ((usage.input - cached) * price.input + cached * (price.cached ?? price.input) + usage.output * price.output) /
        1e6
      );
    }
    // The catalogue's own calcPrice takes tens of microseconds (it decomposes usage into every unit it knows): the
    // three units a usage report has are priced here, with the catalogue's rule for tiers (a tier's price applies to
    // all tokens once the prompt passes its start).
    const now = Date.now();
    if (!found.current || now - (found.chosenAt ?? 0) > RECHOOSE_MS) {
      found.current =
        calcPrice({ input_tokens: 1, output_tokens: 1 }, normalName(model), { provider: found.catalogue })
          ?.model_price ?? {};
      found.chosenAt = now;
    }
    const price = found.current;
    const per = (unit: number | TieredPrices | undefined, tokens: number) => {
      if (unit === undefined || tokens <= 0) return 0;
      if (typeof unit === 'number') return (unit * tokens) / 1e6;
      let rate = unit.base;
      for (const tier of unit.tiers) if (usage.input > tier.start) rate = tier.price;
      return (rate * tokens) / 1e6;
    };
    return (
      per(price.input_mtok, usage.input - cached) +
      per(price.cache_read_mtok ?? price.input_mtok, cached) +
      per(price.output_mtok, usage.output)
    );
  }

  private resolve(model: string | undefined): Resolved | undefined {
    const name = normalName(model);
    if (this.resolved.has(name)) return this.resolved.get(name);
    const found = this.lookUp(name);
    // Bounded: model names come from clients.
    if (this.resolved.size > 10_000) this.resolved.clear();
    this.resolved.set(name, found);
    return found;
  }

  private lookUp(name: string): Resolved | undefined {
    const own =
      this.operator.get(name) ?? this.operator.get(this.prefixes.find((known) => name.startsWith(known)) ?? '');
    if (own) return { source: 'prices-file', price: own, maxOutput: own.maxOutput };
    const catalogue = name === '' ? undefined : this.fromCatalogue(name);
    if (catalogue) return { source: 'catalogue', catalogue };
    const fallback = this.operator.get('*');
    if (fallback) return { source: 'prices-file', price: fallback, maxOutput: fallback.maxOutput };
    if (this.options.defaultPrice)
      return { source: 'default', price: this.options.defaultPrice, maxOutput: this.options.defaultPrice.maxOutput };
    if (this.options.localModels) return { source: 'local', price: { input: 0, output: 0 } };
    return undefined;
  }

  /** The catalogue's entry for a model, alone in a copy of its provider. */
  private fromCatalogue(name: string): Provider | undefined {
    const options = this.provider ? { provider: this.provider } : {};
    const probe = { input_tokens: 1, output_tokens: 1 };
    const result = calcPrice(probe, name, options);
    // A fine-tune, `ft:<base>:<org>:<suffix>:<id>`: the catalogue lists fine-tunes by their dated base
    // (`ft:gpt-4o-mini-2024-`); a name given with an undated base is priced as that base's fine-tune.
    if (!result && name.startsWith('ft:')) {
      const base = name.slice(3).split(':')[0];
      const baseResult = base ? calcPrice(probe, base, options) : null;
      const fineTune = baseResult?.provider.models.find((m: ModelInfo) => m.id === `ft:${baseResult.model.id}`);
      if (baseResult && fineTune) return alone(baseResult.provider, fineTune, name);
    }
    return result ? alone(result.provider, result.model, name) : undefined;
  }
}

/** The provider with only this model, matched by exactly this name. */
function alone(provider: Provider, model: ModelInfo, name: string): Provider {
  return { ...provider, fallback_model_providers: undefined, models: [{ ...model, match: { equals: name } }] };
}

function normalName(model: string | undefined): string {
  return (model ?? '').slice(0, 200).trim().toLowerCase();
}
