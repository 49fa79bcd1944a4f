import { readFileSync, statSync } from 'node:fs';
import { inspect } from 'node:util';
import { REDACTED, redactor } from '../common/redaction.js';

/**
 * `--upstreams-file`: every upstream of the gateway in one JSON document,
 * each with its own name, key and concurrency ceiling, and for an
 * OpenAI-compatible provider the fallback chains across groups of them:
 *
 * ```json
 * {
 *   "upstreams": [
 *     { "name": "openai-eu", "url": "https://eu.api.openai.com/v1", "apiKeyEnv": "OPENAI_KEY_EU", "concurrency": 256 },
 *     { "name": "openai-us", "url": "https://api.openai.com/v1", "apiKeyEnv": "OPENAI_KEY_US" }
 *   ],
 *   "groups": {
 *     "azure": [{ "name": "azure-se", "url": "https://se.example.openai.azure.com/openai/v1", "apiKeyEnv": "AZURE_OPENAI_KEY" }],
 *     "local": [{ "name": "vllm", "url": "http://10.0.0.5:8000/v1" }]
 *   },
 *   "fallbacks": {
 *     "gpt-4o": [{ "group": "azure" }, { "group": "local", "model": "meta-llama/Llama-3.1-70B-Instruct" }],
 *     "*": [{ "group": "azure" }]
 *   }
 * }
 * ```
 *
 * `upstreams` are the primary pool (what `--upstream` repeated gives).
 * `groups` are pools only a fallback chain sends requests to; `fallbacks`
 * maps a requested model (or `*`: any other) to the groups tried in turn once
 * every primary upstream failed before the first byte, each optionally asked
 * for another model. Keys come from an environment variable (`apiKeyEnv`) or
 * inline (`apiKey`); no message this parser makes ever holds one.
 */

/** One upstream: where it is, and what it is sent. */
export interface UpstreamEntry {
  /** Names its breaker, limiter, metrics, request lines and the `x-orchestrator-upstream` header. */
  name: string;
  /** Base URL, without a trailing slash. */
  url: string;
  /** Its own key: sent instead of the provider key or the client's own. */
  key?: UpstreamKey;
  /**
   * Without a key of its own: whether it is sent the provider key (or the client's), as an `--upstream` is. A
   * fallback group's upstream is not: it is another deployment (often another provider), and the primary's
   * credentials must not reach it.
   */
  inheritsKey: boolean;
  /** Its own ceiling of calls in flight, instead of `--concurrency`. */
  concurrency?: number;
}

/** One step of a fallback chain: a group, and the model it is asked for (absent: the client's). */
export interface FallbackStep {
  group: string;
  model?: string;
}

export interface UpstreamsFile {
  path: string;
  /** The primary pool, in order of preference. */
  upstreams: UpstreamEntry[];
  /** Pools only fallback chains reach, by name. */
  groups: ReadonlyMap<string, UpstreamEntry[]>;
  /** By requested model (`*`: any model not listed): the groups tried in turn. */
  fallbacks: ReadonlyMap<string, FallbackStep[]>;
  /** Reads the file again, with the environment and provider of this read (absent for text parsed inline). */
  read?: () => UpstreamsFile;
}

/**
 * A key read from the upstreams file or the environment. Its value is taken only where a request is authenticated
 * (`reveal`); printed, logged or serialised, it is `[redacted]`, so a configuration object that ends up in a log
 * line or a test failure shows no key.
 */
export class UpstreamKey {
  readonly #value: string;

  constructor(
    value: string,
    /** Where it came from (`env OPENAI_KEY_EU`, `inline`): what messages may say of it. */
    readonly source: string,
  ) {
    this.#value = value;
  }

  reveal(): string {
    return this.#value;
  }

  toString(): string {
    return REDACTED;
  }

  toJSON(): string {
    return REDACTED;
  }

  [inspect.custom](): string {
    return `UpstreamKey(${this.source}: ${REDACTED})`;
  }
}

/** An upstreams file that cannot be used: the message names the field, never a key. */
export class UpstreamsFileError extends Error {
  override name = 'UpstreamsFileError';
}

