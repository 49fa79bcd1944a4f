import { KeyTable } from 'nest-prompt-orchestrator/low-level';
import type { SpendCap } from '../config/spend-cap.js';
import { readSpendFile, writeSpendFile } from './spend-file.js';
import { EXPIRE_SECONDS, PERIODS, groupBy, periodKey, periodKeys, periodOf, scopeOf } from './spend-periods.js';
import { RESERVE, SETTLE } from './spend-scripts.js';

/** What the ledger needs of Redis: commands (node-redis's `sendCommand`). */
export interface LedgerRedis {
  sendCommand(args: string[]): Promise<unknown>;
}

/** Spend and savings of one scope (a key's name, or `*` for all) in one period. */
export interface SpendTotals {
  /** USD, in billionths: sums of integers stay exact. */
  spentNano: number;
  savedNano: number;
}

export const NANO = 1e9;

/** A cap that applies to a request: who it limits (a key's name, or `*`) and how much. */
export interface ScopedCap {
  scope: string;
  cap: SpendCap;
}

/** Money held for a request in flight, against every cap it is under, until its cost is known. */
export interface Hold {
  id: string;
  amountNano: number;
  /** The totals it is held against (`day:2026-11-30:*`, ...), as of when it was made. */
  totals: string[];
  expiresAt: number;
}

/** A reservation refused: the cap (by its index in the list given) that spent and held money already reach. */
export interface Refusal {
  index: number;
  spentNano: number;
  heldNano: number;
}

/**
 * Spend and money saved per key and in all, per UTC day and month. Kept in
 * memory and, so that a restart does not reset a cap, in Redis (shared by
 * replicas: totals are read there before each capped request, bounded in
 * time) or in a local file (written atomically, at most once a second).
 */
export class SpendLedger {
  private readonly totals = new Map<string, SpendTotals>();
  // This replica's holds, so that caps still hold (for its own requests) while Redis is away. One per capped request
  // in flight: not a Map (see `KeyTable`).
  private readonly holds = new KeyTable<Hold>();
  private readonly held = new Map<string, number>();
  private holdSeq = 0;
  private flushTimer?: NodeJS.Timeout;
  private redisDown = false;

  constructor(
    private readonly options: {
      redis?: LedgerRedis;
      /**
       * Redis is a cluster: each scope's keys (every period, spent, saved and held) carry the scope as hash tag, and a
       * step across scopes is one script per scope (see `reserve`). Otherwise the key names are as they always were.
       */
      slotPerScope?: boolean;
      prefix?: string;
      opTimeoutMs?: number;
      file?: string;
      now?: () => number;
      log?: (line: string) => void;
      /**
       * What caps do while Redis does not answer (`--limits-without-redis`): `open`, this replica's own count
       * against the whole cap; `closed`, no answer (the caller refuses); `share`, its own count against the cap
       * divided by `replicas`. Default `open`.
       */
      withoutRedis?: () => { mode: 'open' | 'closed' | 'share'; replicas: number };
      /** Redis failed (once per outage) or is back; without it, both are said through `log`. */
      onState?: (state: 'ok' | 'degraded', error?: unknown) => void;
    } = {},
  ) {
    if (options.file) for (const [id, totals] of readSpendFile(options.file, options.log)) this.totals.set(id, totals);
  }

  private get now(): number {
    return (this.options.now ?? Date.now)();
  }

  /** Records an answer's cost (and what joined or cached copies of it saved). */
  record(scope: string | undefined, spentNano: number, savedNano: number): void {
    if (spentNano === 0 && savedNano === 0) return;
    // Each period's key and its `*` (the totals of every answer) from one look at the day's keys.
    const { keys, all } = periodKeys(this.now);
    for (const period of PERIODS) {
      this.add(all[period], period, spentNano, savedNano);
      if (scope !== undefined) this.add(`${keys[period]}:${scope}`, period, spentNano, savedNano);
    }
    this.scheduleFlush();
  }

