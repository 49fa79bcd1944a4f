/**
 * Keys never leave the gateway in what it says: provider error bodies relayed
 * to a client, error messages, and every log line. Two nets: the keys the
 * gateway itself knows (the provider key, gateway keys, virtual keys listed
 * in clear, the key a request presented), removed by value whatever their
 * shape, and the shapes of the common providers' keys, which catch keys the
 * gateway was never told about (a client's own key quoted back by a provider).
 */

const SHAPES = [
  // OpenAI (sk-..., sk-proj-..., sk-svcacct-...), Anthropic (sk-ant-...), and other dash-prefixed tokens, masked too.
  String.raw`\b(?:sk|pk|rk|key|tok|sess)-[\w*.-]{4,}`,
  // Groq
  String.raw`\bgsk_[\w*]{8,}`,
  // Google (Gemini, Vertex API keys)
  String.raw`\bAIza[\w*-]{8,}`,
  // Hugging Face
  String.raw`\bhf_[\w*]{8,}`,
  // Stripe-style live and test keys (secret, restricted, publishable)
  String.raw`\b[prs]k_(?:live|test)_[\w*]{8,}`,
  // xAI
  String.raw`\bxai-[\w*]{8,}`,
  // AWS access key ids
  String.raw`\bAKIA[0-9A-Z]{16}\b`,
  // JWTs: base64url header and payload (both JSON objects, so both start with eyJ), then the signature.
  String.raw`\beyJ[\w-]{4,}\.[\w-]{4,}\.[\w-]*`,
];
const SHAPE = new RegExp(SHAPES.join('|'), 'g');
// Keys are runs of these characters; a run is looked up whole, and without the punctuation a sentence puts around it.
const TOKEN = /[\w\-.~+/]{8,}/g;
const EDGES = /^[.~+/-]+|[.~+/-]+$/g;
const MIN_LENGTH = 8;
// A JSON string literal; those with an escape in them are the only place a key can hide from a search of the bytes.
const STRING = /"(?:[^"\\\n]|\\.)*"/g;
// An escape that may stand for a character of a key (keys are ASCII; `\u00e9` or a surrogate cannot be one).
const ASCII_ESCAPE = /\\u00[2-7][0-9a-fA-F]|\\\//;
const BACKSLASH_U = Buffer.from('\\u00');
const BACKSLASH_SLASH = Buffer.from('\\/');
const PREFIX = 3;

export const REDACTED = '[redacted]';

/** The start of a key that `Redactor.mayQuote` looks for in each chunk, as text and as bytes. */
export interface KeyPrefix {
  readonly text: string;
  readonly bytes: Buffer;
}

/** A presented key's prefix for `mayQuote` (none for a key too short to be told from ordinary text). */
export function keyPrefixOf(key: string | undefined): KeyPrefix | undefined {
  if (key === undefined || key.length < MIN_LENGTH) return undefined;
  const text = key.slice(0, PREFIX);
  return { text, bytes: Buffer.from(text) };
}

export class Redactor {
  // Looked up per token: the cost does not grow with the number of keys.
  private readonly known = new Set<string>();
  // Keys with characters a token cannot hold are searched for as they are (few, if any).
  private readonly odd: string[] = [];

  /** The keys an ordinary (not error-shaped) chunk is searched for: the provider's keys, never a list of tenants' keys. */
  private readonly watched = new Set<string>();
  /** Their distinct first characters: one search per prefix decides that a chunk quotes none of them. */
  private prefixes: Buffer[] = [];
  private prefixTexts: string[] = [];
  private watchesSlash = false;

  /** Grows whenever keys are added: what was found clean before may quote one now. */
  version = 0;

  /** Keys the gateway holds or accepts; shorter than 8 characters they are too short to tell from words. */
  add(keys: Iterable<string | undefined>): void {
    this.version++;
    for (const key of keys) {
      if (key === undefined || key.length < MIN_LENGTH) continue;
      if (/^[\w\-.~+/]+$/.test(key)) this.known.add(key);
      else if (!this.odd.includes(key)) this.odd.push(key);
    }
  }