// A list of upstreams is written by hand: anything larger is not one.
const MAX_FILE_BYTES = 256 * 1024;
const MAX_UPSTREAMS = 64;
const MAX_GROUPS = 32;
const MAX_MODELS = 1_000;
const MAX_CHAIN = 8;
const MAX_URL = 2_048;
const MAX_MODEL = 200;
const MIN_KEY = 8;
const MAX_KEY = 4_096;
const MAX_CONCURRENCY = 100_000;
/** The primary pool's name: a group may not take it. */
export const PRIMARY_POOL = 'upstream';
const NAME = /^[A-Za-z0-9][\w.:@/-]{0,99}$/;
const GROUP = /^[A-Za-z0-9][\w.-]{0,63}$/;
const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]{0,127}$/;
// What an HTTP header value may hold: visible ASCII, no spaces (a key never has one; a pasted newline would split it).
const KEY_CHARS = /^[\x21-\x7e]+$/;
// A field name worth repeating in a message: a short word (a typo of a field, another gateway's field name), not text
// that could be a key pasted in the wrong place (keys are long, and mix in digits).
const SHOWABLE_FIELD = /^[A-Za-z][A-Za-z_]{0,23}$/;
const ENTRY_FIELDS = ['name', 'url', 'apiKeyEnv', 'apiKey', 'concurrency'];

/** Reads and checks the file; throws `UpstreamsFileError` naming the first problem. */
export function readUpstreamsFile(path: string, env: NodeJS.ProcessEnv, provider: string): UpstreamsFile {
  let text: string;
  try {
    const size = statSync(path).size;
    if (size > MAX_FILE_BYTES) throw new UpstreamsFileError(`larger than ${MAX_FILE_BYTES} bytes (${size})`);
    text = readFileSync(path, 'utf8');
  } catch (error) {
    if (error instanceof UpstreamsFileError) throw error;
    const code = (error as { code?: unknown }).code;
    throw new UpstreamsFileError(`cannot be read (${typeof code === 'string' ? code : 'error'})`);
  }
  return { ...parseUpstreamsFile(text, env, provider, path), read: () => readUpstreamsFile(path, env, provider) };
}

/** Parses the file's text (see the module comment); throws `UpstreamsFileError` naming the first problem. */
export function parseUpstreamsFile(
  text: string,
  env: NodeJS.ProcessEnv,
  provider: string,
  path = '(inline)',
): UpstreamsFile {
  try {
    return new Parser(env, provider).parse(text, path);
  } catch (error) {
    if (!(error instanceof UpstreamsFileError)) throw error;
    // A second net: a message is built from names and field paths only, but a name may be text pasted by mistake.
    throw new UpstreamsFileError(redactor.text(error.message));
  }
}

class Parser {
  private readonly names = new Set<string>();

  constructor(
    private readonly env: NodeJS.ProcessEnv,
    private readonly provider: string,
  ) {}

