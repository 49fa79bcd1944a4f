import { ConfigError } from '../common/config-error.js';
import type { FlagSpec } from './flag-values.js';
import { checkKeys } from './keys-file.js';
import { parsePrice, readPricesFile, type ModelPrice } from './prices-file.js';
import { parseSpendCap, type SpendCap } from './spend-cap.js';

/** Virtual keys, rate limits, spend caps and the request log, from flags and environment. */
export interface BudgetConfig {
  /** JSON file of virtual keys (re-read when it changes and on SIGHUP). */
  keysFile?: string;
  /** Virtual keys as JSON text (ORCHESTRATOR_KEYS), used when no file is given. */
  keysJson?: string;
  /** Requests one key may make per rate window (default for keys without their own; undefined: no limit). */
  requestsPerWindow?: number;
  /** Provider tokens one key may use per rate window (same default rule). */
  tokensPerWindow?: number;
  rateWindowMs: number;
  /** The operator's prices file, on top of the catalogue. */
  pricesFile?: string;
  /** Its table, read at start. */
  prices?: Readonly<Record<string, ModelPrice>>;
  /** The price of a model neither the prices file nor the catalogue knows (undefined: such a model has none). */
  defaultPrice?: ModelPrice;
  /** Output tokens reserved under a spend cap for a request that does not bound its answer. */
  reserveOutputTokens: number;
  /** Cap over every key together. */
  maxSpend?: SpendCap;
  /** Where spend is kept across restarts without Redis. */
  spendFile?: string;
  /** Ask OpenAI-format streams for their usage when the client did not (and hide it from that client). */
  streamUsage: boolean;
  requestLog?: string;
  requestLogMaxBytes: number;
  requestLogFiles: number;
}

/** The budget flags, listed in `--help` with the gateway's others. */
export const BUDGET_FLAGS: Record<string, FlagSpec> = {
  'keys-file': {
    env: 'ORCHESTRATOR_KEYS_FILE',
    value: 'PATH',
    help: 'virtual keys (JSON: key or sha256:<hex> -> name, limits, maxSpend); reloaded on change and SIGHUP. Env ORCHESTRATOR_KEYS holds the same JSON inline',
  },
  'requests-per-minute': {
    env: 'ORCHESTRATOR_REQUESTS_PER_MINUTE',
    value: 'N',
    help: 'requests one key may make per rate window, for keys without their own limit (default: no limit)',
  },
  'tokens-per-minute': {
    env: 'ORCHESTRATOR_TOKENS_PER_MINUTE',
    value: 'N',
    help: 'provider tokens (from usage) one key may use per rate window, for keys without their own (default: no limit)',
  },
  'rate-window': {
    env: 'ORCHESTRATOR_RATE_WINDOW_SECS',
    value: 'SECS',
    help: 'window the rate limits count over (default 60)',
  },
  prices: {
    env: 'ORCHESTRATOR_PRICES_FILE',
    value: 'FILE',
    help: 'prices (JSON, USD per 1M tokens) per model or name prefix, on top of the bundled catalogue',
  },
  'default-price': {
    env: 'ORCHESTRATOR_DEFAULT_PRICE',
    value: 'IN/OUT',
    help: 'USD per 1M input/output tokens of any model nothing else prices, e.g. 3/15 (default: none; under a spend cap such a model is refused)',
  },
  'reserve-output-tokens': {
    env: 'ORCHESTRATOR_RESERVE_OUTPUT_TOKENS',
    value: 'N',
    help: 'output tokens a request under a spend cap reserves when it sets no max_tokens (default 4096)',
  },
  'max-spend': {
    env: 'ORCHESTRATOR_MAX_SPEND',
    value: 'USD/PERIOD',
    help: 'spend cap over all keys, e.g. 50/day or 1000/month (default: none)',
  },
  'spend-file': {
    env: 'ORCHESTRATOR_SPEND_FILE',
    value: 'PATH',
    help: 'file keeping spend across restarts when there is no --redis (default: spend kept in memory only)',
  },
  'no-stream-usage': {
    env: 'ORCHESTRATOR_NO_STREAM_USAGE',
    boolean: true,
    help: 'do not ask streams for usage the client did not request (their spend and tokens then go uncounted)',
  },
  'request-log': {
    env: 'ORCHESTRATOR_REQUEST_LOG',
    value: 'FILE',
    help: 'write one JSON line per request (no prompts) to FILE',
  },
  'request-log-max-bytes': {
    env: 'ORCHESTRATOR_REQUEST_LOG_MAX_BYTES',
    value: 'BYTES',
    help: 'rotate the request log at this size (default 52428800, 50 MiB)',
  },
  'request-log-files': {
    env: 'ORCHESTRATOR_REQUEST_LOG_FILES',
    value: 'N',
    help: 'rotated request logs kept besides the current one (default 5)',
  },
};

