import { ROUTES, routePaths, type GatewayRoute } from '../providers/provider.js';

export interface RouteMatch {
  route: GatewayRoute;
  /** The route's `:param` segments, decoded. */
  params: Record<string, string>;
}

const NO_PARAMS: Record<string, string> = Object.freeze({});

/**
 * Which proxied route a request is for, from its method and path: one Map
 * look-up for fixed paths (every route but one), a short list of patterns for
 * the few with `:param` segments. Paths match exactly, as llama-server and the
 * providers match them.
 */
export class ProxyRoutes {
  private readonly fixed = new Map<string, GatewayRoute>();
  private readonly patterns: Array<{ method: string; pattern: RegExp; names: string[]; route: GatewayRoute }> = [];

  constructor() {
    for (const route of Object.keys(ROUTES) as GatewayRoute[]) {
      const { method } = ROUTES[route];
      for (const path of routePaths(route)) {
        if (!path.includes('/:')) {
          this.fixed.set(`${method} ${path}`, route);
          continue;
        }
        const names: string[] = [];
        const source = path.replace(/:([A-Za-z_]+)/g, (_, name: string) => {
          names.push(name);
          return '([^/]+)';
        });
        this.patterns.push({ method, pattern: new RegExp(`^${source}$`), names, route });
      }
    }
  }

  match(method: string, path: string): RouteMatch | undefined {
    const route = this.fixed.get(`${method} ${path}`);
    if (route) return { route, params: NO_PARAMS };
    for (const p of this.patterns) {
      if (p.method !== method) continue;
      const found = p.pattern.exec(path);
      if (!found) continue;
      const params: Record<string, string> = {};
      try {
        p.names.forEach((name, i) => (params[name] = decodeURIComponent(found[i + 1])));
      } catch {
        return undefined;
      }
      return { route: p.route, params };
    }
    return undefined;
  }
}
