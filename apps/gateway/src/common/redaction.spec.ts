import { describe, expect, it } from '@jest/globals';
import { REDACTED, Redactor, keyPrefixOf } from './redaction.js';

const KEY = 'sk-proj-Unit7-key-a1b2-c3d4-e5f6';
const dashes = (key: string) => key.replace(/-/g, '\\u002d');
const every = (key: string) => [...key].map((c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`).join('');

describe('Redactor: keys in JSON, whatever its escaping', () => {
  const redactor = new Redactor();
  redactor.watch([KEY]);

  it.each([
    ['plain', KEY],
    ['dashes as \\u002d', dashes(KEY)],
    ['every character escaped', every(KEY)],
  ])(
    'an error event with the key written %s: gone from the bytes and from what a JSON parser reads',
    (_name, written) => {
      const event = `event: error\ndata: {"type":"error","message":"Incorrect API key provided: ${written}.","sequence_number":3}\n\n`;
      const out = redactor.json(event);
      expect(out).not.toContain(written);
      const data = JSON.parse(out.split('data: ')[1]) as { message: string; sequence_number: number };
      expect(data.message).toBe(`Incorrect API key provided: ${REDACTED}.`);
      expect(data.sequence_number).toBe(3);
    },
  );

  it('a key written in escapes that the byte-level pass alone leaves whole once parsed', () => {
    const body = `{"error":{"message":"${dashes(KEY)}"}}`;
    expect((JSON.parse(redactor.text(body)) as { error: { message: string } }).error.message).toContain('Unit7');
    expect(JSON.stringify(JSON.parse(redactor.json(body)))).not.toContain('Unit7');
  });

  it('ordinary text: only known keys go, a key-shaped word of a model stays (shapes off)', () => {
    const event = `data: {"error":null,"detail":"${dashes(KEY)}","content":"use sk-learn-style pipelines"}\n\n`;
    const out = redactor.json(event, [], false);
    expect(out).toContain('sk-learn-style');
    expect(JSON.stringify(JSON.parse(out.slice(6)))).not.toContain(KEY);
  });

  it('a watched key with a slash, written with `\\/`', () => {
    const slashed = 'sk-ant-api03-ab/cd+ef_0123';
    const own = new Redactor();
    own.watch([slashed]);
    const body = `{"message":"${slashed.replace('/', '\\/')}"}`;
    expect(own.mayQuote(Buffer.from('{"m":"a\\/b"}'))).toBe(true);
    expect(JSON.parse(own.json(body, [], false))).toEqual({ message: REDACTED });
  });

  it('the presented key is removed as the watched ones are', () => {
    const presented = 'sk-client-Own-0123456789';
    expect(redactor.json(`{"m":"${dashes(presented)}"}`, [presented])).toBe(`{"m":"${REDACTED}"}`);
  });

  it('mayQuote: false for ordinary chunks (no prefix of a watched key, no ASCII escape), true otherwise', () => {
    expect(redactor.mayQuote(Buffer.from('data: {"content":"caf\\u00e9? no, tea"}\n\n'))).toBe(true);
    expect(redactor.mayQuote(Buffer.from('data: {"content":"hello there"}\n\n'))).toBe(false);
    expect(redactor.mayQuote(Buffer.from('data: {"content":"\\ud83d\\ude00"}\n\n'))).toBe(false);
    expect(redactor.mayQuote(Buffer.from(`data: {"x":"${KEY}"}`))).toBe(true);
    expect(redactor.mayQuote('data: {"content":"hello there"}')).toBe(false);
    expect(redactor.mayQuote('data: {"content":"tok-abc"}', 'tok-presented-123')).toBe(true);
  });

  it("mayQuote with the presented key's prefix made once (a stream's chunks): the same answers as with the key", () => {
    const prefix = keyPrefixOf('tok-presented-123');
    expect(prefix?.text).toBe('tok');
    expect(redactor.mayQuote(Buffer.from('data: {"content":"tok-abc"}\n\n'), prefix)).toBe(true);
    expect(redactor.mayQuote('data: {"content":"tok-abc"}', prefix)).toBe(true);
    expect(redactor.mayQuote(Buffer.from('data: {"content":"hello there"}\n\n'), prefix)).toBe(false);
    // A key too short to be told from ordinary text is not searched for.
    expect(keyPrefixOf('tok-12')).toBeUndefined();
    expect(keyPrefixOf(undefined)).toBeUndefined();
  });

  it('leaves JSON without a key byte for byte (the very Buffer)', () => {
    const body = Buffer.from('{"content":"caf\\u00e9 \\u003cb\\u003e"}');
    expect(redactor.jsonBytes(body)).toBe(body);
  });
});
