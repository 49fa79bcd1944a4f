import { OrchestratorConfigError } from './options.js';

/**
 * Loads an optional peer dependency (prom-client, pino) when the feature that
 * needs it is turned on, and only then: apps that do not use it need not
 * install it. A missing package is a configuration error that says what to install.
 */
export async function loadOptional<T = object>(name: string, feature: string): Promise<T> {
  let loaded: { default?: unknown };
  try {
    loaded = (await import(name)) as { default?: unknown };
  } catch (error) {
    if (
      (error as { code?: string }).code === 'ERR_MODULE_NOT_FOUND' ||
      (error as { code?: string }).code === 'MODULE_NOT_FOUND'
    ) {
      throw new OrchestratorConfigError(`${feature} needs the package "${name}": npm install ${name}`);
    }
    throw error;
  }
  // A CommonJS package seen from ES modules: its exports are under `default` (named ones may be too).
  return (loaded.default && typeof loaded.default === 'object' ? { ...loaded, ...loaded.default } : loaded) as T;
}
