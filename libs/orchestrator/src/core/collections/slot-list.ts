/**
 * A set of items that each know their place (`add` returns it, `delete` takes it back): for what every request adds
 * and removes, such as the responses in flight. A freed place is reused. Not a `Set`: churned, a `Set` keeps every
 * item it held alive across scavenges once a full GC has run (see `key-table.ts`).
 */
export class SlotList<T> {
  private readonly items: Array<T | undefined> = [];
  private readonly free: number[] = [];
  private count = 0;

  get size(): number {
    return this.count;
  }

  /** Adds `item`; returns its place, for `delete`. */
  add(item: T): number {
    const slot = this.free.pop() ?? this.items.length;
    this.items[slot] = item;
    this.count++;
    return slot;
  }

  /** Removes `item` from `slot`; false if it is not there (already removed, the place since reused). */
  delete(slot: number, item: T): boolean {
    if (this.items[slot] !== item || item === undefined) return false;
    this.items[slot] = undefined;
    this.free.push(slot);
    this.count--;
    return true;
  }

  *[Symbol.iterator](): IterableIterator<T> {
    for (const item of this.items) if (item !== undefined) yield item;
  }
}
