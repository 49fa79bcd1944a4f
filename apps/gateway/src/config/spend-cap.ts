import { ConfigError } from '../common/config-error.js';

/** A spend cap: at most `usd` per calendar `period` (UTC). */
export interface SpendCap {
  usd: number;
  period: 'day' | 'month';
}

/** `50/day`, `$1000/month`, `0.5/day`: USD per calendar day or month (UTC). */
export function parseSpendCap(text: string, what: string): SpendCap {
  const match = /^\s*\$?(\d+(?:\.\d+)?)\s*(?:USD)?\s*\/\s*(day|month)\s*$/i.exec(text);
  if (!match) throw new ConfigError(`${what} must look like 50/day or 1000/month (USD), got "${text.slice(0, 60)}"`);
  return { usd: Number(match[1]), period: match[2].toLowerCase() as 'day' | 'month' };
}
