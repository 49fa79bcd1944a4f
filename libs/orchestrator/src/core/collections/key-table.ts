/**
 * A table for entries that come and go with every request (calls in flight, the spend ledger's holds; `SlotList` is
 * its twin for the responses in flight), written by hand because V8's `Map` and `Set` are wrong for them under load.
 *
 * A `Map` that is added to and deleted from all the time rebuilds its hash table every few dozen operations, and the
 * table it leaves keeps a pointer to the table that replaces it (so that an iterator can follow). Once a full GC has
 * moved a table to the old generation, that dead table keeps its successor alive through the next scavenges, which
 * then promote it, and it keeps its own successor alive: a chain that lasts until the next full GC, which moves the
 * live table to the old generation and starts it again. Every value each table held survives with it. In the gateway
 * that kept every request's objects alive across scavenges, as soon as the first full GC under load had run, and the
 * GC's share of each request grew several-fold. These tables keep their entries in
 * plain arrays: one that is replaced (when it grows) points to nothing newer, and a deleted entry leaves no trace.
 */

const INITIAL_CAPACITY = 16;

/**
 * A string-keyed table (open addressing, linear probing, deletion by backward shift: no tombstones), for keys that
 * come and go with requests. Hashing is seeded per process, as V8's own string hash is, so that keys a caller chooses
 * cannot be ground to collide.
 */
export class KeyTable<V> {
  private keys: Array<string | undefined>;
  private entries: Array<V | undefined>;
  private hashes: Int32Array;
  private mask: number;
  private count = 0;

  constructor() {
    this.keys = new Array<string | undefined>(INITIAL_CAPACITY).fill(undefined);
    this.entries = new Array<V | undefined>(INITIAL_CAPACITY).fill(undefined);
    this.hashes = new Int32Array(INITIAL_CAPACITY);
    this.mask = INITIAL_CAPACITY - 1;
  }

  get size(): number {
    return this.count;
  }

  get(key: string): V | undefined {
    const slot = this.find(key, hashOf(key));
    return slot < 0 ? undefined : this.entries[slot];
  }

  has(key: string): boolean {
    return this.find(key, hashOf(key)) >= 0;
  }

  set(key: string, value: V): void {
    const hash = hashOf(key);
    const found = this.find(key, hash);
    if (found >= 0) {
      this.entries[found] = value;
      return;
    }
    // At most half full: probes stay short.
    if ((this.count + 1) * 2 > this.keys.length) this.resize(this.keys.length * 2);
    let slot = hash & this.mask;
    while (this.keys[slot] !== undefined) slot = (slot + 1) & this.mask;
    this.keys[slot] = key;
    this.entries[slot] = value;
    this.hashes[slot] = hash;
    this.count++;
  }

  delete(key: string): boolean {
    const slot = this.find(key, hashOf(key));
    if (slot < 0) return false;
    this.removeAt(slot);
    this.count--;
    // A table that held a herd gives its room back once the herd is gone (never below its first size).
    if (this.keys.length > INITIAL_CAPACITY && this.count * 8 < this.keys.length) this.resize(this.keys.length / 2);
    return true;
  }

  /** The values, in no particular order: a copy, so that the table may change while they are gone through. */
  values(): V[] {
    const { keys, entries } = this;
    const values: V[] = [];
    for (let slot = 0; slot < keys.length; slot++) if (keys[slot] !== undefined) values.push(entries[slot]!);
    return values;
  }

  private find(key: string, hash: number): number {
    const { keys, hashes, mask } = this;
    for (let slot = hash & mask; ; slot = (slot + 1) & mask) {
      const at = keys[slot];
      if (at === undefined) return -1;
      if (hashes[slot] === hash && at === key) return slot;
    }
  }

  /** Empties `slot`, moving back each later entry of its run that may live there (so that no probe stops short). */
  private removeAt(slot: number): void {
    const { keys, entries, hashes, mask } = this;
    let hole = slot;
    for (let next = (hole + 1) & mask; keys[next] !== undefined; next = (next + 1) & mask) {
      const home = hashes[next] & mask;
      // `next` may move to `hole` unless its home lies cyclically within (hole, next].
      const stays = hole <= next ? hole < home && home <= next : hole < home || home <= next;
      if (stays) continue;
      keys[hole] = keys[next];
      entries[hole] = entries[next];
      hashes[hole] = hashes[next]!;
      hole = next;
    }
    keys[hole] = undefined;
    entries[hole] = undefined;
  }

  private resize(capacity: number): void {
    const { keys, entries, hashes } = this;
    this.keys = new Array<string | undefined>(capacity).fill(undefined);
    this.entries = new Array<V | undefined>(capacity).fill(undefined);
    this.hashes = new Int32Array(capacity);
    this.mask = capacity - 1;
    for (let from = 0; from < keys.length; from++) {
      const key = keys[from];
      if (key === undefined) continue;
      let slot = hashes[from] & this.mask;
      while (this.keys[slot] !== undefined) slot = (slot + 1) & this.mask;
      this.keys[slot] = key;
      this.entries[slot] = entries[from];
      this.hashes[slot] = hashes[from]!;
    }
  }
}

/** Per process, so that colliding keys cannot be computed ahead. */
const SEED = (Math.random() * 0x1_0000_0000) | 0;

/** FNV-1a over the key's UTF-16 units, from a seeded start. */
function hashOf(key: string): number {
  let hash = SEED ^ 0x811c9dc5;
  for (let i = 0; i < key.length; i++) hash = Math.imul(hash ^ key.charCodeAt(i), 0x01000193);
  // Spreads the last units into the low bits that pick the slot.
  return hash ^ (hash >>> 15);
}
