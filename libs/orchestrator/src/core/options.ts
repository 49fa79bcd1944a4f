/**
 * Options are declared once per field: a capability's interface (with its
 * JSDoc) and one `Fields` table giving each field its check and default. The
 * table's type is derived from the interface, so a field added to one and not
 * the other does not compile. Validation and defaults are read off the table.
 *
 * Written by hand rather than with a schema library: the checks are a handful
 * of number/boolean/function tests, and the messages must name the option the
 * way the user wrote it (`@Orchestrate() on Class.method: concurrency.limit`).
 */

/** Thrown at start-up (or decoration) time for options that cannot work. */
export class OrchestratorConfigError extends Error {
  constructor(message: string) {
    super(`nest-prompt-orchestrator: ${message}`);
    this.name = 'OrchestratorConfigError';
  }
}

export type Check =
  | 'positiveInt'
  | 'positive'
  | 'nonNegativeInt'
  | 'nonNegative'
  | 'boolean'
  | 'function'
  | 'string'
  | 'object'
  | 'array'
  | 'booleanOrObject';

export interface Field<T> {
  check: Check;
  default?: T;
}

/** One entry per field of `O`, each with its check and (where there is one) its default. */
export type Fields<O> = { readonly [K in keyof Required<O>]: Field<NonNullable<O[K]>> };

/** `O` with every field that has a default in `F` made required. */
export type WithDefaults<O, F extends Fields<O>> = {
  [K in keyof O as F[K] extends { default: unknown } ? K : never]-?: NonNullable<O[K]>;
} & {
  [K in keyof O as F[K] extends { default: unknown } ? never : K]?: O[K];
};

export function describeValue(value: unknown): string {
  if (typeof value === 'function') return 'a function';
  try {
    return JSON.stringify(value) ?? String(value);
  } catch {
    return String(value);
  }
}

const NUMERIC: readonly Check[] = ['positiveInt', 'nonNegativeInt', 'positive', 'nonNegative'];

const EXPECTED: Record<Check, string> = {
  positiveInt: 'a positive integer',
  nonNegativeInt: 'an integer >= 0',
  positive: 'a positive number',
  nonNegative: 'a number >= 0',
  boolean: 'true or false',
  function: 'a function',
  string: 'a non-empty string',
  object: 'an object',
  array: 'an array',
  booleanOrObject: 'true, false or an object',
};

function passes(value: unknown, check: Check): boolean {
  switch (check) {
    case 'positiveInt':
      return Number.isInteger(value) && (value as number) > 0;
    case 'nonNegativeInt':
      return Number.isInteger(value) && (value as number) >= 0;
    case 'positive':
      return typeof value === 'number' && Number.isFinite(value) && value > 0;
    case 'nonNegative':
      return typeof value === 'number' && Number.isFinite(value) && value >= 0;
    case 'boolean':
      return typeof value === 'boolean';
    case 'function':
      return typeof value === 'function';
    case 'string':
      return typeof value === 'string' && value.length > 0;
    case 'object':
      return typeof value === 'object' && value !== null && !Array.isArray(value);
    case 'array':
      return Array.isArray(value);
    case 'booleanOrObject':
      return typeof value === 'boolean' || passes(value, 'object');
  }
}

/** Throws `OrchestratorConfigError` naming the first field of `value` that is unknown or fails its check. */
export function checkFields<O>(path: string, value: unknown, fields: Fields<O>): void {
  if (value === undefined) return;
  if (!passes(value, 'object'))
    throw new OrchestratorConfigError(`${path} must be an object, got ${describeValue(value)}`);
  const table = fields as Record<string, Field<unknown>>;
  for (const [name, fieldValue] of Object.entries(value as object)) {
    const field = table[name];
    if (!field)
      throw new OrchestratorConfigError(`unknown option ${path}.${name} (known: ${Object.keys(table).join(', ')})`);
    if (fieldValue !== undefined && !passes(fieldValue, field.check)) {
      // Environment variables and config files give strings: say so, as `"30000"` looks right at a glance.
      const hint =
        typeof fieldValue === 'string' &&
        NUMERIC.includes(field.check) &&
        fieldValue.trim() !== '' &&
        Number.isFinite(Number(fieldValue))
          ? ' (a string: convert values read from the environment with Number())'
          : '';
      throw new OrchestratorConfigError(
        `${path}.${name} must be ${EXPECTED[field.check]}, got ${describeValue(fieldValue)}${hint}`,
      );
    }
  }
}

/** The defaults of `fields`, overlaid by each of `layers` in turn (later layers win, field by field). */
export function withDefaults<O, F extends Fields<O>>(
  fields: F,
  ...layers: Array<Partial<O> | undefined>
): WithDefaults<O, F> {
  const resolved: Record<string, unknown> = {};
  for (const [name, field] of Object.entries(fields as Record<string, Field<unknown>>)) {
    if (field.default !== undefined) resolved[name] = field.default;
  }
  for (const layer of layers) {
    if (!layer) continue;
    for (const [name, value] of Object.entries(layer)) if (value !== undefined) resolved[name] = value;
  }
  return resolved as WithDefaults<O, F>;
}
