import type { Upstream, UpstreamPool } from 'nest-prompt-orchestrator/core';
import { Agent, request } from 'undici';
import type { UpstreamTarget } from './upstream-set.js';

export interface HealthPollerOptions {
  /** Time between two checks of one upstream. */
  intervalMs: number;
  /** Headers of the checks of one upstream (its key: /props, /slots and /metrics may need it). */
  headers: (target: UpstreamTarget) => Record<string, string>;
  /** Slots are read again every this many checks (a restarted server may have another `--parallel`). Default 30. */
  slotsEvery?: number;
  /**
   * Time between two readings of a server's load while callers wait for slots that only the server can say are
   * free again (busy with others' work, or with calls the gateway aborted). Default 100 ms, at most `intervalMs`.
   */
  hurriedMs?: number;
}

/** A reading of a server's load by its limiter (see `ConcurrencyLimiter.beginLoadReading`). */
type LoadReading = ReturnType<Upstream['limiter']['beginLoadReading']>;

/** Where a server's load is read: `/slots` (each slot's `is_processing`) or its Prometheus `/metrics`. */
type LoadSource = 'slots' | 'metrics';

/** What one read of a server's slots said: how many it has, and how many are busy (when it says). */
interface SlotState {
  total?: number;
  busy?: number;
  source?: LoadSource;
}

/** One server's checks: when the next is due, and where its load is read. */
interface Watch {
  timer?: ReturnType<typeof setTimeout>;
  /** When the timer fires (performance.now()), while it is set. */
  timerAt: number;
  /** When the next full check (`/health`, then slots) is due; load readings alone come between while hurried. */
  fullAt: number;
  checks: number;
  running: boolean;
  source?: LoadSource;
  /** The last load reading's round trip: how long a request sent just before it may wait to be seen. */
  rttMs: number;
  lastReadAt: number;
}

/**
 * Keeps each llama.cpp server of a pool in rotation or out of it, and its
 * limit at its free slots, by asking the server itself:
 * - `GET /health`: 200 serving, 503 loading its model (out, `loading`),
 *   anything else or no answer (out, `down`);
 * - its slots: how many (`/slots`' length, else `/props` `total_slots`) when
 *   it comes up and now and then after, which becomes its limiter's capacity;
 *   and how many are busy at every check: `/slots` (each slot's
 *   `is_processing`) when the server has it, else `/metrics`
 *   (`llamacpp:requests_processing` plus `requests_deferred`, its own queue).
 *   Slots busy with work the gateway did not send (another gateway, a batch
 *   job) are not free: the limiter lets only the rest through, and the
 *   requests beyond wait in the gateway's fair queue, where their time limit
 *   has not started yet. A server with neither says only its total.
 * While callers wait for slots that only the server can say are free again,
 * its load alone is read every `hurriedMs` (one small GET), and at once when a
 * caller starts waiting so. Checks use a small connection pool of their own,
 * never the proxied requests' connections, and never overlap for one server.
 */
export class HealthPoller implements MemberChecks {
  private readonly agent = new Agent({ connections: 2, keepAliveTimeout: 10_000 });
  private readonly watches = new Map<Upstream, Watch>();
  private readonly hurriedMs: number;
  /** The upstreams checked: the pool's at start, then those added and not removed since. */
  private readonly polled = new Set<Upstream>();
  private stopped = false;

  constructor(
    private readonly pool: UpstreamPool,
    private readonly options: HealthPollerOptions,
  ) {
    this.hurriedMs = Math.min(options.intervalMs, options.hurriedMs ?? 100);
  }

  /** Checks every upstream now, then every `intervalMs`. Resolves when the first round is done. */
  async start(): Promise<void> {
    for (const member of this.pool.members) this.watchMember(member);
    await Promise.all(this.pool.members.map((member) => this.loop(member)));
  }

  /** Starts checking an upstream added at run time: it joins the rotation at its first good check. */
  add(member: Upstream): void {
    if (this.stopped || this.polled.has(member)) return;
    this.watchMember(member);
    void this.loop(member);
  }

