import { describe, expect, it } from '@jest/globals';
import { JsonSyntaxError, JsonTooDeepError, scanJson } from './json-skeleton.js';

const scan = (text: string, depth = 128) => scanJson(Buffer.from(text), depth);

/** Whether JSON.parse accepts the text (the scanner must agree outside strings). */
function parses(text: string): boolean {
  try {
    JSON.parse(text);
    return true;
  } catch {
    return false;
  }
}

describe('scanJson', () => {
  const valid = [
    '{}',
    '[]',
    ' { "a" : 1 } ',
    '{"model":"m","messages":[{"role":"user","content":"hi \\"quoted\\" \\\\"}],"stream":true}',
    '[1,-2,3.5,1e10,-0.5E-3,0,true,false,null,"s",{"k":[{}]}]',
    '"just a string"',
    '42',
    'null',
    '{"a":{"b":{"c":[[],[{}]]}},"d":"}"}',
    '{"key with \\u00e9 escape":1,"\\"":2}',
    '{"emoji":"😀","nested":"{[\\"]}"}',
    '\n\t{\r\n"a":\t[ ]\n}\n',
  ];
  for (const text of valid) {
    it(`accepts ${JSON.stringify(text).slice(0, 60)}, as JSON.parse does`, () => {
      expect(parses(text)).toBe(true);
      expect(() => scan(text)).not.toThrow();
    });
  }

  const invalid = [
    '',
    ' ',
    '{',
    '{"model": "m", "messages": [}',
    '{"model": "m"',
    '{"a":1,}',
    '[1,]',
    '{"a" 1}',
    '{a:1}',
    "{'a':1}",
    '{"a":tru}',
    '{"a":nul}',
    '{"a":01}',
    '{"a":1.}',
    '{"a":.5}',
    '{"a":1e}',
    '{"a":-}',
    '{"a":"unterminated}',
    '{"a":1}}',
    '{"a":1} x',
    '[1 2]',
    '{"a":1 "b":2}',
    'model=m&messages=x',
    '{"a":[1,2}',
    '{"a":{"b":1]}',
    '\u00ef\u00bb\u00bf{}',
  ];
  for (const text of invalid) {
    it(`refuses ${JSON.stringify(text).slice(0, 60)}, as JSON.parse does`, () => {
      expect(parses(text)).toBe(false);
      expect(() => scan(text)).toThrow(JsonSyntaxError);
    });
  }

  it('agrees with JSON.parse on every truncation of a real request', () => {
    const body = JSON.stringify({
      model: 'gpt-4o',
      temperature: 0.2,
      messages: [
        { role: 'system', content: 'Be "careful" \\ and brief.' },
        { role: 'user', content: 'What is {json} [really]? 😀' },
      ],
      tools: [
        {
          type: 'function',
          function: { name: 'f', parameters: { type: 'object', properties: { stream: { type: 'boolean' } } } },
        },
      ],
      stream: false,
    });
    for (let end = 0; end < body.length; end++) {
      const text = body.slice(0, end);
      if (parses(text)) expect(() => scan(text)).not.toThrow();
      else expect(() => scan(text)).toThrow(JsonSyntaxError);
    }
  });

  it('tells the top-level type and finds top-level fields only, the last of a repeated name winning', () => {
    const s = scan(
      '{"model":"a","tools":[{"model":"inner","stream":"no"}],"model":"b","stream":true,"n":2,"stream_options":null}',
    );
    expect(s.type).toBe('object');
    expect(s.field('model')).toBe('b');
    expect(s.field('stream')).toBe(true);
    expect(s.typeOf('stream')).toBe('boolean');
    expect(s.field('n')).toBe(2);
    expect(s.field('stream_options')).toBeNull();
    expect(s.has('temperature')).toBe(false);
    expect(s.field('temperature')).toBeUndefined();
    expect([...s.fields.keys()].sort()).toEqual(['model', 'n', 'stream', 'stream_options', 'tools']);
    expect(scan('[{"model":"x"}]').type).toBe('array');
    expect(scan('[{"model":"x"}]').fields.size).toBe(0);
    expect(scan('null').type).toBe('null');
  });

  it('reads a field whose value spans nested structures and strings with brackets', () => {
    const s = scan('{"messages":[{"content":"] } ,\\" {"}],"model":"m"}');
    expect(s.field('messages')).toEqual([{ content: '] } ," {' }]);
    expect(s.field('model')).toBe('m');
  });

  it('bounds the depth: 128 levels pass, 129 do not; 10,000 levels never reach the stack limit', () => {
    const nest = (n: number) => '['.repeat(n) + ']'.repeat(n);
    expect(() => scan(nest(128))).not.toThrow();
    expect(() => scan(nest(129))).toThrow(JsonTooDeepError);
    expect(() => scan(`{"a":${'{"b":'.repeat(10_000)}1${'}'.repeat(10_000)}}`)).toThrow(JsonTooDeepError);
    expect(() => scanJson(Buffer.from(nest(10_000)), 100_000)).not.toThrow();
  });

  it('keys named __proto__ and constructor are plain fields', () => {
    const s = scan('{"__proto__":{"x":1},"constructor":2}');
    expect(s.field('__proto__')).toEqual({ x: 1 });
    expect(s.field('constructor')).toBe(2);
    expect(({} as { x?: unknown }).x).toBeUndefined();
  });
});
