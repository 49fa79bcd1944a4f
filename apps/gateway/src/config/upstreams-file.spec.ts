import { describe, expect, it } from '@jest/globals';
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { inspect } from 'node:util';
import { ConfigError, helpText, parseGatewayConfig } from './gateway-config.js';
import { UpstreamsFileError, parseUpstreamsFile, readUpstreamsFile, type UpstreamsFile } from './upstreams-file.js';

// Keys of no provider's shape: only the gateway's own care keeps them out of what it says.
const KEY_EU = 'eukey0123456789abcdefXYZ';
const KEY_INLINE = 'inlinekey9876543210qwerty';
const ENV = { OPENAI_KEY_EU: KEY_EU, EMPTY_KEY: '' };
const KEYS = [KEY_EU, KEY_INLINE];

const parse = (document: unknown, env: NodeJS.ProcessEnv = ENV, provider = 'openai'): UpstreamsFile =>
  parseUpstreamsFile(typeof document === 'string' ? document : JSON.stringify(document), env, provider);

/** The error a document gets; the test fails if it parses. Its message never holds a key. */
function problem(document: unknown, env: NodeJS.ProcessEnv = ENV, provider = 'openai'): string {
  try {
    parse(document, env, provider);
  } catch (error) {
    expect(error).toBeInstanceOf(UpstreamsFileError);
    const message = (error as Error).message;
    for (const key of KEYS) expect(message).not.toContain(key);
    expect(message).not.toContain('\n');
    return message;
  }
  throw new Error(`parsed: ${JSON.stringify(document).slice(0, 200)}`);
}

const one = (entry: Record<string, unknown>) => ({ upstreams: [{ url: 'http://10.0.0.1:8000/v1', ...entry }] });
const VALID = {
  upstreams: [
    { name: 'eu', url: 'https://eu.example.com/v1/', apiKeyEnv: 'OPENAI_KEY_EU', concurrency: 64 },
    { url: 'https://us.example.com/v1', apiKey: KEY_INLINE },
  ],
  groups: {
    backup: [{ url: 'http://10.0.0.5:8000/v1' }, { name: 'backup-2', url: 'http://10.0.0.6:8000', apiKey: KEY_INLINE }],
  },
  fallbacks: { 'gpt-4o': [{ group: 'backup', model: 'llama-3.1-70b' }], '*': [{ group: 'backup' }] },
};