  private add(id: string, period: SpendCap['period'], spentNano: number, savedNano: number): void {
    let totals = this.totals.get(id);
    if (!totals) this.totals.set(id, (totals = { spentNano: 0, savedNano: 0 }));
    totals.spentNano += spentNano;
    totals.savedNano += savedNano;
    if (this.options.redis) {
      if (spentNano) void this.command(['INCRBY', this.redisKey(id, 'spent'), String(spentNano)], period);
      if (savedNano) void this.command(['INCRBY', this.redisKey(id, 'saved'), String(savedNano)], period);
    }
  }

  /**
   * Holds `amountNano` against every cap, unless one of them is already reached by what is spent and held: a
   * request is let in while the cap has room, so concurrent requests pass a cap by at most one request's hold.
   * Across replicas through Redis (one Lua script); in this replica alone while Redis is away.
   */
  async reserve(
    caps: ScopedCap[],
    amountNano: number,
    holdMs: number,
  ): Promise<{ hold: Hold } | { refused: Refusal } | { unavailable: true }> {
    const now = this.now;
    const totals = caps.map(({ scope, cap }) => `${periodKey(cap.period, now)}:${scope}`);
    const amount = Math.max(0, Math.round(amountNano));
    const hold: Hold = {
      id: `${process.pid}.${Date.now().toString(36)}.${(this.holdSeq++).toString(36)}`,
      amountNano: amount,
      totals,
      expiresAt: now + holdMs,
    };
    this.expireHolds(now);
    let refused: Refusal | undefined;
    if (this.options.redis) {
      const answer = await this.reserveShared(caps, totals, hold, holdMs);
      if (answer === undefined) {
        const without = this.withoutRedis();
        if (without.mode === 'closed') return { unavailable: true };
        refused = this.localRefusal(caps, totals, without.mode === 'share' ? without.replicas : 1);
      } else refused = answer === 'held' ? undefined : answer;
    } else refused = this.localRefusal(caps, totals);
    if (refused) return { refused };
    this.holds.set(hold.id, hold);
    for (const id of totals) this.held.set(id, (this.held.get(id) ?? 0) + amount);
    return { hold };
  }

  /**
   * The hold, made in Redis against every cap, or the first cap (by index) that refused it; undefined when Redis did
   * not answer. In a cluster, the caps of each scope are checked and held by one script on that scope's slot; should
   * one scope refuse, what the others held is released. Each cap's check and hold stay one atomic step, so no cap is
   * passed by more than it would be on one node; a request refused by one scope may briefly hold room in another.
   */
  private async reserveShared(
    caps: ScopedCap[],
    totals: string[],
    hold: Hold,
    holdMs: number,
  ): Promise<Refusal | 'held' | undefined> {
    const groups = this.options.slotPerScope
      ? groupBy(
          caps.map((c, index) => ({ index, scope: c.scope })),
          (c) => c.scope,
        )
      : [caps.map((_, index) => ({ index }))];
    const answers = await Promise.all(
      groups.map((group) => {
        const keys = group.flatMap(({ index }) => [
          this.redisKey(totals[index], 'spent'),
          this.redisKey(totals[index], 'held'),
        ]);
        const limits = group.map(({ index }) => String(Math.round(caps[index].cap.usd * NANO)));
        const args = [
          String(hold.expiresAt - holdMs),
          hold.id,
          String(hold.amountNano),
          String(hold.expiresAt),
          String(Math.ceil(holdMs / 1000) + 60),
          ...limits,
        ];
        return this.command(['EVAL', RESERVE, String(keys.length), ...keys, ...args]);
      }),
    );
    let refused: Refusal | undefined;
    let unanswered = false;
    answers.forEach((answer, g) => {
      if (!Array.isArray(answer)) return void (unanswered = true);
      const [index, spent, held] = answer.map(Number);
      const global = index > 0 ? groups[g][index - 1].index : -1;
      if (global >= 0 && (!refused || global < refused.index))
        refused = { index: global, spentNano: spent, heldNano: held };
    });
    if (groups.length > 1 && (refused || unanswered)) {
      // Released where it was held: the request does not go ahead.
      await Promise.all(
        answers.flatMap((answer, g) => {
          if (!Array.isArray(answer) || Number(answer[0]) !== 0) return [];
          const keys = groups[g].map(({ index }) => this.redisKey(totals[index], 'held'));
          return [this.command(['EVAL', SETTLE, String(keys.length), ...keys, '0', '0', hold.id])];
        }),
      );
    }
    if (unanswered) return undefined;
    return refused ?? 'held';
  }