  /** Stops checking an upstream taken out (a check under way still ends, and is ignored). */
  remove(member: Upstream): void {
    this.polled.delete(member);
    const watch = this.watches.get(member);
    clearTimeout(watch?.timer);
    this.watches.delete(member);
    member.limiter.onLoadReadingWanted(undefined);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    for (const [member, watch] of this.watches) {
      clearTimeout(watch.timer);
      member.limiter.onLoadReadingWanted(undefined);
    }
    this.watches.clear();
    this.polled.clear();
    await this.agent.close().catch(() => undefined);
  }

  private watchMember(member: Upstream): void {
    this.polled.add(member);
    member.limiter.onLoadReadingWanted(() => this.hurry(member));
  }

  /** One full check of one upstream: its health, and its slots. Never throws. */
  async check(member: Upstream): Promise<void> {
    const watch = this.watch(member);
    const target = member.target as UpstreamTarget;
    try {
      const response = await request(`${target.url}/health`, {
        method: 'GET',
        signal: AbortSignal.timeout(this.timeout()),
        dispatcher: this.agent,
      });
      const text = await response.body.text();
      if (response.statusCode === 200) {
        const count = watch.checks++;
        const due =
          member.health !== 'up' ||
          member.snapshot().slots === undefined ||
          count % (this.options.slotsEvery ?? 30) === 0;
        if (!due) {
          member.setHealth('up');
          return await this.readLoad(member, target);
        }
        const { state, reading } = await this.slotsOf(member, target);
        watch.source = state.source;
        member.setHealth('up', { slots: state.total });
        reading?.end(state.busy);
        // A server that stopped saying its load (restarted without --slots or --metrics) has only its total again.
        if (!state.source && member.limiter.loadReported) member.limiter.forgetLoad();
      } else if (response.statusCode === 503) {
        member.setHealth('loading', { detail: messageOf(text) ?? 'loading' });
      } else {
        member.setHealth('down', { detail: `GET /health answered ${response.statusCode}` });
      }
    } catch (error) {
      member.setHealth('down', { detail: describe(error) });
    }
  }

  private watch(member: Upstream): Watch {
    let watch = this.watches.get(member);
    if (!watch)
      this.watches.set(
        member,
        (watch = { timerAt: 0, fullAt: 0, checks: 0, running: false, rttMs: 0, lastReadAt: -Infinity }),
      );
    return watch;
  }

  private timeout(): number {
    return Math.max(250, Math.min(2_000, this.options.intervalMs));
  }

  private async loop(member: Upstream): Promise<void> {
    if (this.stopped || !this.polled.has(member)) return;
    const watch = this.watch(member);
    watch.timer = undefined;
    watch.running = true;
    try {
      if (performance.now() >= watch.fullAt) {
        watch.fullAt = performance.now() + this.options.intervalMs;
        await this.check(member);
      } else {
        await this.readLoad(member, member.target as UpstreamTarget);
      }
    } finally {
      watch.running = false;
    }
    if (this.stopped || !this.polled.has(member)) return;
    const hurried = this.hurried(member, watch);
    this.schedule(member, watch, hurried ? Math.min(watch.fullAt, watch.lastReadAt + this.hurriedMs) : watch.fullAt);
  }

  /** Whether callers wait on what only this server's load can tell, and it says its load. */
  private hurried(member: Upstream, watch: Watch): boolean {
    return watch.source !== undefined && member.health === 'up' && member.limiter.loadReadingWanted;
  }

  private schedule(member: Upstream, watch: Watch, at: number): void {
    clearTimeout(watch.timer);
    watch.timerAt = at;
    watch.timer = setTimeout(() => void this.loop(member), Math.max(0, at - performance.now()));
    watch.timer.unref();
  }

  /** A caller started waiting on this server's load: read it now (or as soon as the last reading allows). */
  private hurry(member: Upstream): void {
    const watch = this.watches.get(member);
    if (this.stopped || !watch || watch.running || !this.hurried(member, watch)) return;
    const at = Math.max(performance.now(), watch.lastReadAt + this.hurriedMs);
    if (watch.timer === undefined || at < watch.timerAt) this.schedule(member, watch, at);
  }