describe('the upstreams file', () => {
  it('gives each upstream its name, URL, key and ceiling, and each requested model its chain', () => {
    const file = parse(VALID);
    expect(
      file.upstreams.map(({ name, url, inheritsKey, concurrency }) => ({ name, url, inheritsKey, concurrency })),
    ).toEqual([
      { name: 'eu', url: 'https://eu.example.com/v1', inheritsKey: true, concurrency: 64 },
      { name: 'upstream@us.example.com', url: 'https://us.example.com/v1', inheritsKey: true, concurrency: undefined },
    ]);
    expect(file.upstreams.map((u) => u.key?.reveal())).toEqual([KEY_EU, KEY_INLINE]);
    expect(file.upstreams.map((u) => u.key?.source)).toEqual(['env OPENAI_KEY_EU', 'inline']);
    // A fallback group's upstreams are never sent the provider key or the client's: only their own, if any.
    expect(
      file.groups.get('backup')!.map(({ name, inheritsKey, key }) => ({ name, inheritsKey, key: key?.reveal() })),
    ).toEqual([
      { name: 'backup@10.0.0.5:8000', inheritsKey: false, key: undefined },
      { name: 'backup-2', inheritsKey: false, key: KEY_INLINE },
    ]);
    expect(Object.fromEntries(file.fallbacks)).toEqual({
      'gpt-4o': [{ group: 'backup', model: 'llama-3.1-70b' }],
      '*': [{ group: 'backup' }],
    });
  });

  it('names a sole primary upstream `upstream`, as one --upstream is named', () => {
    expect(parse(one({})).upstreams[0].name).toBe('upstream');
    expect(
      parse({ upstreams: [{ url: 'http://a:1' }, { url: 'http://a:1/v2' }] }).upstreams.map((u) => u.name),
    ).toEqual(['upstream@a:1/', 'upstream@a:1/v2']);
  });

  it('never shows a key when the parsed file is printed, logged or serialised', () => {
    const file = parse(VALID);
    const shown = [
      JSON.stringify(file),
      inspect(file, { depth: 10 }),
      String(file.upstreams[0].key),
      `${String(file.upstreams[1].key)}`,
      JSON.stringify({ ...file.upstreams[0] }),
    ];
    for (const text of shown) for (const key of KEYS) expect(text).not.toContain(key);
    expect(inspect(file.upstreams[0].key)).toBe('UpstreamKey(env OPENAI_KEY_EU: [redacted])');
  });

  describe('malformed JSON is reported by place, never by its text', () => {
    it.each([
      [
        'a missing comma after an inline key',
        `{"upstreams":[{"url":"http://a:1" "apiKey":"${KEY_INLINE}"}]}`,
        /not valid JSON \(line 1, column \d+\)/,
      ],
      [
        'an unquoted key',
        `{\n  "upstreams": [{ "url": "http://a:1", "apiKey": ${KEY_INLINE} }]\n}`,
        /not valid JSON \(line 2, column 50\)/,
      ],
      [
        'a trailing comma',
        `{\n  "upstreams": [{ "url": "http://a:1", "apiKey": "${KEY_INLINE}", }]\n}`,
        /not valid JSON \(line 2, column 79\)/,
      ],
      [
        'a truncated file',
        `{"upstreams":[{"url":"http://a:1","apiKey":"${KEY_INLINE}`,
        /not valid JSON \(line 1, column 70\)/,
      ],
      ['an empty file', '', /not valid JSON \(line 1, column 1\)/],
      ['a byte-order mark', `\ufeff{"upstreams":[]}`, /not valid JSON \(line 1, column 1\)/],
    ])('%s', (_what, text, expected) => {
      expect(problem(text)).toMatch(expected);
    });
  });

  it.each([
    ['a list', [], /the file: must be an object with "upstreams"/],
    ['a string', '"http://a:1"', /the file: must be an object .* got a string/],
    ['null', 'null', /got null/],
    ['no upstreams', { groups: {} }, /"upstreams" is missing/],
    ['an empty list of upstreams', { upstreams: [] }, /upstreams: must be a non-empty list/],
    ['upstreams as an object', { upstreams: { url: 'http://a:1' } }, /upstreams: must be a non-empty list/],
    [
      'an upstream that is a string',
      { upstreams: ['http://a:1'] },
      /upstreams\[0\]: must be an object with a "url", got a string/,
    ],
  ])('refuses %s', (_what, document, expected) => {
    expect(problem(document)).toMatch(expected);
  });

  describe('unknown fields are refused, naming the field only when it is a plain name', () => {
    it.each([
      [
        'at the top',
        { ...one({}), fallback: {} },
        /the file: unknown field "fallback"; the fields are "upstreams", "groups", "fallbacks"/,
      ],
      ['in an upstream (a typo)', one({ api_key: KEY_INLINE }), /upstreams\[0\]: unknown field "api_key"/],
      [
        'in an upstream (a key pasted as a field name)',
        one({ [KEY_INLINE]: true }),
        /upstreams\[0\]: unknown field \(its name not shown\)/,
      ],
      [
        'in an upstream (a key of letters only)',
        one({ abcdefghijklmnopqrstuvwxyzABCDEF: true }),
        /upstreams\[0\]: unknown field \(its name not shown\)/,
      ],
      ['in an upstream (a field name with a line break)', one({ 'url\nx': 1 }), /unknown field \(its name not shown\)/],
      [
        'in a fallback step',
        { ...VALID, fallbacks: { 'gpt-4o': [{ group: 'backup', weight: 2 }] } },
        /fallbacks\["gpt-4o"\]\[0\]: unknown field "weight"/,
      ],
    ])('%s', (_where, document, expected) => {
      expect(problem(document)).toMatch(expected);
    });
  });

  describe('keys', () => {
    it.each([
      [
        'a variable that is not set',
        one({ apiKeyEnv: 'OPENAI_KEY_US' }),
        /upstreams\[0\] \("upstream"\): "apiKeyEnv" names OPENAI_KEY_US, which is not set \(or is empty\)/,
      ],
      [
        'a variable that is empty',
        one({ apiKeyEnv: 'EMPTY_KEY' }),
        /names EMPTY_KEY, which is not set \(or is empty\)/,
      ],
      [
        'a variable name that is not one',
        one({ apiKeyEnv: 'OPENAI KEY' }),
        /"apiKeyEnv" must name an environment variable/,
      ],
      ['a variable name that is not a string', one({ apiKeyEnv: 7 }), /"apiKeyEnv" must name an environment variable/],
      [
        'an inherited property as a variable name',
        one({ apiKeyEnv: 'constructor' }),
        /names constructor, which is not set/,
      ],
      [
        'both a variable and an inline key',
        one({ apiKeyEnv: 'OPENAI_KEY_EU', apiKey: KEY_INLINE }),
        /give "apiKeyEnv" or "apiKey", not both/,
      ],
      ['an inline key that is not a string', one({ apiKey: 12345678901 }), /"apiKey" must be a string/],
      [
        'an inline key with a line break',
        one({ apiKey: `${KEY_INLINE}\n` }),
        /"apiKey" holds spaces, line breaks or other characters a header cannot carry/,
      ],
      ['an inline key with a space', one({ apiKey: `Bearer ${KEY_INLINE}` }), /"apiKey" holds spaces/],
      ['an inline key with a non-ASCII character', one({ apiKey: `${KEY_INLINE}é` }), /"apiKey" holds spaces/],
      ['a short key', one({ apiKey: 'short' }), /"apiKey" is shorter than 8 characters/],
      ['a huge key', one({ apiKey: 'k'.repeat(5_000) }), /"apiKey" is longer than 4096 characters/],
    ])('refuses %s', (_what, document, expected) => {
      expect(problem(document)).toMatch(expected);
    });

    it('refuses a variable whose key a header cannot carry, naming the variable, not the key', () => {
      const message = problem(one({ apiKeyEnv: 'OPENAI_KEY_EU' }), { OPENAI_KEY_EU: `${KEY_EU}\r\nx-injected: 1` });
      expect(message).toMatch(/the key in OPENAI_KEY_EU holds spaces, line breaks/);
    });
  });

  describe('names and URLs', () => {
    it.each([
      [
        'the same name twice',
        {
          upstreams: [
            { name: 'a', url: 'http://a:1' },
            { name: 'a', url: 'http://b:1' },
          ],
        },
        /upstreams\[1\] \("a"\): the name "a" is used twice/,
      ],
      [
        'a primary name reused in a group',
        { ...VALID, groups: { backup: [{ name: 'eu', url: 'http://c:1' }] } },
        /groups\["backup"\]\[0\] \("eu"\): the name "eu" is used twice/,
      ],
      [
        'the same URL twice in one pool',
        { upstreams: [{ url: 'http://a:1/v1' }, { url: 'http://a:1/v1/' }] },
        /upstreams\[1\]: "url" is listed twice in this pool/,
      ],
      ['a name with a space', one({ name: 'my upstream' }), /"name" must be 1-100 letters/],
      ['a name that is not a string', one({ name: 3 }), /"name" must be 1-100 letters/],
      ['a missing URL', { upstreams: [{ name: 'a' }] }, /upstreams\[0\]: "url" must be the upstream's base URL/],
      ['a URL that is not one', one({ url: 'not a url' }), /"url" is not a URL/],
      ['an ftp URL', one({ url: 'ftp://a/v1' }), /"url" must use http: or https:, got "ftp:"/],
      [
        'a URL with a query',
        one({ url: 'http://a:1/v1?key=1' }),
        /"url" must be a base URL, without a query or fragment/,
      ],
      ['a huge URL', one({ url: `http://a/${'x'.repeat(3_000)}` }), /"url" is longer than 2048 characters/],
    ])('refuses %s', (_what, document, expected) => {
      expect(problem(document)).toMatch(expected);
    });

    it('refuses credentials in a URL without repeating them', () => {
      const message = problem(one({ url: `https://user:${KEY_INLINE}@a.example.com/v1` }));
      expect(message).toMatch(/"url" must not carry credentials; give the key in "apiKeyEnv"/);
    });
  });

  it.each([
    [0, /"concurrency" must be a whole number from 1 to 100000/],
    [1.5, /"concurrency" must be a whole number/],
    ['8', /"concurrency" must be a whole number/],
    [1e9, /"concurrency" must be a whole number/],
  ])('refuses a concurrency of %j', (value, expected) => {
    expect(problem(one({ concurrency: value }))).toMatch(expected);
  });

  describe('groups and fallbacks', () => {
    const chain = (fallbacks: unknown, groups: unknown = VALID.groups) => ({
      upstreams: VALID.upstreams,
      groups,
      fallbacks,
    });

    it.each([
      [
        'a group no chain uses',
        chain({ 'gpt-4o': [{ group: 'backup' }] }, { ...VALID.groups, spare: [{ url: 'http://d:1' }] }),
        /groups\["spare"\]: no fallback chain uses this group/,
      ],
      [
        'a group named as the primary pool',
        chain({ 'gpt-4o': [{ group: 'upstream' }] }, { upstream: [{ url: 'http://d:1' }] }),
        /groups\["upstream"\]: "upstream" is the primary pool's name/,
      ],
      [
        'a group name with a slash',
        chain({}, { 'a/b': [{ url: 'http://d:1' }] }),
        /groups\["a\/b"\]: a group name is 1-64 letters/,
      ],
      [
        '__proto__ as a group name',
        `{"upstreams":[{"url":"http://a:1"}],"groups":{"__proto__":[{"url":"http://d:1"}]},"fallbacks":{"m":[{"group":"__proto__"}]}}`,
        /groups\["__proto__"\]: a group name is 1-64/,
      ],
      [
        'a group that is not a list',
        chain({ 'gpt-4o': [{ group: 'backup' }] }, { backup: { url: 'http://d:1' } }),
        /groups\["backup"\]: must be a non-empty list/,
      ],
      [
        'groups as a list',
        chain({}, [{ url: 'http://d:1' }]),
        /"groups": must be an object of group name -> list of upstreams, got a list/,
      ],
      [
        'a chain naming an unknown group',
        chain({ 'gpt-4o': [{ group: 'backup' }, { group: 'azure' }] }),
        /fallbacks\["gpt-4o"\]\[1\]: "group" "azure" is not defined in "groups" \(defined: "backup"\)/,
      ],
      [
        'a chain naming a group twice',
        chain({ 'gpt-4o': [{ group: 'backup' }, { group: 'backup', model: 'x' }] }),
        /fallbacks\["gpt-4o"\]\[1\]: the group "backup" appears twice in this chain/,
      ],
      [
        'an empty chain',
        chain({ 'gpt-4o': [], '*': [{ group: 'backup' }] }),
        /fallbacks\["gpt-4o"\]: must be a non-empty list/,
      ],
      [
        'a chain that is a group name',
        chain({ 'gpt-4o': 'backup' }),
        /fallbacks\["gpt-4o"\]: must be a non-empty list of \{ "group", "model"\? \}/,
      ],
      [
        'a step without a group',
        chain({ 'gpt-4o': [{ model: 'x' }] }),
        /fallbacks\["gpt-4o"\]\[0\]: "group" must name one of "groups"/,
      ],
      [
        'a model rewrite that is empty',
        chain({ 'gpt-4o': [{ group: 'backup', model: '' }] }),
        /"model" must be a model name of 1-200 characters/,
      ],
      [
        'a model rewrite that is not a string',
        chain({ 'gpt-4o': [{ group: 'backup', model: ['x'] }] }),
        /"model" must be a model name/,
      ],
      [
        'a model rewrite with a control character',
        chain({ 'gpt-4o': [{ group: 'backup', model: 'a\u0000b' }] }),
        /"model" must be a model name .* without control characters/,
      ],
      [
        'a requested model with a line break',
        chain({ 'gpt\n4o': [{ group: 'backup' }] }),
        /fallbacks\["gpt\\n4o"\]: a model name is 1-200 characters, without control characters/,
      ],
      [
        'a requested model that is too long',
        chain({ ['m'.repeat(201)]: [{ group: 'backup' }] }),
        /a model name is 1-200 characters/,
      ],
      [
        'a chain of nine steps',
        chain({ m: Array.from({ length: 9 }, () => ({ group: 'backup' })) }),
        /fallbacks\["m"\]: more than 8 steps/,
      ],
    ])('refuses %s', (_what, document, expected) => {
      expect(problem(document)).toMatch(expected);
    });

    it('keys chains by any requested model name, __proto__ included, without touching any prototype', () => {
      const file = parse(
        `{"upstreams":[{"url":"http://a:1"}],"groups":{"b":[{"url":"http://d:1"}]},"fallbacks":{"__proto__":[{"group":"b","model":"polluted"}],"constructor":[{"group":"b"}]}}`,
      );
      expect([...file.fallbacks.keys()]).toEqual(['__proto__', 'constructor']);
      expect(file.fallbacks.get('__proto__')).toEqual([{ group: 'b', model: 'polluted' }]);
      expect(({} as Record<string, unknown>).model).toBeUndefined();
    });

    it('serves --provider openai only: a llama.cpp or Anthropic gateway is told why', () => {
      expect(problem(VALID, ENV, 'llama')).toMatch(
        /"groups": fallback chains rewrite OpenAI request bodies and serve --provider openai only \(this gateway is --provider llama\)/,
      );
      expect(problem({ upstreams: VALID.upstreams, fallbacks: {} }, ENV, 'anthropic')).toMatch(
        /"fallbacks": .*--provider openai only/,
      );
      // Upstreams with keys of their own are for every provider.
      expect(parse({ upstreams: VALID.upstreams }, ENV, 'llama').upstreams).toHaveLength(2);
    });
  });

  describe('oversized and hostile input', () => {
    it('refuses a document larger than 256 KiB, read or given', () => {
      const big = JSON.stringify({ upstreams: [{ url: 'http://a:1', name: 'a' }], pad: 'x'.repeat(300_000) });
      expect(problem(big)).toMatch(/larger than 262144 bytes/);
      const dir = mkdtempSync(join(tmpdir(), 'npo-upstreams-'));
      writeFileSync(join(dir, 'big.json'), big);
      expect(() => readUpstreamsFile(join(dir, 'big.json'), ENV, 'openai')).toThrow(
        /larger than 262144 bytes \(300\d+\)/,
      );
    });

    it('refuses more than 64 upstreams in all', () => {
      const many = (n: number, host: string) => Array.from({ length: n }, (_, i) => ({ url: `http://${host}${i}:1` }));
      expect(problem({ upstreams: many(65, 'a') })).toMatch(/upstreams: more than 64 upstreams/);
      expect(
        problem({ upstreams: many(40, 'a'), groups: { b: many(30, 'b') }, fallbacks: { '*': [{ group: 'b' }] } }),
      ).toMatch(/more than 64 upstreams in all/);
    });

    it('survives deeply nested JSON with a clear answer', () => {
      const deep = `{"upstreams":[${'['.repeat(100_000)}${']'.repeat(100_000)}]}`;
      expect(problem(deep)).toMatch(/upstreams\[0\]: must be an object with a "url", got a list|not valid JSON/);
    });

    it('says what cannot be read: a missing file, a directory', () => {
      const dir = mkdtempSync(join(tmpdir(), 'npo-upstreams-'));
      mkdirSync(join(dir, 'sub'));
      expect(() => readUpstreamsFile(join(dir, 'missing.json'), ENV, 'openai')).toThrow(/cannot be read \(ENOENT\)/);
      expect(() => readUpstreamsFile(join(dir, 'sub'), ENV, 'openai')).toThrow(/cannot be read \(EISDIR\)/);
    });

    it('keeps a key of a known shape out of a message even where a name was expected', () => {
      const message = problem({ ...VALID, fallbacks: { 'sk-proj-abcdefghijklmnop': [{ group: 'nope' }] } });
      expect(message).not.toContain('sk-proj-abcdefghijklmnop');
      expect(message).toMatch(/fallbacks\["\[redacted\]"\]\[0\]: "group" "nope" is not defined/);
    });
  });
});

describe('--upstreams-file', () => {
  function fileWith(document: unknown): string {
    const path = join(mkdtempSync(join(tmpdir(), 'npo-upstreams-')), 'upstreams.json');
    writeFileSync(path, typeof document === 'string' ? document : JSON.stringify(document));
    return path;
  }

  it("replaces --upstream: the primary URLs are the file's, the first of them the provider's base", () => {
    const path = fileWith(VALID);
    const config = parseGatewayConfig(['--upstreams-file', path], { ...ENV, OPENAI_BASE_URL: 'http://ignored:1/v1' })!;
    expect(config.upstream).toBe('https://eu.example.com/v1');
    expect(config.upstreams).toEqual(['https://eu.example.com/v1', 'https://us.example.com/v1']);
    expect(config.upstreamsFile?.path).toBe(path);
    expect(config.upstreamsFile?.groups.get('backup')).toHaveLength(2);
  });

  it('is read from ORCHESTRATOR_UPSTREAMS_FILE too', () => {
    const config = parseGatewayConfig([], { ...ENV, ORCHESTRATOR_UPSTREAMS_FILE: fileWith(one({ name: 'solo' })) })!;
    expect(config.upstreamsFile?.upstreams.map((u) => u.name)).toEqual(['solo']);
  });

  it('refuses --upstream beside it, as flag or variable', () => {
    const path = fileWith(VALID);
    expect(() => parseGatewayConfig(['--upstreams-file', path, '--upstream', 'http://a:1'], ENV)).toThrow(
      new ConfigError(
        '--upstream and --upstreams-file both list upstreams: list every upstream in the file, or use --upstream alone',
      ),
    );
    expect(() =>
      parseGatewayConfig(['--upstream', 'http://a:1'], { ...ENV, ORCHESTRATOR_UPSTREAMS_FILE: path }),
    ).toThrow(/both list upstreams/);
  });

  it('stops start-up with one line naming the file and the field, never the key', () => {
    const path = fileWith({ upstreams: [{ url: 'http://a:1', apiKey: KEY_INLINE, concurrency: -1 }] });
    let message = '';
    try {
      parseGatewayConfig(['--upstreams-file', path], ENV);
    } catch (error) {
      expect(error).toBeInstanceOf(ConfigError);
      message = (error as Error).message;
    }
    expect(message).toBe(
      `--upstreams-file ${JSON.stringify(path)}: upstreams[0] ("upstream"): "concurrency" must be a whole number from 1 to 100000`,
    );
    const missing = join(tmpdir(), 'npo-no-such-dir', 'upstreams.json');
    expect(() => parseGatewayConfig(['--upstreams-file', missing], ENV)).toThrow(
      `--upstreams-file ${JSON.stringify(missing)}: cannot be read (ENOENT)`,
    );
    expect(() => parseGatewayConfig(['--provider', 'llama', '--upstreams-file', fileWith(VALID)], ENV)).toThrow(
      /--provider openai only/,
    );
  });

  it('is listed by --help with its variable', () => {
    expect(helpText()).toMatch(
      /--upstreams-file PATH\s+every upstream in one JSON file.*\[ORCHESTRATOR_UPSTREAMS_FILE\]/,
    );
  });
});