  parse(text: string, path: string): UpstreamsFile {
    if (Buffer.byteLength(text) > MAX_FILE_BYTES) throw new UpstreamsFileError(`larger than ${MAX_FILE_BYTES} bytes`);
    const document = parseJson(text);
    const top = object(
      document,
      'the file',
      'an object with "upstreams" (and, for --provider openai, "groups" and "fallbacks")',
    );
    checkFields(top, ['upstreams', 'groups', 'fallbacks'], 'the file');
    if (top.upstreams === undefined)
      throw new UpstreamsFileError(
        '"upstreams" is missing: list the primary upstreams there, e.g. [{ "url": "http://127.0.0.1:8080" }]',
      );
    const upstreams = this.pool(top.upstreams, 'upstreams', PRIMARY_POOL, true);
    const routed = top.groups !== undefined || top.fallbacks !== undefined;
    if (routed && this.provider !== 'openai') {
      const field = top.groups !== undefined ? 'groups' : 'fallbacks';
      throw new UpstreamsFileError(
        `"${field}": fallback chains rewrite OpenAI request bodies and serve --provider openai only (this gateway is --provider ${this.provider})`,
      );
    }
    const groups = new Map<string, UpstreamEntry[]>();
    if (top.groups !== undefined) {
      const raw = object(top.groups, '"groups"', 'an object of group name -> list of upstreams');
      const entries = Object.entries(raw);
      if (entries.length > MAX_GROUPS) throw new UpstreamsFileError(`"groups": more than ${MAX_GROUPS} groups`);
      for (const [name, members] of entries) {
        const where = `groups[${quote(name)}]`;
        if (!GROUP.test(name))
          throw new UpstreamsFileError(
            `${where}: a group name is 1-64 letters, digits, . _ - (starting with a letter or digit)`,
          );
        if (name === PRIMARY_POOL)
          throw new UpstreamsFileError(`${where}: "${PRIMARY_POOL}" is the primary pool's name; choose another`);
        groups.set(name, this.pool(members, where, name, false));
      }
    }
    const fallbacks = new Map<string, FallbackStep[]>();
    if (top.fallbacks !== undefined) {
      const raw = object(
        top.fallbacks,
        '"fallbacks"',
        'an object of requested model (or "*") -> list of { "group", "model"? }',
      );
      const entries = Object.entries(raw);
      if (entries.length > MAX_MODELS) throw new UpstreamsFileError(`"fallbacks": more than ${MAX_MODELS} models`);
      for (const [model, chain] of entries) fallbacks.set(model, this.chain(model, chain, groups));
    }
    for (const name of groups.keys()) {
      if (![...fallbacks.values()].some((chain) => chain.some((step) => step.group === name))) {
        throw new UpstreamsFileError(
          `groups[${quote(name)}]: no fallback chain uses this group (a group serves only as a fallback)`,
        );
      }
    }
    const total = upstreams.length + [...groups.values()].reduce((n, g) => n + g.length, 0);
    if (total > MAX_UPSTREAMS) throw new UpstreamsFileError(`more than ${MAX_UPSTREAMS} upstreams in all`);
    return { path, upstreams, groups, fallbacks };
  }

  /** A pool's list of upstreams; default names as `--upstream` gives them (`upstream`, or `upstream@host:port`). */
  private pool(value: unknown, where: string, pool: string, primary: boolean): UpstreamEntry[] {
    if (!Array.isArray(value) || value.length === 0)
      throw new UpstreamsFileError(`${where}: must be a non-empty list of upstreams ({ "url": ... })`);
    if (value.length > MAX_UPSTREAMS) throw new UpstreamsFileError(`${where}: more than ${MAX_UPSTREAMS} upstreams`);
    const raws = value.map((item, i) => {
      const at = `${where}[${i}]`;
      const entry = object(item, at, 'an object with a "url"');
      checkFields(entry, ENTRY_FIELDS, at);
      return { entry, at, url: parseUrl(entry.url, at) };
    });
    const urls = raws.map((r) => r.url);
    const hosts = urls.map((url) => new URL(url).host);
    return raws.map(({ entry, at, url }, i) => {
      if (urls.indexOf(url) !== i) throw new UpstreamsFileError(`${at}: "url" is listed twice in this pool`);
      let name: string;
      if (entry.name !== undefined) {
        if (typeof entry.name !== 'string' || !NAME.test(entry.name)) {
          throw new UpstreamsFileError(
            `${at}: "name" must be 1-100 letters, digits or . : @ / _ - (starting with a letter or digit)`,
          );
        }
        name = entry.name;
      } else {
        const parsed = new URL(url);
        const shared = hosts.filter((h) => h === hosts[i]).length > 1;
        name = primary && raws.length === 1 ? PRIMARY_POOL : `${pool}@${parsed.host}${shared ? parsed.pathname : ''}`;
      }
      const named = `${at} (${quote(name)})`;
      if (this.names.has(name))
        throw new UpstreamsFileError(
          `${named}: the name ${quote(name)} is used twice (each upstream has a breaker and a limiter of its own, by name)`,
        );
      this.names.add(name);
      const key = this.key(entry, named);
      let concurrency: number | undefined;
      if (entry.concurrency !== undefined) {
        const n = entry.concurrency;
        if (typeof n !== 'number' || !Number.isInteger(n) || n < 1 || n > MAX_CONCURRENCY) {
          throw new UpstreamsFileError(`${named}: "concurrency" must be a whole number from 1 to ${MAX_CONCURRENCY}`);
        }
        concurrency = n;
      }
      return {
        name,
        url,
        ...(key ? { key } : {}),
        inheritsKey: primary,
        ...(concurrency === undefined ? {} : { concurrency }),
      };
    });
  }