  /** Reads how many of the server's slots are busy (an `up` server's), from where it says it, into its limiter. Never throws. */
  private async readLoad(member: Upstream, target: UpstreamTarget): Promise<void> {
    const source = this.watch(member).source;
    if (!source) return;
    const { state, reading } = await this.read(member, target, source);
    // A reading of /slots says the total too: the capacity comes first, the load is read against it.
    if (state?.total !== undefined && member.health === 'up') member.setHealth('up', { slots: state.total });
    reading.end(state?.busy);
  }

  /**
   * The server's slots, and where its load is read: `/slots` when it lists each slot's `is_processing`, else
   * `/metrics` when it has llama.cpp's gauges (the total then from `/props` `total_slots`), else the total alone
   * (`/props` `total_slots`, else how many `/slots` lists). The reading that said the load is left to end once
   * the capacity is set.
   */
  private async slotsOf(
    member: Upstream,
    target: UpstreamTarget,
  ): Promise<{ state: SlotState; reading?: LoadReading }> {
    const fromSlots = await this.read(member, target, 'slots');
    if (fromSlots.state?.source) return { state: fromSlots.state, reading: fromSlots.reading };
    fromSlots.reading.end(undefined);
    const props = await this.get(target, '/props', 'json');
    const total = (props as { total_slots?: unknown } | undefined)?.total_slots;
    const counted = typeof total === 'number' && Number.isInteger(total) && total > 0 ? total : fromSlots.state?.total;
    if (counted === undefined) return { state: {} };
    const fromMetrics = await this.read(member, target, 'metrics');
    if (fromMetrics.state?.source)
      return { state: { ...fromMetrics.state, total: counted }, reading: fromMetrics.reading };
    fromMetrics.reading.end(undefined);
    return { state: { total: counted } };
  }

  /** One read of the server's load from `source`, in a reading of its limiter begun just before (the caller ends it). */
  private async read(
    member: Upstream,
    target: UpstreamTarget,
    source: LoadSource,
  ): Promise<{ state?: SlotState; reading: LoadReading }> {
    const watch = this.watch(member);
    // A request the gateway sent just before may not be in a slot yet when the server reads its slots.
    const reading = member.limiter.beginLoadReading(Math.max(20, 2 * watch.rttMs));
    const startedAt = performance.now();
    const body = await this.get(
      target,
      source === 'slots' ? '/slots' : '/metrics',
      source === 'slots' ? 'json' : 'text',
    );
    watch.lastReadAt = performance.now();
    watch.rttMs = watch.lastReadAt - startedAt;
    return { state: source === 'slots' ? slotsState(body) : metricsState(body), reading };
  }

  /** A read of one server, with its own key: another server's would be refused, and must never reach it. */
  private async get(target: UpstreamTarget, path: string, as: 'json' | 'text'): Promise<unknown> {
    try {
      const headers = this.options.headers(target);
      const response = await request(`${target.url}${path}`, {
        method: 'GET',
        headers,
        signal: AbortSignal.timeout(this.timeout()),
        dispatcher: this.agent,
      });
      if (response.statusCode !== 200) {
        await response.body.dump();
        return undefined;
      }
      return as === 'json' ? await response.body.json() : await response.body.text();
    } catch {
      return undefined;
    }
  }
}

/** What the gateway does to bring an upstream added at run time into rotation, and to let it go. */
export interface MemberChecks {
  add(member: Upstream): void;
  remove(member: Upstream): void;
  stop(): Promise<void>;
}

export interface FirstCheckOptions {
  /** Time between two checks of an upstream that has not answered yet. */
  intervalMs: number;
  /** The provider's health URL on that upstream (OpenAI's model list, Anthropic's). */
  url: (target: UpstreamTarget) => string;
  /** Its own key: a check sent another's would be refused, and would hand that key to it. */
  headers: (target: UpstreamTarget) => Record<string, string>;
}

/**
 * Lets an upstream added at run time into rotation once it answers: the first
 * HTTP answer below 500 from the provider's health URL, whatever the status
 * (a 401 or 404 still says a server is there and serving; a 5xx or no answer
 * does not), checked every `intervalMs` until then. After that its breaker
 * alone takes it out and back, as for every upstream of a provider without
 * health checks worth polling (a paid API's model list would cost its rate
 * limit).
 */
