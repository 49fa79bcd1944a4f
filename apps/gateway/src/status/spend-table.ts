/** Money and tokens under one name (a model, or a key's digest). */
export interface SpendRow {
  name: string;
  requests: number;
  spentTokens: number;
  spentDollars: number;
  savedTokens: number;
  savedDollars: number;
  /** Requests answered by dedup (joined or cached). */
  savedCalls: number;
}

/**
 * Spend and savings by name, bounded: the first `max` names get a row each,
 * later ones are added up under `other` (model names and keys come from
 * clients: their number must never grow the gateway's memory).
 */
export class SpendTable {
  private readonly rows = new Map<string, SpendRow>();

  constructor(private readonly max: number) {}

  record(
    name: string,
    r: { spentTokens?: number; spentDollars?: number; savedTokens?: number; savedDollars?: number; saved: boolean },
  ): void {
    const key = this.rows.has(name) || this.rows.size < this.max ? name : 'other';
    let row = this.rows.get(key);
    if (!row)
      this.rows.set(
        key,
        (row = {
          name: key,
          requests: 0,
          spentTokens: 0,
          spentDollars: 0,
          savedTokens: 0,
          savedDollars: 0,
          savedCalls: 0,
        }),
      );
    row.requests++;
    row.spentTokens += r.spentTokens ?? 0;
    row.spentDollars += r.spentDollars ?? 0;
    row.savedTokens += r.savedTokens ?? 0;
    row.savedDollars += r.savedDollars ?? 0;
    if (r.saved) row.savedCalls++;
  }

  /** The `limit` rows that moved the most money (then tokens, then requests). */
  top(limit: number): SpendRow[] {
    const weight = (r: SpendRow) => [r.spentDollars + r.savedDollars, r.spentTokens + r.savedTokens, r.requests];
    return [...this.rows.values()]
      .sort((a, b) => {
        const [x, y] = [weight(a), weight(b)];
        return y[0] - x[0] || y[1] - x[1] || y[2] - x[2];
      })
      .slice(0, limit)
      .map((r) => ({ ...r }));
  }
}
