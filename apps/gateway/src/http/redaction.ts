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

export const REDACTED = '[redacted]';

export class Redactor {
  // Looked up per token: the cost does not grow with the number of keys.
  private readonly known = new Set<string>();
  // Keys with characters a token cannot hold are searched for as they are (few, if any).
  private readonly odd: string[] = [];

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

  /** The text without any key it quotes; `also` are keys known to this request (the one it presented). */
  text(text: string, also: readonly (string | undefined)[] = []): string {
    let out = text;
    for (const key of also) if (key !== undefined && key.length >= MIN_LENGTH && out.includes(key)) out = out.split(key).join(REDACTED);
    for (const key of this.odd) if (out.includes(key)) out = out.split(key).join(REDACTED);
    if (this.known.size > 0) {
      out = out.replace(TOKEN, (token) => {
        if (this.known.has(token)) return REDACTED;
        const trimmed = token.replace(EDGES, '');
        return trimmed !== token && this.known.has(trimmed) ? token.replace(trimmed, REDACTED) : token;
      });
    }
    return out.replace(SHAPE, REDACTED);
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
