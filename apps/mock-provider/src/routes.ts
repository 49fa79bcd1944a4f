import { ANTHROPIC_ROUTES } from './anthropic.routes.js';
import { LLAMA_ROUTES } from './llama.routes.js';
import { OPENAI_ROUTES } from './openai.routes.js';
import type { RouteDefinition } from './route-definition.js';

export const HEALTH_PATHS: ReadonlySet<string> = new Set(['/health', '/v1/health']);

const ROUTE_TABLE = new Map<string, RouteDefinition>();
for (const route of [...OPENAI_ROUTES, ...ANTHROPIC_ROUTES, ...LLAMA_ROUTES]) {
  for (const path of route.paths) ROUTE_TABLE.set(`${route.method} ${path}`, route);
}

/** Like llama.cpp, a known path asked with the wrong method is simply not found. */
export function findRoute(method: string | undefined, path: string): RouteDefinition | undefined {
  return ROUTE_TABLE.get(`${method ?? ''} ${path}`);
}
