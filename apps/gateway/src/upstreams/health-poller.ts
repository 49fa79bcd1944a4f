import type { Upstream, UpstreamPool } from 'nest-prompt-orchestrator';
import { Agent, request } from 'undici';
import type { UpstreamTarget } from './upstream-set.js';

export interface HealthPollerOptions {
  /** Time between two checks of one upstream. */
  intervalMs: number;
  /** Headers of the checks of one upstream (its key: /props and /slots may need it). */
  headers: (target: UpstreamTarget) => Record<string, string>;
  /** Slots are read again every this many checks (a restarted server may have another `--parallel`). Default 30. */
  slotsEvery?: number;
}

/**
 * Keeps each llama.cpp server of a pool in rotation or out of it, and its
 * limit at its slots, by asking the server itself:
 * - `GET /health`: 200 serving, 503 loading its model (out, `loading`),
 *   anything else or no answer (out, `down`);
 * - `GET /props` `total_slots` (else the length of `GET /slots`) when it comes
 *   up, and now and then after: the most generations it runs at once, which
 *   becomes its limiter's limit, so that the rest wait in the gateway's fair
 *   queue, where their time limit has not started yet.
 * Checks use a small connection pool of their own, never the proxied
 * requests' connections, and never overlap for one server.
 */
export class HealthPoller implements MemberChecks {
  private readonly agent = new Agent({ connections: 2, keepAliveTimeout: 10_000 });
  private readonly timers = new Map<Upstream, ReturnType<typeof setTimeout>>();
  private readonly checks = new Map<Upstream, number>();
  /** The upstreams checked: the pool's at start, then those added and not removed since. */
  private readonly polled = new Set<Upstream>();
  private stopped = false;

  constructor(
    private readonly pool: UpstreamPool,
    private readonly options: HealthPollerOptions,
  ) {}

  /** Checks every upstream now, then every `intervalMs`. Resolves when the first round is done. */
  async start(): Promise<void> {
    for (const member of this.pool.members) this.polled.add(member);
    await Promise.all(this.pool.members.map((member) => this.loop(member)));
  }

  /** Polls an upstream added at run time: its first `/health` 200 puts it in rotation. */
  add(member: Upstream): void {
    if (this.stopped || this.polled.has(member)) return;
    this.polled.add(member);
    void this.loop(member);
  }

  /** Stops polling an upstream taken out (a check under way still ends, and is ignored). */
  remove(member: Upstream): void {
    this.polled.delete(member);
    clearTimeout(this.timers.get(member));
    this.timers.delete(member);
    this.checks.delete(member);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    for (const timer of this.timers.values()) clearTimeout(timer);
    this.timers.clear();
    this.polled.clear();
    await this.agent.close().catch(() => undefined);
  }

  /** One check of one upstream, and the next one scheduled. Never throws. */
  async check(member: Upstream): Promise<void> {
    const target = member.target as UpstreamTarget;
    const url = target.url;
    const timeout = Math.max(250, Math.min(2_000, this.options.intervalMs));
    try {
      const response = await request(`${url}/health`, { method: 'GET', signal: AbortSignal.timeout(timeout), dispatcher: this.agent });
      const text = await response.body.text();
      if (response.statusCode === 200) {
        const count = this.checks.get(member) ?? 0;
        this.checks.set(member, count + 1);
        const due = member.health !== 'up' || member.snapshot().slots === undefined || count % (this.options.slotsEvery ?? 30) === 0;
        member.setHealth('up', { slots: due ? await this.slotsOf(target, timeout) : undefined });
      } else if (response.statusCode === 503) {
        member.setHealth('loading', { detail: messageOf(text) ?? 'loading' });
      } else {
        member.setHealth('down', { detail: `GET /health answered ${response.statusCode}` });
      }
    } catch (error) {
      member.setHealth('down', { detail: describe(error) });
    }
  }

  private async loop(member: Upstream): Promise<void> {
    if (this.stopped || !this.polled.has(member)) return;
    await this.check(member);
    if (this.stopped || !this.polled.has(member)) return;
    const timer = setTimeout(() => void this.loop(member), this.options.intervalMs);
    timer.unref();
    this.timers.set(member, timer);
  }

  /** The server's slots: `/props` `total_slots`, else how many `/slots` lists; undefined when neither says. */
  private async slotsOf(target: UpstreamTarget, timeout: number): Promise<number | undefined> {
    const props = await this.getJson(target, '/props', timeout);
    const total = (props as { total_slots?: unknown } | undefined)?.total_slots;
    if (typeof total === 'number' && Number.isInteger(total) && total > 0) return total;
    const slots = await this.getJson(target, '/slots', timeout);
    return Array.isArray(slots) && slots.length > 0 ? slots.length : undefined;
  }

  /** A read of one server, with its own key: another server's would be refused, and must never reach it. */
  private async getJson(target: UpstreamTarget, path: string, timeout: number): Promise<unknown> {
    try {
      const headers = this.options.headers(target);
      const response = await request(`${target.url}${path}`, { method: 'GET', headers, signal: AbortSignal.timeout(timeout), dispatcher: this.agent });
      if (response.statusCode !== 200) {
        await response.body.dump();
        return undefined;
      }
      return await response.body.json();
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
      const response = await request(url, { method: 'GET', headers: this.options.headers(target), signal: AbortSignal.timeout(timeout), dispatcher: this.agent });
      await response.body.dump();
      if (response.statusCode < 500) {
        if (this.waiting.has(member)) member.setHealth('up');
        return true;
      }
      member.setHealth('pending', { detail: `first health check: GET ${new URL(url).pathname} answered ${response.statusCode}` });
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
