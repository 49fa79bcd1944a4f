import { describe, expect, it } from '@jest/globals';
import { CappedLabels, plainLabel } from './label-bounds.js';

describe('label bounds', () => {
  it('keeps plain model names up to 64 characters; anything longer or odder is "other"', () => {
    for (const name of [
      'gpt-4o-mini',
      'meta-llama/Llama-3.1-8B-Instruct',
      'llama3.2:3b',
      'claude-3-5-sonnet-20241022',
      'org@model+v2',
      'm'.repeat(64),
    ]) {
      expect(plainLabel(name)).toBe(name);
    }
    for (const name of [
      'm'.repeat(65),
      'Y'.repeat(100_000),
      '',
      'with space',
      'quote"d',
      'new\nline',
      '-leading-dash',
      '{json}',
      'ünïcode',
    ]) {
      expect(plainLabel(name)).toBe('other');
    }
  });

  it('caps distinct values; a value refused as not plain takes no place under the cap', () => {
    const labels = new CappedLabels(2);
    expect(labels.of('x'.repeat(100))).toBe('other');
    expect(labels.of('a')).toBe('a');
    expect(labels.of('b')).toBe('b');
    expect(labels.of('c')).toBe('other');
    expect(labels.of('a')).toBe('a');
  });
});
