import { readFileSync, statSync } from 'node:fs';
import { keyDigest } from '../common/credentials.js';
import { parseSpendCap, type SpendCap } from './spend-cap.js';

/** One client key the gateway accepts, and what it may do. The key itself is never kept, only its SHA-256. */
export interface VirtualKey {
  name: string;
  requestsPerMinute?: number;
  tokensPerMinute?: number;
  maxSpend?: SpendCap;
  /** May sign in to the status page (which shows every caller's traffic, hashed). */
  admin?: boolean;
}

/** One key of a keys document: what the virtual keys compare and enforce. */
export interface KeyEntry {
  digest: Buffer;
  key: VirtualKey;
  /** The key itself when the file lists it in clear: only so that it can be removed from anything said or logged. */
  plain?: string;
}

// A keys file is a short list written by hand: anything larger is not one.
const MAX_FILE_BYTES = 1024 * 1024;
const MAX_KEYS = 10_000;
const NAME = /^[\w.:@-]{1,64}$/;
const HASHED = /^sha256:([0-9a-f]{64})$/i;

/** A keys file (or ORCHESTRATOR_KEYS) that cannot be used; the message names the problem, never a key. */
export class KeysFileError extends Error {
  override name = 'KeysFileError';
}

/**
 * Parses a keys document: `{ "<client key>" | "sha256:<hex of the key>": { "name", "requestsPerMinute"?,
 * "tokensPerMinute"?, "maxSpend"?: "20/day", "admin"?: true } }`; `{}` lists no keys (every one is refused). Throws `KeysFileError` naming the first problem by the
 * entry's position or name (never by its key).
 */
export function parseKeys(text: string): KeyEntry[] {
  if (Buffer.byteLength(text) > MAX_FILE_BYTES) throw new KeysFileError(`larger than ${MAX_FILE_BYTES} bytes`);
  let document: unknown;
  try {
    document = JSON.parse(text);
  } catch (error) {
    throw new KeysFileError(`not valid JSON (${(error as Error).message.replace(/"[^"]*"/g, '"…"').slice(0, 120)})`);
  }
  if (typeof document !== 'object' || document === null || Array.isArray(document)) {
    throw new KeysFileError('must be a JSON object mapping each key to { "name": ... }');
  }
  const entries: KeyEntry[] = [];
  const names = new Set<string>();
  const seen = new Set<string>();
  const items = Object.entries(document as Record<string, unknown>);
  if (items.length > MAX_KEYS) throw new KeysFileError(`more than ${MAX_KEYS} keys`);
  items.forEach(([secret, value], index) => {
    const where = `entry ${index + 1}`;
    if (secret.length < 8) throw new KeysFileError(`${where}: a key must be at least 8 characters`);
    if (typeof value !== 'object' || value === null || Array.isArray(value))
      throw new KeysFileError(`${where}: must be an object with a "name"`);
    const v = value as Record<string, unknown>;
    if (typeof v.name !== 'string' || !NAME.test(v.name))
      throw new KeysFileError(`${where}: "name" must be 1-64 letters, digits or . : @ _ -`);
    if (names.has(v.name)) throw new KeysFileError(`${where}: the name "${v.name}" is used twice`);
    names.add(v.name);
    for (const field of Object.keys(v)) {
      if (!['name', 'requestsPerMinute', 'tokensPerMinute', 'maxSpend', 'admin'].includes(field)) {
        throw new KeysFileError(`key "${v.name}": unknown field "${field.slice(0, 40)}"`);
      }
    }
    const limit = (field: 'requestsPerMinute' | 'tokensPerMinute') => {
      const n = v[field];
      if (n === undefined) return undefined;
      if (typeof n !== 'number' || !Number.isInteger(n) || n < 1)
        throw new KeysFileError(`key "${String(v.name)}": "${field}" must be a whole number of at least 1`);
      return n;
    };
    let maxSpend: SpendCap | undefined;
    if (v.maxSpend !== undefined) {
      if (typeof v.maxSpend !== 'string')
        throw new KeysFileError(`key "${v.name}": "maxSpend" must be a string like "20/day"`);
      try {
        maxSpend = parseSpendCap(v.maxSpend, `key "${v.name}": "maxSpend"`);
      } catch (error) {
        throw new KeysFileError((error as Error).message);
      }
    }
    if (v.admin !== undefined && typeof v.admin !== 'boolean')
      throw new KeysFileError(`key "${v.name}": "admin" must be true or false`);
    const hashed = HASHED.exec(secret);
    const digest = hashed ? Buffer.from(hashed[1], 'hex') : keyDigest(secret);
    const hex = digest.toString('hex');
    if (seen.has(hex)) throw new KeysFileError(`key "${v.name}": the same key is listed twice`);
    seen.add(hex);
    const key: VirtualKey = {
      name: v.name,
      requestsPerMinute: limit('requestsPerMinute'),
      tokensPerMinute: limit('tokensPerMinute'),
      maxSpend,
    };
    if (v.admin === true) key.admin = true;
    entries.push({ plain: hashed ? undefined : secret, digest, key });
  });
  // `{}` is a file that says "no keys": every virtual key is revoked (a file that cannot be read or parsed never is).
  return entries;
}

/** Reads and parses a keys file; throws `KeysFileError` naming the file and the first problem. */
export function readKeysFile(file: string): KeyEntry[] {
  let text: string;
  try {
    if (statSync(file).size > MAX_FILE_BYTES) throw new KeysFileError(`${file}: larger than ${MAX_FILE_BYTES} bytes`);
    text = readFileSync(file, 'utf8');
  } catch (error) {
    if (error instanceof KeysFileError) throw error;
    throw new KeysFileError(`${file}: cannot be read (${(error as NodeJS.ErrnoException).code ?? 'error'})`);
  }
  try {
    return parseKeys(text);
  } catch (error) {
    throw new KeysFileError(`${file}: ${(error as Error).message}`);
  }
}

/** Throws `KeysFileError` if the keys (a file, else inline JSON) cannot be used. */
export function checkKeys(source: { file?: string; json?: string }): void {
  if (source.file !== undefined) readKeysFile(source.file);
  else parseKeys(source.json ?? '');
}
