import { beforeAll, describe, expect, it } from '@jest/globals';
import {
  checkBlocks,
  documentedFiles,
  extractBlocks,
  formatErrors,
  readDocument,
  type BlockError,
  type CodeBlock,
} from './code-blocks.js';

/**
 * Every TypeScript block of README.md, libs/orchestrator/README.md and docs/*.md compiles against the plugin's
 * source (how fragments are marked: see code-blocks.ts).
 */
describe('documentation code blocks', () => {
  const files = documentedFiles();
  const extracted = files.map((file) => extractBlocks(file, readDocument(file)));
  const blocks: CodeBlock[] = extracted.flatMap((result) => result.blocks);
  let errors: BlockError[] = [];

  beforeAll(() => {
    errors = checkBlocks(blocks);
  }, 600_000); // the compiler's time on a saturated machine: generous, it bounds nothing the test claims

  it('finds the blocks, and every docs-check marker is well-formed and placed right before its block', () => {
    expect(extracted.flatMap((result) => result.problems)).toEqual([]);
    // The README's plugin examples at least: a check that finds nothing checks nothing.
    expect(blocks.filter((block) => block.file === 'README.md').length).toBeGreaterThanOrEqual(2);
  });

  it('no error outside the documents (compiler options)', () => {
    expect(formatErrors(errors.filter((error) => error.file === 'tsconfig.json'))).toBe('');
  });

  it.each(files)('%s: every TypeScript block compiles', (file) => {
    expect(formatErrors(errors.filter((error) => error.file === file))).toBe('');
  });
});

describe('the code block extraction', () => {
  it('reads blocks, contexts and skips, and reports misplaced markers', () => {
    const doc = [
      '# Title', //                                    1
      '```ts', //                                      2
      'const a = 1;', //                               3
      '```', //                                        4
      '<!-- docs-check: context', //                   5
      'declare const b: number;', //                   6
      '-->', //                                        7
      '```typescript', //                              8
      'const c = b;', //                               9
      '```', //                                        10
      '<!-- docs-check: skip (pseudo-code) -->', //    11
      '```ts', //                                      12
      'not code', //                                   13
      '```', //                                        14
      '<!-- docs-check: skip -->', //                  15
      'text between', //                               16
      '```bash', //                                    17
      'echo', //                                       18
      '```', //                                        19
      '<!-- docs-check: sikp (typo) -->', //           20
    ].join('\n');
    const result = extractBlocks('doc.md', doc);
    expect(result.blocks).toEqual([
      { file: 'doc.md', line: 3, code: 'const a = 1;', context: undefined },
      { file: 'doc.md', line: 9, code: 'const c = b;', context: { code: 'declare const b: number;', line: 6 } },
    ]);
    expect(result.skipped).toEqual([{ file: 'doc.md', line: 13, reason: 'pseudo-code' }]);
    expect(result.problems).toEqual([
      'doc.md:15: docs-check: skip needs a reason',
      'doc.md:15: docs-check marker must come right before its code block',
      'doc.md:20: unknown docs-check marker "sikp" (known: context, skip)',
    ]);
  });

  it('places a compile error at its line in the document', () => {
    const errors = checkBlocks([
      {
        file: 'doc.md',
        line: 10,
        code: "import { Dedup } from 'nest-prompt-orchestrator';\n\nDedup({ windowMs: 'soon' });",
      },
      {
        file: 'doc.md',
        line: 30,
        code: 'const n: number = s;',
        context: { code: 'declare const s: string;', line: 27 },
      },
    ]);
    expect(errors.map(({ file, line }) => `${file}:${line}`)).toEqual(['doc.md:12', 'doc.md:30']);
  }, 120_000);
});
