import type { Orchestrator } from '../orchestrator.js';
import { OrchestratorConfigError, describeValue } from '../options.js';
import type { RoutePolicy, RouteSettings } from '../policy.js';

/**
 * Methods whose answers the window replays without being asked: the safe ones
 * (RFC 9110 9.2.1), as `CacheInterceptor` caches GET only. Replaying any other
 * method skips its side effect (a second "create order" gets the first one's
 * order), so there a route has to ask for the window with `windowMs` (or
 * `cacheAnswers: true`). Sharing a call in flight stays on for every method:
 * the callers asked at the same moment, and one call answers them all.
 */
export const REPLAYED_METHODS: ReadonlySet<string> = new Set(['GET', 'HEAD', 'OPTIONS']);

/** Whether a route or its class asks for the window on any method. */
function asksForWindow(route: RouteSettings, controller: RouteSettings | undefined): boolean {
  return [route.dedup, controller?.dedup].some((d) => d && (d.windowMs !== undefined || d.cacheAnswers === true));
}

/**
 * One HTTP route's policies: resolved once per route and kept, one for the
 * methods the window replays and one (in-flight sharing only) for the others,
 * unless the route asked for the window.
 */
export class HttpRoute {
  private replayed?: RoutePolicy | null;
  private inFlightOnly?: RoutePolicy | null;

  constructor(
    private readonly orchestrator: Orchestrator,
    /** `Controller.handler`, or the method and path: names the route's breaker and limiter unless they are named. */
    readonly name: string,
    private readonly route: RouteSettings,
    private readonly controller?: RouteSettings,
  ) {}

  /** The policy for a request of this method; `null` when the route asks for nothing. */
  policyFor(method: string): RoutePolicy | null {
    if (REPLAYED_METHODS.has(method.toUpperCase()) || asksForWindow(this.route, this.controller)) {
      if (this.replayed === undefined) this.replayed = this.resolve(this.route);
      return this.replayed;
    }
    if (this.inFlightOnly === undefined) {
      const dedup = this.route.dedup;
      // Only where dedup is on at all: `{ cacheAnswers: false }` on a route would otherwise turn it on.
      const on =
        dedup !== false &&
        (dedup !== undefined || (this.controller?.dedup !== undefined && this.controller.dedup !== false));
      this.inFlightOnly = this.resolve(
        on ? { ...this.route, dedup: { ...(dedup || {}), cacheAnswers: false } } : this.route,
      );
    }
    return this.inFlightOnly;
  }

  private resolve(route: RouteSettings): RoutePolicy | null {
    const policy = this.orchestrator.resolve(route, this.controller, this.name);
    return policy.dedup || policy.breaker || policy.limiter || policy.timeLimits || policy.retry ? policy : null;
  }
}

/** A route's settings merged the way its breaker or limiter sees them (class, then route), without the name. */
function settingsOf(kind: 'breaker' | 'concurrency', route: RouteSettings, controller: RouteSettings | undefined) {
  const r = route[kind];
  const c = controller?.[kind];
  if (r === false || (r === undefined && !c)) return undefined;
  const { name, ...settings } = { ...(c || {}), ...(r || {}) } as Record<string, unknown>;
  return { name: name as string | undefined, settings };
}

/**
 * Checks, when the routes are registered, that every breaker and limiter name
 * stands for one set of settings: a name is shared only when the developer
 * gives it to several routes, and then they must agree (otherwise whichever
 * route ran first would decide for all of them). Settings for a shared name
 * belong in the module's `breakers` / `limits` options.
 */
export class RouteNames {
  private readonly claims = new Map<string, { where: string; settings: Record<string, unknown> }>();
  private readonly owners = new Map<string, object[]>();

  /**
   * The name of a route that names nothing: `base` (`Class.method`, a handler's function name) for the first handler
   * that has it, `base#2`, `base#3` for the next: two handlers that only happen to be called the same (classes of one
   * name in two modules, functions all called `handler`) do not share a breaker. The same handler always gets the
   * same name.
   */
  implicitName(base: string, owner: object): string {
    let owners = this.owners.get(base);
    if (!owners) this.owners.set(base, (owners = []));
    let index = owners.indexOf(owner);
    if (index < 0) index = owners.push(owner) - 1;
    return index === 0 ? base : `${base}#${index + 1}`;
  }

  /** Records the route's breaker and limiter; throws `OrchestratorConfigError` when a name is given other settings. */
  check(name: string, route: RouteSettings, controller?: RouteSettings): void {
    for (const [kind, option, label] of [
      ['breaker', 'breakers', 'breaker'],
      ['concurrency', 'limits', 'concurrency limiter'],
    ] as const) {
      const found = settingsOf(kind, route, controller);
      if (!found) continue;
      const key = `${kind}:${found.name ?? name}`;
      const earlier = this.claims.get(key);
      if (!earlier) {
        this.claims.set(key, { where: name, settings: found.settings });
      } else if (!sameSettings(earlier.settings, found.settings)) {
        throw new OrchestratorConfigError(
          `${name} and ${earlier.where} share the ${label} "${found.name ?? name}" with different settings ` +
            `(${describeValue(earlier.settings)} and ${describeValue(found.settings)}); give each its own name, ` +
            `or set the shared one's settings once in the module's \`${option}: { "${found.name}": { ... } }\``,
        );
      }
    }
  }
}

/**
 * Structural equality of two option values: plain objects and arrays by their
 * contents, functions by identity or by their source (two decorators written
 * with the same arrow function agree), anything else by identity.
 */
export function sameSettings(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (typeof a === 'function' && typeof b === 'function') return a.toString() === b.toString();
  if (typeof a !== 'object' || typeof b !== 'object' || a === null || b === null) return false;
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  const plain = (value: object) => {
    const proto: unknown = Object.getPrototypeOf(value);
    return proto === Object.prototype || proto === null || Array.isArray(value);
  };
  if (!plain(a) || !plain(b)) return false;
  const keysA = Object.keys(a).filter((k) => (a as Record<string, unknown>)[k] !== undefined);
  const keysB = Object.keys(b).filter((k) => (b as Record<string, unknown>)[k] !== undefined);
  if (keysA.length !== keysB.length) return false;
  return keysA.every((k) => sameSettings((a as Record<string, unknown>)[k], (b as Record<string, unknown>)[k]));
}
