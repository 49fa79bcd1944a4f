/** A configuration problem, reported to the user without a stack trace. */
export class ConfigError extends Error {
  override name = 'ConfigError';
}
