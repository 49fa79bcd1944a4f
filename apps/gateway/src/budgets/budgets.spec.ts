import { describe, expect, it } from '@jest/globals';
import { mkdtempSync, readdirSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { calcPrice } from '@pydantic/genai-prices';
import { firstValueFrom, from, toArray } from 'rxjs';
import { parseSpendCap } from '../config/spend-cap.js';
import { parsePrice, parsePrices } from '../config/prices-file.js';
import { PriceTable } from './prices.js';
import { RequestLog, type RequestLogEntry } from './request-log.js';
import { SpendLedger } from './spend-ledger.js';
import { periodKey } from './spend-periods.js';
import { tapUsage, usageOfJson, withStreamUsage } from './usage.js';
import { KeysFileError, parseKeys } from '../config/keys-file.js';

describe('keys documents', () => {
  it('reads {} as a file that lists no keys (every virtual key is refused), not as one to refuse', () => {
    expect(parseKeys('{}')).toEqual([]);
    expect(parseKeys(' { }\n')).toEqual([]);
  });

  it('reads keys and hashed keys with their limits', () => {
    const entries = parseKeys(
      JSON.stringify({
        'sk-plain-key-1': { name: 'a', requestsPerMinute: 5, maxSpend: '3/month' },
        [`sha256:${'ab'.repeat(32)}`]: { name: 'b' },
      }),
    );
    expect(entries.map((e) => e.key)).toEqual([
      { name: 'a', requestsPerMinute: 5, tokensPerMinute: undefined, maxSpend: { usd: 3, period: 'month' } },
      { name: 'b', requestsPerMinute: undefined, tokensPerMinute: undefined, maxSpend: undefined },
    ]);
  });

  it.each([
    ['', 'not valid JSON'],
    ['[]', 'must be a JSON object'],
    ['{"sk-secret-123": 5}', 'entry 1: must be an object'],
    ['{"sk-secret-123": {}}', 'entry 1: "name" must be'],
    ['{"sk-secret-123": {"name": "a b"}}', 'entry 1: "name" must be'],
    ['{"sk-secret-123": {"name": "a"}, "sk-secret-456": {"name": "a"}}', 'the name "a" is used twice'],
    ['{"sk-secret-123": {"name": "a", "requestsPerMinute": 0}}', '"requestsPerMinute" must be a whole number'],
    ['{"sk-secret-123": {"name": "a", "requestsPerMinute": "9"}}', '"requestsPerMinute" must be a whole number'],
    ['{"sk-secret-123": {"name": "a", "maxSpend": "lots"}}', '"maxSpend" must look like'],
    ['{"sk-secret-123": {"name": "a", "owner": true}}', 'unknown field "owner"'],
    ['{"sk-secret-123": {"name": "a", "admin": "yes"}}', '"admin" must be true or false'],
    ['{"sk-secret-123": {"name": "a", "__proto__": {"x": 1}}}', 'unknown field "__proto__"'],
    [`{"sk-secret-123": {"name": "a"}, "${'x'.repeat(2_000_000)}": {"name": "b"}}`, 'larger than'],
  ])('refuses %j naming the problem, never the key', (text, problem) => {
    let error: unknown;
    try {
      parseKeys(text.slice(0, 3_000_000));
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(KeysFileError);
    expect((error as Error).message).toContain(problem);
    expect((error as Error).message).not.toContain('sk-secret');
  });
});

describe('prices', () => {
  const million = { input: 1_000_000, cached: 0, output: 1_000_000 };

  it('prices models from the bundled catalogue as providers spell them: any case, dated snapshots, fine-tunes', () => {
    const table = new PriceTable({ upstreamUrl: 'https://api.openai.com/v1' });
    // gpt-4o-mini: 0.15 in, 0.075 cached, 0.6 out.
    expect(table.costOf('gpt-4o-mini-2024-07-18', { input: 1_000_000, cached: 400_000, output: 100_000 })).toBeCloseTo(
      0.6 * 0.15 + 0.4 * 0.075 + 0.1 * 0.6,
      9,
    );
    for (const name of ['gpt-4o', 'GPT-4o', 'gpt-4o-2024-08-06'])
      expect(table.costOf(name, million)).toBeCloseTo(12.5, 9);
    for (const name of ['o1', 'gpt-4-turbo', 'ft:gpt-4o-mini:org::id', 'ft:gpt-4o-mini-2024-07-18:org:custom:abc123']) {
      expect(table.sourceOf(name)).toBe('catalogue');
      expect(table.costOf(name, million)).toBeGreaterThan(0);
    }
    // A fine-tune costs more than its base.
    expect(table.costOf('ft:gpt-4o-mini:org::id', million)).toBeGreaterThan(table.costOf('gpt-4o-mini', million));
    // A known provider's address keeps other providers' models out.
    expect(table.sourceOf('claude-3-5-sonnet-20241022')).toBeUndefined();
    expect(
      new PriceTable({ upstreamUrl: 'https://api.anthropic.com' }).costOf('claude-3-5-sonnet-20241022', million),
    ).toBeCloseTo(18, 9);
    // Any other address: the name says whose model it is.
    expect(
      new PriceTable({ upstreamUrl: 'http://127.0.0.1:9999/v1' }).costOf('claude-3-5-sonnet-20241022', million),
    ).toBeCloseTo(18, 9);
  });

  it("costs what the catalogue's own calculation says, long-context tiers and cached input included", () => {
    const table = new PriceTable();
    for (const model of ['gpt-4o', 'claude-sonnet-4-5', 'claude-3-5-haiku-20241022', 'o1', 'gemini-2.5-pro']) {
      for (const usage of [
        { input: 1_000, cached: 0, output: 500 },
        { input: 300_000, cached: 100_000, output: 4_000 },
      ]) {
        const expected = calcPrice(
          { input_tokens: usage.input, cache_read_tokens: usage.cached, output_tokens: usage.output },
          model,
        );
        expect(table.costOf(model, usage)).toBeCloseTo(expected!.total_price, 12);
      }
    }
  });

  it('has no price for an unknown model unless the operator gives one; a llama.cpp server costs 0', () => {
    expect(new PriceTable().sourceOf('my-local-gguf')).toBeUndefined();
    expect(new PriceTable().costOf('my-local-gguf', million)).toBe(0);
    expect(new PriceTable({ defaultPrice: { input: 1, output: 2 } }).costOf('my-local-gguf', million)).toBe(3);
    expect(new PriceTable({ localModels: true }).sourceOf('my-local-gguf')).toBe('local');
  });

  it("puts the operator's prices on top: exact name, then longest prefix, then the catalogue, then *", () => {
    const table = new PriceTable({
      operator: {
        'GPT-4o': { input: 1, output: 1 },
        'my-vllm': { input: 2, output: 2, maxOutput: 100 },
        '*': { input: 9, output: 9 },
      },
    });
    expect(table.costOf('gpt-4o', million)).toBe(2);
    expect(table.costOf('gpt-4o-2024-08-06', million)).toBe(2);
    expect(table.costOf('my-vllm-7b', million)).toBe(4);
    expect(table.maxOutputOf('my-vllm-7b')).toBe(100);
    expect(table.costOf('gpt-4o-mini', million)).toBe(2);
    expect(table.costOf('o1', million)).toBeCloseTo(75, 9);
    expect(table.costOf('something-else', million)).toBe(18);
  });

  it('parses --default-price', () => {
    expect(parsePrice('3/15', 'x')).toEqual({ input: 3, output: 15, cached: undefined });
    expect(parsePrice(' 0.5 / 2 / 0.1 ', 'x')).toEqual({ input: 0.5, output: 2, cached: 0.1 });
    expect(() => parsePrice('3', 'x')).toThrow('INPUT/OUTPUT');
  });

  it.each([
    ['nope', 'not valid JSON'],
    ['[1]', 'must be a JSON object'],
    ['{"m": {"input": -1, "output": 0}}', '"input" must be a number'],
    ['{"m": {"input": 1}}', '"output" must be a number'],
    ['{"m": {"input": 1, "output": "2"}}', '"output" must be a number'],
    ['{"m": {"input": 1, "output": 2, "extra": 3}}', 'unknown field'],
    ['{"": {"input": 1, "output": 2}}', 'model names must be'],
    ['{"m": null}', 'must be an object'],
    ['{"m": {"input": 1, "output": 2, "maxOutput": 0}}', '"maxOutput" must be a whole number'],
  ])('refuses the price table %j', (text, problem) => {
    expect(() => parsePrices(text)).toThrow(problem);
  });

  it('reads a __proto__ model name as a name, not a prototype', () => {
    const table = parsePrices('{"__proto__": {"input": 1, "output": 2}}');
    expect(new PriceTable({ operator: table }).costOf('__proto__-model', { input: 1e6, output: 1e6, cached: 0 })).toBe(
      3,
    );
    expect(({} as Record<string, unknown>).input).toBeUndefined();
  });

  it('parses spend caps', () => {
    expect(parseSpendCap('50/day', 'x')).toEqual({ usd: 50, period: 'day' });
    expect(parseSpendCap(' $0.5 / Month ', 'x')).toEqual({ usd: 0.5, period: 'month' });
    expect(() => parseSpendCap('50/week', 'x')).toThrow('must look like');
  });
});

describe('usage', () => {
  it('reads the last usage object of a JSON answer, not a "usage" inside its text', () => {
    const answer = {
      choices: [{ message: { content: 'the "usage": {"prompt_tokens": 999} field' } }],
      usage: { prompt_tokens: 12, completion_tokens: 5, prompt_tokens_details: { cached_tokens: 4 } },
      system_fingerprint: 'x',
    };
    expect(usageOfJson(Buffer.from(JSON.stringify(answer)))).toEqual({ input: 12, output: 5, cached: 4 });
    expect(
      usageOfJson(
        Buffer.from('{"type":"message","usage":{"input_tokens":10,"cache_read_input_tokens":20,"output_tokens":3}}'),
      ),
    ).toEqual({ input: 30, output: 3, cached: 20 });
    expect(usageOfJson(Buffer.from('{"data":[],"usage":{"prompt_tokens":8,"total_tokens":8}}'))).toEqual({
      input: 8,
      output: 0,
      cached: 0,
    });
    expect(usageOfJson(Buffer.from('{"choices":[]}'))).toBeUndefined();
    expect(usageOfJson(Buffer.from('{"usage":{"prompt_tokens":'))).toBeUndefined();
  });

  const chunk = (o: object) => `data: ${JSON.stringify(o)}\n\n`;
  const stream = [
    chunk({ choices: [{ delta: { content: 'hi' } }], usage: null }),
    chunk({ choices: [{ delta: { content: ' there' } }], usage: null }),
    chunk({ choices: [], usage: { prompt_tokens: 3, completion_tokens: 2 } }),
    'data: [DONE]\n\n',
  ].join('');

  it.each([1, 7, 64, 10_000])(
    'reads a stream split every %i characters; strips the added usage chunk only when asked',
    async (size) => {
      const pieces = stream.match(new RegExp(`[\\s\\S]{1,${size}}`, 'g'))!;
      for (const strip of [false, true]) {
        let usage: unknown;
        const out = (await firstValueFrom(tapUsage(from(pieces), strip, (u) => (usage = u)).pipe(toArray()))).join('');
        expect(usage).toEqual({ input: 3, output: 2, cached: 0 });
        expect(out.includes('"choices":[]')).toBe(!strip);
        expect(out).toContain('data: [DONE]');
        expect(out).toContain('" there"');
      }
    },
  );

  it("reads llama.cpp's own counts (tokens_evaluated / tokens_predicted), whole and streamed", async () => {
    const whole = {
      content: 'a "tokens_predicted": 999 in the text',
      stop: true,
      tokens_predicted: 7,
      tokens_evaluated: 11,
      timings: { predicted_ms: 3 },
    };
    expect(usageOfJson(Buffer.from(JSON.stringify(whole)))).toEqual({ input: 11, output: 7, cached: 0 });
    let usage: unknown;
    const llamaStream = [
      chunk({ content: 'hi', stop: false }),
      chunk({ content: '', stop: true, tokens_predicted: 4, tokens_evaluated: 9 }),
    ];
    await firstValueFrom(tapUsage(from(llamaStream), false, (u) => (usage = u)).pipe(toArray()));
    expect(usage).toEqual({ input: 9, output: 4, cached: 0 });
  });

  it('asks for stream usage only where the client streams and did not ask', () => {
    expect(withStreamUsage({ stream: true, model: 'm' })).toEqual({
      stream: true,
      model: 'm',
      stream_options: { include_usage: true },
    });
    expect(withStreamUsage({ stream: true, stream_options: { include_usage: true } })).toBeUndefined();
    expect(withStreamUsage({ stream: false })).toBeUndefined();
    expect(withStreamUsage({ stream: true, stream_options: 'weird' })).toBeUndefined();
  });
});

describe('the request log', () => {
  const entry = (i: number): RequestLogEntry => ({
    time: new Date(0).toISOString(),
    reqId: `req-${i}`,
    tenant: 'abcd',
    key: `key-${i}`,
    outcome: 'miss',
    route: 'chat',
    model: 'm',
    status: 200,
    tokensIn: 1,
    tokensOut: 1,
    cost: 0,
    saved: 0,
    latencyMs: 1,
  });

  it('rotates at its size and keeps N older files, never losing a line in between', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'npo-log-'));
    const file = join(dir, 'requests.jsonl');
    const lineBytes = JSON.stringify(entry(100)).length + 1;
    const log = new RequestLog(file, lineBytes * 10, 2);
    for (let i = 100; i < 150; i++) log.write(entry(i));
    await log.close();
    expect(readdirSync(dir).sort()).toEqual(['requests.jsonl', 'requests.jsonl.1', 'requests.jsonl.2']);
    const keys = (name: string) =>
      readFileSync(join(dir, name), 'utf8')
        .trim()
        .split('\n')
        .map((l) => (JSON.parse(l) as RequestLogEntry).key);
    // 50 lines, 10 per file: the newest 30 are kept, in order, across the files.
    expect([...keys('requests.jsonl.2'), ...keys('requests.jsonl.1'), ...keys('requests.jsonl')]).toEqual(
      Array.from({ length: 30 }, (_, i) => `key-${120 + i}`),
    );
    for (const name of readdirSync(dir))
      expect(readFileSync(join(dir, name)).length).toBeLessThanOrEqual(lineBytes * 10);
  });

  it('drops and counts lines beyond its buffer instead of growing', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'npo-log-'));
    const log = new RequestLog(join(dir, 'r.jsonl'), 1024 * 1024 * 1024, 1);
    // Written synchronously, faster than any disk: the buffer (4 MiB) fills.
    for (let i = 0; i < 40_000; i++) log.write(entry(i));
    expect(log.droppedLines).toBeGreaterThan(0);
    await log.close();
    const lines = readFileSync(join(dir, 'r.jsonl'), 'utf8').trim().split('\n');
    expect(lines.length + log.droppedLines).toBe(40_000);
  });
});