  /**
   * A request's cost is known (0 when it failed before the provider answered): it is added to the totals of
   * `scope` and of all, and its hold (if any) is dropped, in one step.
   */
  settle(hold: Hold | undefined, scope: string | undefined, costNano: number): Promise<void> {
    if (hold && this.holds.delete(hold.id)) {
      for (const id of hold.totals) {
        const left = (this.held.get(id) ?? 0) - hold.amountNano;
        if (left > 0) this.held.set(id, left);
        else this.held.delete(id);
      }
    }
    const cost = Math.max(0, Math.round(costNano));
    const now = this.now;
    const spentIds: string[] = [];
    for (const period of PERIODS) {
      const p = periodKey(period, now);
      for (const s of scope === undefined ? ['*'] : ['*', scope]) spentIds.push(`${p}:${s}`);
    }
    if (cost > 0) {
      for (const id of spentIds) {
        const totals = this.totals.get(id) ?? { spentNano: 0, savedNano: 0 };
        totals.spentNano += cost;
        this.totals.set(id, totals);
      }
      this.scheduleFlush();
    }
    if (!this.options.redis || (cost === 0 && !hold)) return Promise.resolve();
    const held = hold?.totals ?? [];
    // In a cluster, one script per scope (each on its scope's slot); else one for all, as always.
    const scopes = this.options.slotPerScope ? [...new Set([...spentIds, ...held].map(scopeOf))] : [undefined];
    // Never rejects: a failure is reported once by `command`, and the hold expires in Redis.
    return Promise.all(
      scopes.map((scopeName) => {
        const mine = (id: string) => scopeName === undefined || scopeOf(id) === scopeName;
        const spentHere = spentIds.filter(mine);
        const keys = [
          ...spentHere.map((id) => this.redisKey(id, 'spent')),
          ...held.filter(mine).map((id) => this.redisKey(id, 'held')),
        ];
        const ttls = spentHere.map((id) => String(EXPIRE_SECONDS[id.startsWith('day:') ? 'day' : 'month']));
        return this.command([
          'EVAL',
          SETTLE,
          String(keys.length),
          ...keys,
          String(spentHere.length),
          String(cost),
          hold?.id ?? '-',
          ...ttls,
        ]);
      }),
    ).then(() => undefined);
  }

  /** Money this replica holds for its requests in flight under `scope`'s cap (USD in billionths). */
  heldBy(scope: string, cap: SpendCap): number {
    return this.held.get(`${periodKey(cap.period, this.now)}:${scope}`) ?? 0;
  }

  private withoutRedis(): { mode: 'open' | 'closed' | 'share'; replicas: number } {
    return this.options.withoutRedis?.() ?? { mode: 'open', replicas: 1 };
  }

  /** Refused by this replica's own count: against the whole cap, or (`replicas` > 1) against its share of it. */
  private localRefusal(caps: ScopedCap[], totals: string[], replicas = 1): Refusal | undefined {
    for (let i = 0; i < caps.length; i++) {
      const spentNano = this.totals.get(totals[i])?.spentNano ?? 0;
      const heldNano = this.held.get(totals[i]) ?? 0;
      if (spentNano + heldNano >= Math.floor(Math.round(caps[i].cap.usd * NANO) / Math.max(1, replicas)))
        return { index: i, spentNano, heldNano };
    }
    return undefined;
  }

  /** Holds of requests that never settled (a bug, or a stream longer than the hold) stop holding. */
  private expireHolds(now: number): void {
    for (const hold of this.holds.values()) if (hold.expiresAt <= now) void this.settle(hold, undefined, 0);
  }

