import type { ProviderKind } from '../common/apis.js';

/** One flag of the command line: its environment variable, its `--help` line, and how it is given. */
export interface FlagSpec {
  env?: string | ((provider: ProviderKind) => string);
  help: string;
  value?: string;
  boolean?: boolean;
  /** May be given more than once (the environment variable then holds a comma list). */
  multiple?: boolean;
}

/** What `parseArgs` made of the command line, by flag name. */
export type FlagValues = Record<string, string | string[] | boolean | undefined>;

/** A boolean environment variable that says yes: 1, true, yes or on, in any case. */
export function isTrue(value: string | undefined): boolean {
  return value !== undefined && ['1', 'true', 'yes', 'on'].includes(value.toLowerCase());
}
