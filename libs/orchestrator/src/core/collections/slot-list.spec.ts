import { describe, expect, it } from '@jest/globals';
import { SlotList } from './slot-list.js';

describe('SlotList', () => {
  it('holds what was added until it is deleted from its place, and iterates what it holds', () => {
    const list = new SlotList<string>();
    const a = list.add('a');
    const b = list.add('b');
    const c = list.add('c');
    expect(list.size).toBe(3);
    expect(list.delete(b, 'b')).toBe(true);
    expect(list.size).toBe(2);
    expect([...list]).toEqual(['a', 'c']);
    expect(list.delete(a, 'a')).toBe(true);
    expect(list.delete(c, 'c')).toBe(true);
    expect(list.size).toBe(0);
    expect([...list]).toEqual([]);
  });

  it('reuses a freed place, and a second delete of the same item never removes the item that took its place', () => {
    const list = new SlotList<object>();
    const first = {};
    const second = {};
    const slot = list.add(first);
    expect(list.delete(slot, first)).toBe(true);
    expect(list.add(second)).toBe(slot);
    expect(list.delete(slot, first)).toBe(false);
    expect(list.size).toBe(1);
    expect([...list]).toEqual([second]);
  });

  it('stays as large as the most items it held at once, whatever the number added over time', () => {
    const list = new SlotList<number>();
    const places = new Set<number>();
    for (let i = 0; i < 10_000; i++) {
      const held = [list.add(i), list.add(i + 0.5)];
      for (const place of held) places.add(place);
      list.delete(held[0], i);
      list.delete(held[1], i + 0.5);
    }
    expect(list.size).toBe(0);
    expect(places.size).toBe(2);
  });
});