/** Reads the budget settings; `raw` gives a flag's text (flag, else environment), `flag` a boolean flag. */
export function parseBudgetConfig(
  raw: (name: string) => string | undefined,
  flag: (name: string) => boolean,
  env: NodeJS.ProcessEnv,
): BudgetConfig {
  const count = (name: string, fallback: number | undefined, min: number): number | undefined => {
    const text = raw(name);
    if (text === undefined) return fallback;
    const n = Number(text);
    if (text.trim() === '' || !Number.isInteger(n) || n < min)
      throw new ConfigError(`--${name} must be a whole number of at least ${min}, got "${text}"`);
    return n;
  };
  const windowText = raw('rate-window');
  const window = windowText === undefined ? 60 : Number(windowText);
  if (!Number.isFinite(window) || window < 0.001 || windowText?.trim() === '')
    throw new ConfigError(`--rate-window must be a number of seconds above 0, got "${windowText}"`);
  const maxSpend = raw('max-spend');
  const keysFile = raw('keys-file');
  const keysJson = keysFile === undefined ? env.ORCHESTRATOR_KEYS || undefined : undefined;
  const pricesFile = raw('prices');
  const defaultPriceText = raw('default-price');
  // Checked now so that a bad file stops start-up with a line naming the problem.
  try {
    if (keysFile !== undefined || keysJson !== undefined) checkKeys({ file: keysFile, json: keysJson });
  } catch (error) {
    throw new ConfigError(
      `${keysFile === undefined ? 'ORCHESTRATOR_KEYS' : '--keys-file'}: ${(error as Error).message}`,
    );
  }
  let prices: Record<string, ModelPrice> | undefined;
  try {
    prices = pricesFile === undefined ? undefined : readPricesFile(pricesFile);
  } catch (error) {
    throw new ConfigError((error as Error).message);
  }
  let defaultPrice: ModelPrice | undefined;
  try {
    defaultPrice = defaultPriceText === undefined ? undefined : parsePrice(defaultPriceText, '--default-price');
  } catch (error) {
    throw new ConfigError((error as Error).message);
  }
  return {
    keysFile,
    keysJson,
    requestsPerWindow: count('requests-per-minute', undefined, 1),
    tokensPerWindow: count('tokens-per-minute', undefined, 1),
    rateWindowMs: Math.round(window * 1000),
    pricesFile,
    prices,
    defaultPrice,
    reserveOutputTokens: count('reserve-output-tokens', 4096, 1)!,
    maxSpend: maxSpend === undefined ? undefined : parseSpendCap(maxSpend, '--max-spend'),
    spendFile: raw('spend-file'),
    streamUsage: !flag('no-stream-usage'),
    requestLog: raw('request-log'),
    requestLogMaxBytes: count('request-log-max-bytes', 50 * 1024 * 1024, 1024)!,
    requestLogFiles: count('request-log-files', 5, 0)!,
  };
}