  /** An upstream's own key, from `apiKeyEnv` or `apiKey`; never repeated in a message. */
  private key(entry: Record<string, unknown>, where: string): UpstreamKey | undefined {
    const { apiKeyEnv, apiKey } = entry;
    if (apiKeyEnv !== undefined && apiKey !== undefined)
      throw new UpstreamsFileError(`${where}: give "apiKeyEnv" or "apiKey", not both`);
    let value: string;
    let source: string;
    if (apiKeyEnv !== undefined) {
      if (typeof apiKeyEnv !== 'string' || !ENV_NAME.test(apiKeyEnv)) {
        throw new UpstreamsFileError(
          `${where}: "apiKeyEnv" must name an environment variable (letters, digits and _, not starting with a digit)`,
        );
      }
      const found = Object.prototype.hasOwnProperty.call(this.env, apiKeyEnv) ? this.env[apiKeyEnv] : undefined;
      if (found === undefined || found === '')
        throw new UpstreamsFileError(`${where}: "apiKeyEnv" names ${apiKeyEnv}, which is not set (or is empty)`);
      value = found;
      source = `env ${apiKeyEnv}`;
    } else if (apiKey !== undefined) {
      if (typeof apiKey !== 'string')
        throw new UpstreamsFileError(
          `${where}: "apiKey" must be a string (or use "apiKeyEnv" to read it from the environment)`,
        );
      value = apiKey;
      source = 'inline';
    } else return undefined;
    const from = source === 'inline' ? '"apiKey"' : `the key in ${apiKeyEnv as string}`;
    if (!KEY_CHARS.test(value))
      throw new UpstreamsFileError(
        `${where}: ${from} holds spaces, line breaks or other characters a header cannot carry`,
      );
    if (value.length < MIN_KEY)
      throw new UpstreamsFileError(
        `${where}: ${from} is shorter than ${MIN_KEY} characters (too short to be kept out of logs reliably)`,
      );
    if (value.length > MAX_KEY) throw new UpstreamsFileError(`${where}: ${from} is longer than ${MAX_KEY} characters`);
    return new UpstreamKey(value, source);
  }

  private chain(model: string, value: unknown, groups: ReadonlyMap<string, UpstreamEntry[]>): FallbackStep[] {
    const where = `fallbacks[${quote(model)}]`;
    if (model.length === 0 || model.length > MAX_MODEL || /[\x00-\x1f\x7f]/.test(model)) {
      throw new UpstreamsFileError(`${where}: a model name is 1-${MAX_MODEL} characters, without control characters`);
    }
    if (!Array.isArray(value) || value.length === 0)
      throw new UpstreamsFileError(`${where}: must be a non-empty list of { "group", "model"? }`);
    if (value.length > MAX_CHAIN) throw new UpstreamsFileError(`${where}: more than ${MAX_CHAIN} steps`);
    const seen = new Set<string>();
    return value.map((item, i) => {
      const at = `${where}[${i}]`;
      const step = object(item, at, 'an object { "group", "model"? }');
      checkFields(step, ['group', 'model'], at);
      if (typeof step.group !== 'string') throw new UpstreamsFileError(`${at}: "group" must name one of "groups"`);
      if (!groups.has(step.group)) {
        const known = [...groups.keys()].map(quote).join(', ') || 'none';
        throw new UpstreamsFileError(
          `${at}: "group" ${quote(step.group)} is not defined in "groups" (defined: ${known})`,
        );
      }
      if (seen.has(step.group))
        throw new UpstreamsFileError(`${at}: the group ${quote(step.group)} appears twice in this chain`);
      seen.add(step.group);
      if (step.model === undefined) return { group: step.group };
      const rewritten = step.model;
      if (
        typeof rewritten !== 'string' ||
        rewritten.length === 0 ||
        rewritten.length > MAX_MODEL ||
        /[\x00-\x1f\x7f]/.test(rewritten)
      ) {
        throw new UpstreamsFileError(
          `${at}: "model" must be a model name of 1-${MAX_MODEL} characters, without control characters`,
        );
      }
      return { group: step.group, model: rewritten };
    });
  }
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch (error) {
    // V8's message may quote the text around the error, which may hold a key: only the place is reported.
    const before = text.slice(0, errorOffset(text, error as Error));
    const line = before.split('\n').length;
    const column = before.length - before.lastIndexOf('\n');
    return fail(`is not valid JSON (line ${line}, column ${column})`);
  }
}

