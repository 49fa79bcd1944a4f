import { ChildOutput } from './processes.js';

describe('ChildOutput (what the bench keeps of a child process output)', () => {
  it('keeps the last line of each report word, wherever it falls among the JSON lines', () => {
    const kept = new ChildOutput();
    const json = (i: number) =>
      `{"level":30,"time":"2026-12-03T10:00:00.000Z","pid":1,"reqId":"r${i}","msg":"request"}`;
    const lines = [
      json(1),
      'loop-delay p50=1.0 p99=2.0 max=3.0 rss=100',
      json(2),
      'memory rss=5',
      ...Array.from({ length: 200 }, (_, i) => json(i + 3)),
    ];
    kept.add(`${lines.join('\n')}\n`);
    kept.add(`${json(300)}\nloop-delay p50=1.5 p99=2.5 max=3.5 rss=120\n${json(301)}\n`);
    expect(kept.lastLine('loop-delay ')).toBe('loop-delay p50=1.5 p99=2.5 max=3.5 rss=120');
    expect(kept.lastLine('memory ')).toBe('memory rss=5');
    // A JSON line has no space within its first 24 characters: it is never a report.
    expect(kept.lastLine('{"level":30,"time":"2026-12-03T10:00:00.000Z","pid":1,')).toBeUndefined();
  });

  it('a word of 24 characters or more, or a line that starts with a space, is not a report', () => {
    const kept = new ChildOutput();
    kept.add('abcdefghijklmnopqrstuvwx long word\n leading space\nshort one\n');
    expect(kept.lastLine('abcdefghijklmnopqrstuvwx ')).toBeUndefined();
    expect(kept.lastLine(' ')).toBeUndefined();
    expect(kept.lastLine('short ')).toBe('short one');
  });

  it('keeps the last 60 lines written, across chunks, without empty ones', () => {
    const kept = new ChildOutput();
    kept.add(Array.from({ length: 100 }, (_, i) => `line ${i}`).join('\n') + '\n\n');
    kept.add('line 100\nline 101');
    const out = kept.output().split('\n');
    expect(out).toHaveLength(60);
    expect(out[0]).toBe('line 42');
    expect(out.at(-1)).toBe('line 101');
  });
});
