import { createHash } from 'node:crypto';
import { Orchestrator } from 'nest-prompt-orchestrator/core';
import { lowLevelCalls } from 'nest-prompt-orchestrator/low-level';
import { table } from './report.js';

export interface KeyCostRow {
  /** Size of the body as JSON, in KB (1024 bytes). */
  kb: number;
  messages: number;
  iterations: number;
  /** dedupKey() (canonical serialisation with sorted keys + one SHA-256) per call. */
  dedupKeyUs: number;
  /** dedupKey() given the body's bytes as sent (`rawBody`, as the gateway does): one hash pass and a depth walk. */
  rawKeyUs: number;
  /** SHA-256 of the body's JSON bytes, already serialised: the cost of one hash pass. */
  sha256Us: number;
  /** JSON.stringify + SHA-256: one serialisation and one hash pass. */
  stringifySha256Us: number;
}

export interface KeyCostResult {
  rows: KeyCostRow[];
}

const SIZES_KB = [1, 4, 16, 64, 256, 1024];

/** A conversation of ~1 KB turns, alternating user and assistant, with varied text, as large as asked. */
function conversation(kb: number): { body: Record<string, unknown>; messages: number } {
  const messages: Array<{ role: string; content: string }> = [
    { role: 'system', content: 'You are a careful assistant.' },
  ];
  const body = { model: 'mock-model', temperature: 0.2, max_tokens: 256, messages };
  const target = kb * 1024;
  let size = JSON.stringify(body).length;
  for (let i = 0; size < target; i++) {
    const words: string[] = [];
    for (let w = 0; words.join(' ').length < 900; w++) words.push(`word${(i * 7919 + w * 104729) % 100_000}`);
    const content = `Turn ${i}: ${words.join(' ')}`.slice(0, Math.max(1, Math.min(900, target - size - 40)));
    messages.push({ role: i % 2 === 0 ? 'user' : 'assistant', content });
    size = JSON.stringify(body).length;
  }
  return { body, messages: messages.length };
}

/** Mean µs per call of `fn`, repeated for at least `budgetMs` (and at least 5 times) after a short warm-up. */
function time(fn: () => unknown, budgetMs: number): { us: number; iterations: number } {
  for (let i = 0; i < 3; i++) fn();
  let iterations = 0;
  const start = performance.now();
  let elapsed = 0;
  while ((elapsed < budgetMs || iterations < 5) && iterations < 1_000_000) {
    fn();
    iterations++;
    elapsed = performance.now() - start;
  }
  return { us: (elapsed * 1000) / iterations, iterations };
}

export function runKeyCost(budgetMs = 300): KeyCostResult {
  // The core's key function; the orchestrator it comes with is never used (nothing of it runs, nothing to close).
  const keys = lowLevelCalls(new Orchestrator());
  const rows = SIZES_KB.map((kb): KeyCostRow => {
    const { body, messages } = conversation(kb);
    const json = JSON.stringify(body);
    const bytes = Buffer.from(json);
    const input = { method: 'POST', url: '/v1/chat/completions', body, credential: 'Bearer sk-bench-0000' };
    const key = time(() => keys.dedupKey(input), budgetMs);
    const raw = time(() => keys.dedupKey({ ...input, rawBody: bytes }, { maxDepth: 128 }), budgetMs);
    const sha = time(() => createHash('sha256').update(bytes).digest('base64url'), budgetMs);
    const both = time(() => createHash('sha256').update(JSON.stringify(body)).digest('base64url'), budgetMs);
    return {
      kb: bytes.length / 1024,
      messages,
      iterations: key.iterations,
      dedupKeyUs: key.us,
      rawKeyUs: raw.us,
      sha256Us: sha.us,
      stringifySha256Us: both.us,
    };
  });
  return { rows };
}

export function keyCostTable(result: KeyCostResult): string {
  const rows = result.rows.map((r) => [
    `${r.kb.toFixed(1)} KB (${r.messages} messages)`,
    r.dedupKeyUs.toFixed(1),
    (r.dedupKeyUs / r.kb).toFixed(2),
    (r.rawKeyUs / r.kb).toFixed(2),
    (r.sha256Us / r.kb).toFixed(2),
    (r.stringifySha256Us / r.kb).toFixed(2),
    `${(r.dedupKeyUs / r.sha256Us).toFixed(1)}x`,
    `${(r.dedupKeyUs / r.stringifySha256Us).toFixed(2)}x`,
  ]);
  return [
    '== keycost: dedupKey() of a conversation vs one hash pass over the same bytes',
    table(
      [
        'body',
        'dedupKey us',
        'dedupKey us/KB',
        'with rawBody us/KB',
        'sha256 us/KB',
        'stringify+sha256 us/KB',
        'vs sha256',
        'vs stringify+sha256',
      ],
      rows,
    ),
    '   dedupKey = canonical JSON (sorted keys) written into SHA-256; with rawBody = the bytes as sent hashed, the parsed body walked for depth;' +
      ' sha256 = the body bytes hashed once; stringify+sha256 = JSON.stringify then hash.',
  ].join('\n');
}