/**
 * Where JSON.parse found `text` wrong. Most of V8's messages say (`at position N`); "Unexpected token" does not, and
 * quotes the text instead: then it is where the longest prefix that could still begin a valid document ends (found
 * by bisection, a few parses of a file that is at most 256 KiB).
 */
function errorOffset(text: string, error: Error): number {
  const at = /at position (\d+)/.exec(error.message);
  if (at) return Number(at[1]);
  const viable = (length: number): boolean => {
    try {
      JSON.parse(text.slice(0, length));
      return true;
    } catch (cut) {
      const message = (cut as Error).message;
      const place = /at position (\d+)/.exec(message);
      return message.includes('Unexpected end of JSON input') || (place !== null && Number(place[1]) >= length);
    }
  };
  let low = 0;
  let high = text.length;
  while (low < high) {
    const middle = Math.ceil((low + high) / 2);
    if (viable(middle)) low = middle;
    else high = middle - 1;
  }
  return low;
}

function fail(message: string): never {
  throw new UpstreamsFileError(message);
}

function object(value: unknown, where: string, expected: string): Record<string, unknown> {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new UpstreamsFileError(`${where}: must be ${expected}, got ${describe(value)}`);
  }
  return value as Record<string, unknown>;
}

function checkFields(value: Record<string, unknown>, allowed: readonly string[], where: string): void {
  for (const field of Object.keys(value)) {
    if (allowed.includes(field)) continue;
    const shown = SHOWABLE_FIELD.test(field) ? `"${field}"` : '(its name not shown)';
    throw new UpstreamsFileError(
      `${where}: unknown field ${shown}; the fields are ${allowed.map((f) => `"${f}"`).join(', ')}`,
    );
  }
}

/** A base URL: http(s), no credentials, query or fragment (they would be logged, or lost). */
function parseUrl(value: unknown, where: string): string {
  if (typeof value !== 'string' || value === '')
    throw new UpstreamsFileError(`${where}: "url" must be the upstream's base URL, e.g. "https://api.openai.com/v1"`);
  if (value.length > MAX_URL) throw new UpstreamsFileError(`${where}: "url" is longer than ${MAX_URL} characters`);
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new UpstreamsFileError(`${where}: "url" is not a URL`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:')
    throw new UpstreamsFileError(`${where}: "url" must use http: or https:, got ${quote(url.protocol)}`);
  if (url.username !== '' || url.password !== '')
    throw new UpstreamsFileError(`${where}: "url" must not carry credentials; give the key in "apiKeyEnv"`);
  if (url.search !== '' || url.hash !== '')
    throw new UpstreamsFileError(`${where}: "url" must be a base URL, without a query or fragment`);
  return url.toString().replace(/\/+$/, '');
}

function describe(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'a list';
  return typeof value === 'object' ? 'an object' : `a ${typeof value}`;
}

/** A name from the file as a message shows it: quoted, escaped, bounded. */
function quote(text: string): string {
  return JSON.stringify(text.length > 60 ? `${text.slice(0, 60)}…` : text);
}
