import { describe, expect, it } from '@jest/globals';
import { createHash } from 'node:crypto';
import { BodyTooDeepError, bytesKey, dedupKey, keyHead, type DedupKeyInput } from './dedup-key.js';

const CREDENTIAL = 'Bearer sk-live-0123456789abcdefTENANT-A';

const base: DedupKeyInput = {
  method: 'POST',
  url: '/v1/chat/completions',
  credential: CREDENTIAL,
  body: {
    model: 'gpt-4o-mini',
    temperature: 0.2,
    messages: [
      { role: 'system', content: 'Be brief.' },
      { role: 'user', content: 'Hello' },
    ],
    response_format: { type: 'json_object', schema: { a: 1, b: [1, 2, { c: null }] } },
  },
};

function deepObject(depth: number): unknown {
  let value: unknown = { leaf: true };
  for (let i = 0; i < depth; i++) value = { nested: value };
  return value;
}

function deepArray(depth: number): unknown {
  let value: unknown = [];
  for (let i = 0; i < depth; i++) value = [value];
  return value;
}

describe('dedupKey', () => {
  it('is stable for the same input', () => {
    expect(dedupKey(base)).toBe(dedupKey(structuredClone(base)));
  });

  it('does not depend on the field order of the body, at any depth', () => {
    const reordered: DedupKeyInput = {
      credential: CREDENTIAL,
      url: '/v1/chat/completions',
      method: 'POST',
      body: {
        response_format: { schema: { b: [1, 2, { c: null }], a: 1 }, type: 'json_object' },
        messages: [
          { content: 'Be brief.', role: 'system' },
          { content: 'Hello', role: 'user' },
        ],
        temperature: 0.2,
        model: 'gpt-4o-mini',
      },
    };
    expect(dedupKey(reordered)).toBe(dedupKey(base));
  });

  it.each<[string, (input: DedupKeyInput) => DedupKeyInput]>([
    ['the method', (i) => ({ ...i, method: 'PUT' })],
    ['the url', (i) => ({ ...i, url: '/v1/completions' })],
    ['the query string', (i) => ({ ...i, url: '/v1/chat/completions?stream=true' })],
    ['the credential', (i) => ({ ...i, credential: 'Bearer sk-live-0123456789abcdefTENANT-B' })],
    ['a missing credential', (i) => ({ ...i, credential: undefined })],
    ['a sampling parameter', (i) => ({ ...i, body: { ...(i.body as object), temperature: 0.3 } })],
    ['the model', (i) => ({ ...i, body: { ...(i.body as object), model: 'gpt-4o' } })],
    ['an added field', (i) => ({ ...i, body: { ...(i.body as object), tools: [] } })],
    [
      'one message',
      (i) => ({
        ...i,
        body: {
          ...(i.body as object),
          messages: [
            { role: 'system', content: 'Be brief.' },
            { role: 'user', content: 'Hello!' },
          ],
        },
      }),
    ],
    [
      'the order of messages',
      (i) => ({
        ...i,
        body: {
          ...(i.body as object),
          messages: [
            { role: 'user', content: 'Hello' },
            { role: 'system', content: 'Be brief.' },
          ],
        },
      }),
    ],
    [
      'a value deep inside',
      (i) => ({
        ...i,
        body: {
          ...(i.body as object),
          response_format: { type: 'json_object', schema: { a: 1, b: [1, 2, { c: 0 }] } },
        },
      }),
    ],
    ['a number turned into a string', (i) => ({ ...i, body: { ...(i.body as object), temperature: '0.2' } })],
  ])('changes when %s changes', (_name, change) => {
    expect(dedupKey(change(base))).not.toBe(dedupKey(base));
  });

  it('keeps method, url, credential and body apart (no ambiguity at their borders)', () => {
    const keys = new Set([
      dedupKey({ method: 'POST', url: '/a', credential: 'b', body: 'c' }),
      dedupKey({ method: 'POST', url: '/ab', credential: '', body: 'c' }),
      dedupKey({ method: 'POST', url: '/a', credential: '', body: 'bc' }),
      dedupKey({ method: 'POST', url: '/a', credential: 'b', body: undefined }),
      dedupKey({ method: 'POST', url: '/a', credential: 'b', body: '' }),
      dedupKey({ method: 'POST', url: '/a', credential: 'b', body: null }),
      dedupKey({ method: 'POST', url: '/a', credential: 'b', body: {} }),
      dedupKey({ method: 'POST', url: '/a', credential: 'b', body: [] }),
    ]);
    expect(keys.size).toBe(8);
  });

  it('never contains the credential, nor its parts', () => {
    const key = dedupKey(base);
    expect(key).not.toContain(CREDENTIAL);
    expect(key).not.toContain('sk-live');
    expect(key).not.toContain('TENANT');
    expect(key).not.toContain(Buffer.from(CREDENTIAL).toString('base64url').slice(0, 12));
    // A fixed-size digest: nothing of the input is carried over.
    expect(key).toMatch(/^[A-Za-z0-9_-]{43}$/);
  });

  describe('hostile bodies do not throw', () => {
    it.each<[string, () => unknown]>([
      ['an object nested 100,000 deep', () => deepObject(100_000)],
      [
        'an array nested 100,000 deep (what JSON.parse accepts from a 200 KB body)',
        () => JSON.parse('['.repeat(100_000) + ']'.repeat(100_000)),
      ],
      ['an array nested 10,000 deep', () => deepArray(10_000)],
      [
        'a cycle',
        () => {
          const a: Record<string, unknown> = { name: 'a' };
          a.self = a;
          a.list = [a, { back: a }];
          return a;
        },
      ],
      ['a bigint', () => ({ n: 12345678901234567890n, list: [1n, 2n] })],
      ['a 1 MB string', () => ({ prompt: 'x'.repeat(1024 * 1024) })],
      ['a 1 MB key', () => ({ ['k'.repeat(1024 * 1024)]: 1 })],
      [
        'a toJSON that throws',
        () => ({
          toJSON: () => {
            throw new Error('no');
          },
        }),
      ],
      [
        'a getter that throws',
        () =>
          Object.defineProperty({}, 'boom', {
            enumerable: true,
            get: () => {
              throw new Error('no');
            },
          }),
      ],
      ['symbols and functions', () => ({ [Symbol('s')]: 1, f: () => 1, u: undefined })],
      ['a null-prototype object', () => Object.assign(Object.create(null), { a: 1 })],
      ['NaN and infinities', () => ({ a: NaN, b: Infinity, c: -0 })],
    ])('%s', (_name, makeBody) => {
      const body = makeBody();
      let key: string | undefined;
      expect(
        () => (key = dedupKey({ method: 'POST', url: '/v1/chat/completions', credential: CREDENTIAL, body })),
      ).not.toThrow();
      expect(typeof key).toBe('string');
      expect(key!.length).toBeGreaterThan(0);
      expect(key).not.toContain('sk-live');
    });

    it('bigints and cycles still give a stable key that tells bodies apart', () => {
      const cyclic = () => {
        const a: Record<string, unknown> = { v: 1 };
        a.self = a;
        return a;
      };
      const input = (body: unknown): DedupKeyInput => ({ method: 'POST', url: '/x', body });
      expect(dedupKey(input(cyclic()))).toBe(dedupKey(input(cyclic())));
      expect(dedupKey(input({ n: 1n }))).toBe(dedupKey(input({ n: 1n })));
      expect(dedupKey(input({ n: 1n }))).not.toBe(dedupKey(input({ n: 2n })));
    });

    it('two deep bodies that differ only at the bottom never share a key', () => {
      const deep = (leaf: string) => {
        let value: unknown = leaf;
        for (let i = 0; i < 20_000; i++) value = [value];
        return value;
      };
      const input = (body: unknown): DedupKeyInput => ({ method: 'POST', url: '/x', body });
      expect(dedupKey(input(deep('a')))).not.toBe(dedupKey(input(deep('b'))));
    });
  });

  describe('maxDepth: the key walk doubles as a depth check', () => {
    const input = (body: unknown): DedupKeyInput => ({ method: 'POST', url: '/x', body });

    it('accepts a body exactly maxDepth levels deep and refuses one level more', () => {
      expect(typeof dedupKey(input(deepObject(127)), { maxDepth: 128 })).toBe('string'); // 128 objects deep
      expect(() => dedupKey(input(deepObject(128)), { maxDepth: 128 })).toThrow(BodyTooDeepError);
      expect(() => dedupKey(input(JSON.parse('['.repeat(200) + ']'.repeat(200))), { maxDepth: 128 })).toThrow(
        'nested more than 128 levels',
      );
    });

    it('without maxDepth, a deep body never throws (it gets a key of its own)', () => {
      const deep = deepArray(5_000);
      expect(dedupKey(input(deep))).not.toBe(dedupKey(input(deep)));
    });
  });

  it('two bodies share a key exactly when their sorted JSON is the same', () => {
    const sortDeep = (value: unknown): unknown =>
      Array.isArray(value)
        ? value.map(sortDeep)
        : typeof value === 'object' && value !== null
          ? Object.fromEntries(
              Object.keys(value)
                .sort()
                .map((k) => [k, sortDeep((value as Record<string, unknown>)[k])]),
            )
          : value;
    let seed = 7;
    const random = () => (seed = (seed * 16807) % 2147483647) / 2147483647;
    const make = (depth: number): unknown => {
      const r = random();
      if (depth > 3 || r < 0.3) return [1, -0, 0.1, 'a', 'é"\\n', true, null, '', 2e21][Math.floor(random() * 9)];
      if (r < 0.6) return Array.from({ length: Math.floor(random() * 3) }, () => make(depth + 1));
      return Object.fromEntries(
        Array.from({ length: Math.floor(random() * 3) }, () => [
          ['a', 'b', 'ab', ''][Math.floor(random() * 4)],
          make(depth + 1),
        ]),
      );
    };
    const bodies = Array.from({ length: 400 }, () => make(0));
    for (let i = 0; i < bodies.length; i++) {
      const j = (i * 7 + 3) % bodies.length;
      const same = JSON.stringify(sortDeep(bodies[i])) === JSON.stringify(sortDeep(bodies[j]));
      expect(
        dedupKey({ method: 'POST', url: '/x', body: bodies[i] }) ===
          dedupKey({ method: 'POST', url: '/x', body: bodies[j] }),
      ).toBe(same);
    }
  });
  describe('rawBody: the bytes as sent are the key', () => {
    const withBytes = (text: string, extra: Partial<DedupKeyInput> = {}): DedupKeyInput => ({
      method: 'POST',
      url: '/v1/chat/completions',
      credential: CREDENTIAL,
      body: JSON.parse(text) as unknown,
      rawBody: Buffer.from(text),
      ...extra,
    });
    const compact = JSON.stringify(base.body);

    it('the same bytes give the same key', () => {
      expect(dedupKey(withBytes(compact))).toBe(dedupKey(withBytes(compact)));
    });

    it('the same JSON with other whitespace or another field order is another key (a miss, never a shared answer)', () => {
      const spaced = JSON.stringify(base.body, null, 2);
      const { model, ...rest } = base.body as Record<string, unknown>;
      const reordered = JSON.stringify({ ...rest, model });
      expect(dedupKey(withBytes(spaced))).not.toBe(dedupKey(withBytes(compact)));
      expect(dedupKey(withBytes(reordered))).not.toBe(dedupKey(withBytes(compact)));
    });

    it('hashes the bytes, not the parsed body', () => {
      // A caller passing both must pass the same request; the bytes decide.
      expect(dedupKey(withBytes(compact, { body: { other: true } }))).toBe(dedupKey(withBytes(compact)));
      expect(dedupKey(withBytes(compact, { rawBody: Buffer.from(`${compact} `) }))).not.toBe(
        dedupKey(withBytes(compact)),
      );
    });

    it('still keeps method, url, credential and scope apart', () => {
      const keys = new Set([
        dedupKey(withBytes(compact)),
        dedupKey(withBytes(compact, { method: 'PUT' })),
        dedupKey(withBytes(compact, { url: '/v1/completions' })),
        dedupKey(withBytes(compact, { credential: 'Bearer other' })),
        dedupKey(withBytes(compact, { scope: 'model-b' })),
      ]);
      expect(keys.size).toBe(5);
    });

    it('still bounds the depth of the parsed body', () => {
      const ok = JSON.stringify(deepObject(127));
      const tooDeep = JSON.stringify(deepObject(128));
      expect(typeof dedupKey(withBytes(ok), { maxDepth: 128 })).toBe('string');
      expect(() => dedupKey(withBytes(tooDeep), { maxDepth: 128 })).toThrow(BodyTooDeepError);
      const arrays = '['.repeat(200) + ']'.repeat(200);
      expect(() => dedupKey(withBytes(arrays), { maxDepth: 128 })).toThrow('nested more than 128 levels');
    });
  });

  it('a large body is hashed in pieces with the same key as one string would give', () => {
    const messages = Array.from({ length: 600 }, (_, i) => ({
      role: i % 2 ? 'assistant' : 'user',
      content: `turn ${i} ${'é'.repeat(300)}`,
    }));
    const body = { model: 'm', messages };
    const sorted = JSON.stringify({
      messages: messages.map((m) => ({ content: m.content, role: m.role })),
      model: 'm',
    });
    const expected = createHash('sha256').update(`POST\n/x\n\n`).update(sorted).digest('base64url');
    expect(dedupKey({ method: 'POST', url: '/x', body })).toBe(expected);
  });

  it('bytes are keyed by SHA-256 of the head and the bytes, whatever their size and however they came in', () => {
    // Small bodies in one piece are hashed in one call, others through a Hash object: both must give this key.
    const head = keyHead({
      method: 'POST',
      url: '/v1/chat/completions?q=é',
      credential: 'key=équipe',
      scope: 'model-ü',
    });
    for (const size of [0, 1, 3 * 1024 - 1, 3 * 1024, 3 * 1024 + 1, 20_000]) {
      const body = Buffer.from(Array.from({ length: size }, (_, i) => (i * 31 + 7) % 256));
      const expected = createHash('sha256').update(head).update(body).digest('base64url');
      expect(bytesKey(head, [body])).toBe(expected);
      expect(bytesKey(head, size === 0 ? [] : [body.subarray(0, size >> 1), body.subarray(size >> 1)])).toBe(expected);
      expect(
        dedupKey({
          method: 'POST',
          url: '/v1/chat/completions?q=é',
          credential: 'key=équipe',
          scope: 'model-ü',
          body: null,
          rawBody: body,
        }),
      ).toBe(expected);
    }
  });
});