export class FirstCheck implements MemberChecks {
  private readonly agent = new Agent({ connections: 2, keepAliveTimeout: 10_000 });
  private readonly timers = new Map<Upstream, ReturnType<typeof setTimeout>>();
  private readonly waiting = new Set<Upstream>();
  private stopped = false;

  constructor(private readonly options: FirstCheckOptions) {}

  add(member: Upstream): void {
    if (this.stopped || this.waiting.has(member)) return;
    this.waiting.add(member);
    void this.loop(member);
  }

  remove(member: Upstream): void {
    this.waiting.delete(member);
    clearTimeout(this.timers.get(member));
    this.timers.delete(member);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    for (const timer of this.timers.values()) clearTimeout(timer);
    this.timers.clear();
    this.waiting.clear();
    await this.agent.close().catch(() => undefined);
  }

  /** One check; true once the upstream answered (then it is in rotation). Never throws. */
  async check(member: Upstream): Promise<boolean> {
    const target = member.target as UpstreamTarget;
    const url = this.options.url(target);
    const timeout = Math.max(250, Math.min(2_000, this.options.intervalMs));
    try {
      const response = await request(url, {
        method: 'GET',
        headers: this.options.headers(target),
        signal: AbortSignal.timeout(timeout),
        dispatcher: this.agent,
      });
      await response.body.dump();
      if (response.statusCode < 500) {
        if (this.waiting.has(member)) member.setHealth('up');
        return true;
      }
      member.setHealth('pending', {
        detail: `first health check: GET ${new URL(url).pathname} answered ${response.statusCode}`,
      });
    } catch (error) {
      member.setHealth('pending', { detail: `first health check: ${describe(error)}` });
    }
    return false;
  }

  private async loop(member: Upstream): Promise<void> {
    if (this.stopped || !this.waiting.has(member)) return;
    if (await this.check(member)) {
      this.waiting.delete(member);
      return;
    }
    if (this.stopped || !this.waiting.has(member)) return;
    const timer = setTimeout(() => void this.loop(member), this.options.intervalMs);
    timer.unref();
    this.timers.set(member, timer);
  }
}

/** `/slots`: one object per slot; busy ones have `is_processing: true` (a build that says no such thing gives only the total). */
function slotsState(body: unknown): SlotState | undefined {
  if (!Array.isArray(body) || body.length === 0) return undefined;
  const flags = body.map((slot) => (slot as { is_processing?: unknown } | null)?.is_processing);
  if (!flags.every((flag) => typeof flag === 'boolean')) return { total: body.length };
  return { total: body.length, busy: flags.filter(Boolean).length, source: 'slots' };
}

const PROCESSING = /^llamacpp:requests_processing(?:\{[^}]*\})?\s+(\S+)/m;
const DEFERRED = /^llamacpp:requests_deferred(?:\{[^}]*\})?\s+(\S+)/m;

/** `/metrics` (Prometheus text): slots processing, plus requests the server holds in its own queue for want of one. */
function metricsState(body: unknown): SlotState | undefined {
  if (typeof body !== 'string') return undefined;
  const processing = Number(PROCESSING.exec(body)?.[1]);
  const deferred = Number(DEFERRED.exec(body)?.[1] ?? 0);
  if (!Number.isFinite(processing) || !Number.isFinite(deferred)) return undefined;
  return { busy: Math.max(0, processing) + Math.max(0, deferred), source: 'metrics' };
}

function messageOf(text: string): string | undefined {
  try {
    const message = (JSON.parse(text) as { error?: { message?: unknown } }).error?.message;
    return typeof message === 'string' ? message : undefined;
  } catch {
    return undefined;
  }
}

function describe(error: unknown): string {
  let cause: unknown = error;
  for (let depth = 0; depth < 4 && typeof cause === 'object' && cause !== null; depth++) {
    const code = (cause as { code?: unknown }).code;
    if (typeof code === 'string') return code;
    cause = (cause as { cause?: unknown }).cause;
  }
  return error instanceof Error ? error.name : 'unreachable';
}
