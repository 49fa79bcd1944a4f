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
  // Differences are collected rather than asserted one by one: an `expect` per operation would make this slow.
  const differences: string[] = [];
  for (let i = 0; i < operations && differences.length < 10; i++) {
    const key = `k${Math.floor(next() * keys)}`;
    if (next() < deleteShare) {
      if (table.delete(key) !== model.delete(key)) differences.push(`delete ${key} at ${i}`);
    } else {
      table.set(key, i);
      model.set(key, i);
    }
    if (table.get(key) !== model.get(key) || table.has(key) !== model.has(key)) differences.push(`get ${key} at ${i}`);
    if (table.size !== model.size) differences.push(`size at ${i}`);
    // Every key the model holds is still found: a deletion that left a probe short would lose one.
    if (i % 97 === 0)
      for (const [held, value] of model) if (table.get(held) !== value) differences.push(`lost ${held} at ${i}`);
  }
  expect(differences).toEqual([]);
  for (const [key, value] of model) expect(table.get(key)).toBe(value);
  expect([...table.values()].sort((a, b) => a - b)).toEqual([...model.values()].sort((a, b) => a - b));
  return table;
}

describe('KeyTable', () => {
  it('answers as a Map does under churn: sets, overwrites and deletes of a few keys in a small table (collisions, runs that wrap around)', () => {
    // At most 8 keys: the table stays at its first 16 places, half full, where runs often wrap past the last place.
    for (let seed = 1; seed <= 5; seed++) compareWithMap(8, 20_000, 0.5, seed);
    compareWithMap(12, 20_000, 0.5, 6);
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
      let refused = 0;
      for (const key of [...model.keys()]) {
        if (next() < 0.97) {
          if (!table.delete(key)) refused++;
          model.delete(key);
        }
      }
      expect(refused).toBe(0);
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
    const keys = [
      '',
      'a',
      'aa',
      'aaa',
      'ab',
      'ba',
      '\u0000',
      '\u0000\u0000',
      'é',
      'e\u0301',
      '__proto__',
      'constructor',
    ];
    keys.forEach((key, i) => table.set(key, i));
    keys.forEach((key, i) => expect(table.get(key)).toBe(i));
    expect(table.size).toBe(keys.length);
  });
});