  /** USD (in billionths) spent by `scope` in the cap's current period; the fleet's total when shared through Redis. */
  async spent(scope: string, cap: SpendCap): Promise<number> {
    const status = await this.capStatus(scope, cap);
    return status.spentNano ?? 0;
  }

  /**
   * What is spent under a cap, and whether it is reached: the fleet's total when Redis answers; while it does
   * not, as `withoutRedis` says (`spentNano` undefined: nobody can tell, under `closed`).
   */
  async capStatus(scope: string, cap: SpendCap): Promise<{ spentNano?: number; reached: boolean }> {
    const id = `${periodKey(cap.period, this.now)}:${scope}`;
    const local = this.totals.get(id)?.spentNano ?? 0;
    const capNano = Math.round(cap.usd * NANO);
    if (!this.options.redis) return { spentNano: local, reached: local >= capNano };
    const shared = await this.command(['GET', this.redisKey(id, 'spent')]);
    if (shared !== undefined) {
      const spentNano = Math.max(local, Number(shared ?? 0));
      return { spentNano, reached: spentNano >= capNano };
    }
    const without = this.withoutRedis();
    if (without.mode === 'closed') return { reached: false };
    return {
      spentNano: local,
      reached: local >= Math.floor(capNano / (without.mode === 'share' ? Math.max(1, without.replicas) : 1)),
    };
  }

  /** This process's view of the totals in the current day and month (for /health and the docs' examples). */
  snapshot(): Record<string, SpendTotals> {
    const now = this.now;
    const current = new Set(PERIODS.map((p) => periodKey(p, now)));
    return Object.fromEntries([...this.totals].filter(([id]) => current.has(id.slice(0, id.lastIndexOf(':')))));
  }

  close(): void {
    if (this.flushTimer) {
      clearTimeout(this.flushTimer);
      this.flushTimer = undefined;
      this.flush();
    }
  }

  /**
   * `<prefix>:spend:<what>:<period>:<scope>` (one node, or Sentinel: the names spend always had), or in a cluster
   * `<prefix>:spend:{s:<scope>}:<what>:<period>`: every key of a scope in that scope's slot.
   */
  private redisKey(id: string, what: 'spent' | 'saved' | 'held'): string {
    const prefix = this.options.prefix ?? 'npo';
    if (!this.options.slotPerScope) return `${prefix}:spend:${what}:${id}`;
    const period = periodOf(id);
    return `${prefix}:spend:{s:${id.slice(period.length + 1)}}:${what}:${period}`;
  }

  private async command(args: string[], period?: SpendCap['period']): Promise<unknown> {
    const redis = this.options.redis!;
    const ms = this.options.opTimeoutMs ?? 200;
    try {
      const result = await new Promise<unknown>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`no answer from Redis within ${ms} ms`)), ms);
        timer.unref();
        redis.sendCommand(args).then(
          (value) => (clearTimeout(timer), resolve(value)),
          (error: unknown) => (clearTimeout(timer), reject(error)),
        );
      });
      if (period) void redis.sendCommand(['EXPIRE', args[1], String(EXPIRE_SECONDS[period])]).catch(() => undefined);
      if (this.redisDown) {
        this.redisDown = false;
        if (this.options.onState) this.options.onState('ok');
        else this.options.log?.('spend totals: Redis is back');
      }
      return result;
    } catch (error) {
      if (!this.redisDown) {
        this.redisDown = true;
        if (this.options.onState) this.options.onState('degraded', error);
        else
          this.options.log?.(
            `spend totals: Redis unavailable (${((error as Error).message ?? '').slice(0, 120)}); caps use this replica's own count until it is back`,
          );
      }
      return undefined;
    }
  }

  private scheduleFlush(): void {
    if (!this.options.file || this.flushTimer) return;
    this.flushTimer = setTimeout(() => {
      this.flushTimer = undefined;
      this.flush();
    }, 1_000);
    this.flushTimer.unref();
  }

  private flush(): void {
    if (this.options.file) writeSpendFile(this.options.file, this.snapshot(), this.options.log);
  }
}
