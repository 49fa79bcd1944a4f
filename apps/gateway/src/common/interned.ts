/**
 * One string object per distinct value, for values every answer in the
 * window keeps a reference to and that repeat from answer to answer (its
 * content type, the model its request named): the window then holds one
 * copy of each, not one per answer. Bounded: past `max` distinct values, a
 * value is kept as it came.
 */
export class Interned {
  private readonly seen = new Map<string, string>();

  constructor(private readonly max: number) {}

  of(value: string): string {
    const known = this.seen.get(value);
    if (known !== undefined) return known;
    if (this.seen.size < this.max) this.seen.set(value, value);
    return value;
  }
}
