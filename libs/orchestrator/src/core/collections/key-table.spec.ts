import { describe, expect, it } from '@jest/globals';
import { KeyTable } from './key-table.js';

/** A deterministic generator (mulberry32): the same operations on every run. */
function random(seed: number): () => number {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296;
  };
}

/** Runs `operations` random sets and deletes over `keys` distinct keys on a KeyTable and a Map, and compares them after each. */
function compareWithMap(keys: number, operations: number, deleteShare: number, seed: number) {
  const next = random(seed);
  const table = new KeyTable<number>();
  const model = new Map<string, number>();
  for (let i = 0; i < operations; i++) {
    const key = `k${Math.floor(next() * keys)}`;
    if (next() < deleteShare) expect(table.delete(key)).toBe(model.delete(key));
    else {
      table.set(key, i);
      model.set(key, i);
    }
    expect(table.get(key)).toBe(model.get(key));
    expect(table.size).toBe(model.size);
  }
  for (const [key, value] of model) expect(table.get(key)).toBe(value);
  expect([...table.values()].sort((a, b) => a - b)).toEqual([...model.values()].sort((a, b) => a - b));
  return table;
}

describe('KeyTable', () => {
  it('answers as a Map does under churn: sets, overwrites and deletes of a few keys in a small table (collisions, runs that wrap around)', () => {
    compareWithMap(12, 50_000, 0.5, 1);
  });

  it('answers as a Map does while it grows to thousands of keys and shrinks back', () => {
    const next = random(7);
    const table = new KeyTable<string>();
    const model = new Map<string, string>();
    for (let round = 0; round < 3; round++) {
      for (let i = 0; i < 5_000; i++) {
        const key = `${round}:${i}:${Math.floor(next() * 1e9).toString(36)}`;
        table.set(key, key);
        model.set(key, key);
      }
      expect(table.size).toBe(model.size);
      for (const key of [...model.keys()]) {
        if (next() < 0.97) {
          expect(table.delete(key)).toBe(true);
          model.delete(key);
        }
      }
      expect(table.size).toBe(model.size);
      for (const [key, value] of model) expect(table.get(key)).toBe(value);
    }
    expect([...table.values()].sort()).toEqual([...model.values()].sort());
  });

  it('tells a missing key from one it holds, and a deleted key is gone', () => {
    const table = new KeyTable<{ n: number }>();
    const value = { n: 1 };
    expect(table.get('a')).toBeUndefined();
    expect(table.has('a')).toBe(false);
    expect(table.delete('a')).toBe(false);
    table.set('a', value);
    expect(table.get('a')).toBe(value);
    expect(table.has('a')).toBe(true);
    expect(table.delete('a')).toBe(true);
    expect(table.has('a')).toBe(false);
    expect(table.size).toBe(0);
    expect([...table.values()]).toEqual([]);
  });

  it('keeps keys that differ only in length or in one unit apart, and the empty key', () => {
    compareWithMap(3, 300, 0.3, 3);
    const table = new KeyTable<number>();
    const keys = ['', 'a', 'aa', 'aaa', 'ab', 'ba', '\u0000', '\u0000\u0000', 'é', 'e\u0301', '__proto__', 'constructor'];
    keys.forEach((key, i) => table.set(key, i));
    keys.forEach((key, i) => expect(table.get(key)).toBe(i));
    expect(table.size).toBe(keys.length);
  });
});