describe('the spend ledger', () => {
  it('keeps spend per UTC day and month, per key and in all, and reads it back from its file', () => {
    const dir = mkdtempSync(join(tmpdir(), 'npo-spend-'));
    let now = Date.parse('2026-05-31T23:59:00Z');
    const file = join(dir, 'spend.json');
    const ledger = new SpendLedger({ file, now: () => now });
    ledger.record('alpha', 5e9, 0);
    ledger.record(undefined, 1e9, 2e9);
    ledger.close();
    const again = new SpendLedger({ file, now: () => now });
    expect(again.snapshot()).toEqual({
      [`${periodKey('day', now)}:*`]: { spentNano: 6e9, savedNano: 2e9 },
      [`${periodKey('day', now)}:alpha`]: { spentNano: 5e9, savedNano: 0 },
      [`${periodKey('month', now)}:*`]: { spentNano: 6e9, savedNano: 2e9 },
      [`${periodKey('month', now)}:alpha`]: { spentNano: 5e9, savedNano: 0 },
    });
    // A new day and month: nothing spent yet.
    now += 2 * 60_000;
    expect(again.snapshot()).toEqual({});
  });
});

describe('holds against a cap', () => {
  const cap = { usd: 10, period: 'day' as const };

  it('lets requests in while spent + held is under the cap, and a settled or released hold makes room again', async () => {
    const ledger = new SpendLedger();
    const caps = [{ scope: '*', cap }];
    const first = await ledger.reserve(caps, 6e9, 60_000);
    const second = await ledger.reserve(caps, 6e9, 60_000);
    // 12 of 10 held: the second passed the cap by one request's hold, and nothing more gets in.
    expect('hold' in first && 'hold' in second).toBe(true);
    expect(await ledger.reserve(caps, 1e9, 60_000)).toEqual({ refused: { index: 0, spentNano: 0, heldNano: 12e9 } });
    void ledger.settle('hold' in first ? first.hold : undefined, undefined, 2e9);
    void ledger.settle('hold' in second ? second.hold : undefined, undefined, 0);
    expect(ledger.heldBy('*', cap)).toBe(0);
    const third = await ledger.reserve(caps, 1e9, 60_000);
    expect('hold' in third).toBe(true);
    expect(await ledger.spent('*', cap)).toBe(2e9);
  });

  it('names the cap that refuses, and lets a hold that never settled expire', async () => {
    let now = Date.parse('2026-06-01T10:00:00Z');
    const ledger = new SpendLedger({ now: () => now });
    const caps = [
      { scope: '*', cap: { usd: 100, period: 'month' as const } },
      { scope: 'alpha', cap },
    ];
    expect('hold' in (await ledger.reserve(caps, 10e9, 1_000))).toBe(true);
    expect(await ledger.reserve(caps, 1e9, 1_000)).toEqual({ refused: { index: 1, spentNano: 0, heldNano: 10e9 } });
    now += 1_001;
    expect('hold' in (await ledger.reserve(caps, 1e9, 1_000))).toBe(true);
  });
});