  /** Provider keys: known (see `add`), and also looked for in a stream's ordinary events (see `mayQuote`). */
  watch(keys: Iterable<string | undefined>): void {
    const list = [...keys];
    this.add(list);
    for (const key of list) if (key !== undefined && key.length >= MIN_LENGTH) this.watched.add(key);
    this.prefixTexts = [...new Set([...this.watched].map((key) => key.slice(0, PREFIX)))];
    this.prefixes = this.prefixTexts.map((prefix) => Buffer.from(prefix));
    this.watchesSlash = [...this.watched].some((key) => key.includes('/'));
  }

  /**
   * Whether an ordinary chunk may quote a watched key or the presented one: a native search per distinct key prefix
   * and one for an escape. False (nearly always) means the chunk is passed on untouched, never decoded. A stream's
   * chunks are searched with the presented key's prefix made once (`keyPrefixOf`): searching for a string made the
   * search convert it, and slicing it, on every chunk (twice the cost of the search itself).
   */
  mayQuote(chunk: Buffer | string, presented?: string | KeyPrefix): boolean {
    const prefix = typeof presented === 'string' ? keyPrefixOf(presented) : presented;
    if (typeof chunk === 'string') {
      if (chunk.includes('\\u00') || (this.watchesSlash && chunk.includes('\\/'))) return true;
      for (const text of this.prefixTexts) if (chunk.includes(text)) return true;
      return prefix !== undefined && chunk.includes(prefix.text);
    }
    if (chunk.indexOf(BACKSLASH_U) >= 0 || (this.watchesSlash && chunk.indexOf(BACKSLASH_SLASH) >= 0)) return true;
    for (const bytes of this.prefixes) if (chunk.indexOf(bytes) >= 0) return true;
    return prefix !== undefined && chunk.indexOf(prefix.bytes) >= 0;
  }

  /**
   * Text that holds JSON (an error body, SSE events) without any key it quotes, however its JSON escapes write the
   * key (`sk\u002d...` is the key again once a client parses it): each string literal with an escape is decoded,
   * redacted and re-encoded, then the bytes are redacted as `text` does. `shapes: false` removes only keys the
   * gateway knows (an ordinary event: a model's text may well hold something shaped like a key).
   */
  json(text: string, also: readonly (string | undefined)[] = [], shapes = true): string {
    let out = text;
    if (out.includes('\\') && ASCII_ESCAPE.test(out)) {
      out = out.replace(STRING, (literal) => {
        if (!literal.includes('\\')) return literal;
        let decoded: unknown;
        try {
          decoded = JSON.parse(literal);
        } catch {
          return literal;
        }
        if (typeof decoded !== 'string') return literal;
        const clean = this.text(decoded, also, shapes);
        return clean === decoded ? literal : JSON.stringify(clean);
      });
    }
    return this.text(out, also, shapes);
  }

  /** `json` on bytes: the very Buffer unless it quotes a key. */
  jsonBytes(body: Buffer, also: readonly (string | undefined)[] = [], shapes = true): Buffer {
    const text = body.toString('utf8');
    const clean = this.json(text, also, shapes);
    return clean === text ? body : Buffer.from(clean);
  }

  /** The text without any key it quotes; `also` are keys known to this request (the one it presented). */
  text(text: string, also: readonly (string | undefined)[] = [], shapes = true): string {
    let out = text;
    for (const key of also)
      if (key !== undefined && key.length >= MIN_LENGTH && out.includes(key)) out = out.split(key).join(REDACTED);
    for (const key of this.odd) if (out.includes(key)) out = out.split(key).join(REDACTED);
    if (this.known.size > 0) {
      out = out.replace(TOKEN, (token) => {
        if (this.known.has(token)) return REDACTED;
        const trimmed = token.replace(EDGES, '');
        return trimmed !== token && this.known.has(trimmed) ? token.replace(trimmed, REDACTED) : token;
      });
    }
    return shapes ? out.replace(SHAPE, REDACTED) : out;
  }

  /** The bytes as they are, unless they quote a key. */
  bytes(body: Buffer, also: readonly (string | undefined)[] = []): Buffer {
    const text = body.toString('utf8');
    const clean = this.text(text, also);
    return clean === text ? body : Buffer.from(clean);
  }
}

/** The process's one redactor: the logger and the exception filter share what it knows. */
export const redactor = new Redactor();
