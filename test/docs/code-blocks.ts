import { readFileSync, readdirSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';

/**
 * Type-checks the TypeScript code blocks of the documentation against the plugin's source, so that examples
 * cannot drift from the API.
 *
 * Every ```ts (or ```typescript) block is compiled as its own ES module, with the repository's compiler options
 * (strict), `nest-prompt-orchestrator` resolved to libs/orchestrator/src. An HTML comment right before a block
 * (invisible once rendered) can change that:
 *
 *   <!-- docs-check: context
 *   import { OrchestratorService } from 'nest-prompt-orchestrator';
 *   declare const orchestrator: OrchestratorService;
 *   -->
 *
 * prepends those lines to the block: the imports and declarations a fragment takes for granted.
 *
 *   <!-- docs-check: skip (the reason) -->
 *
 * leaves the block out; the reason is required.
 */

export const repoRoot = join(dirname(fileURLToPath(import.meta.url)), '..', '..');

/** The documents whose code blocks are checked. */
export function documentedFiles(): string[] {
  const docs = readdirSync(join(repoRoot, 'docs'))
    .filter((name) => name.endsWith('.md'))
    .sort()
    .map((name) => join('docs', name));
  return ['README.md', join('libs', 'orchestrator', 'README.md'), ...docs];
}

export interface CodeBlock {
  /** Path of the document, relative to the repository. */
  file: string;
  /** 1-based line of the block's first code line in the document. */
  line: number;
  code: string;
  /** Lines prepended from a `docs-check: context` comment, and where that comment's first code line is. */
  context?: { code: string; line: number };
}

export interface ExtractResult {
  blocks: CodeBlock[];
  skipped: { file: string; line: number; reason: string }[];
  /** Malformed or misplaced markers: each fails the check. */
  problems: string[];
}

const TS_LANGUAGES = new Set(['ts', 'typescript']);
const MARKER = /^<!--\s*docs-check:\s*([a-z-]+)\s*(.*)$/;

export function extractBlocks(file: string, text: string): ExtractResult {
  const lines = text.split('\n');
  const result: ExtractResult = { blocks: [], skipped: [], problems: [] };
  let pending:
    { kind: 'skip'; reason: string; line: number } | { kind: 'context'; code: string; line: number } | undefined;

  for (let i = 0; i < lines.length; i++) {
    const line = lines[i];
    const marker = MARKER.exec(line.trim());
    if (marker) {
      if (pending) result.problems.push(`${file}:${pending.line}: docs-check marker not followed by a code block`);
      const [, kind, rest] = marker;
      if (kind === 'skip') {
        const reason = rest
          .replace(/-->\s*$/, '')
          .trim()
          .replace(/^\((.*)\)$/, '$1');
        if (!rest.trimEnd().endsWith('-->')) result.problems.push(`${file}:${i + 1}: a skip marker takes one line`);
        if (!reason) result.problems.push(`${file}:${i + 1}: docs-check: skip needs a reason`);
        pending = { kind: 'skip', reason, line: i + 1 };
      } else if (kind === 'context') {
        const end = lines.findIndex((candidate, j) => j > i && candidate.trim() === '-->');
        if (end < 0) {
          result.problems.push(`${file}:${i + 1}: docs-check: context is not closed by a line holding only -->`);
          break;
        }
        pending = { kind: 'context', code: lines.slice(i + 1, end).join('\n'), line: i + 2 };
        i = end;
      } else {
        result.problems.push(`${file}:${i + 1}: unknown docs-check marker "${kind}" (known: context, skip)`);
      }
      continue;
    }

    const fence = /^(\s*)(`{3,}|~{3,})\s*([\w+-]*)/.exec(line);
    if (fence) {
      const [, indent, ticks, language] = fence;
      const close = lines.findIndex(
        (candidate, j) => j > i && candidate.trim().startsWith(ticks) && candidate.trim().replace(/[`~]/g, '') === '',
      );
      const end = close < 0 ? lines.length : close;
      const body = lines
        .slice(i + 1, end)
        .map((codeLine) => (codeLine.startsWith(indent) ? codeLine.slice(indent.length) : codeLine));
      if (TS_LANGUAGES.has(language.toLowerCase())) {
        if (pending?.kind === 'skip') result.skipped.push({ file, line: i + 2, reason: pending.reason });
        else {
          const context = pending?.kind === 'context' ? { code: pending.code, line: pending.line } : undefined;
          result.blocks.push({ file, line: i + 2, code: body.join('\n'), context });
        }
      } else if (pending) {
        result.problems.push(`${file}:${pending.line}: docs-check marker before a block that is not TypeScript`);
      }
      pending = undefined;
      i = end;
      continue;
    }
    if (pending && line.trim() !== '') {
      result.problems.push(`${file}:${pending.line}: docs-check marker must come right before its code block`);
      pending = undefined;
    }
  }
  if (pending) result.problems.push(`${file}:${pending.line}: docs-check marker not followed by a code block`);
  return result;
}

export interface BlockError {
  file: string;
  line: number;
  message: string;
}

/** Compiles every block in one program; returns the errors, placed at their line in the document. */
export function checkBlocks(blocks: CodeBlock[]): BlockError[] {
  const config = ts.getParsedCommandLineOfConfigFile(
    join(repoRoot, 'tsconfig.json'),
    {},
    {
      ...ts.sys,
      onUnRecoverableConfigFileDiagnostic: (diagnostic) => {
        throw new Error(ts.flattenDiagnosticMessageText(diagnostic.messageText, '\n'));
      },
    },
  );
  if (!config) throw new Error('cannot read tsconfig.json');
  const options: ts.CompilerOptions = { ...config.options, noEmit: true, types: ['node'], incremental: false };

  // Virtual files next to the tests, so that node_modules and the repository's package.json (type: module) apply.
  const virtual = new Map<string, { block: CodeBlock; contextLines: number; text: string }>();
  for (const block of blocks) {
    const name = `${block.file.replace(/[^\w]+/g, '_')}_L${block.line}.ts`;
    const path = join(repoRoot, 'test', 'docs', '.blocks', name);
    const context = block.context ? `${block.context.code}\n` : '';
    const contextLines = block.context ? block.context.code.split('\n').length : 0;
    // `export {}` makes every block a module of its own, even one without imports.
    virtual.set(path, { block, contextLines, text: `${context}${block.code}\nexport {};\n` });
  }

  const host = ts.createCompilerHost(options, true);
  // Each is called below with the host as `this`.
  // eslint-disable-next-line @typescript-eslint/unbound-method
  const { fileExists, readFile, getSourceFile } = host;
  host.fileExists = (path) => virtual.has(path) || fileExists.call(host, path);
  host.readFile = (path) => virtual.get(path)?.text ?? readFile.call(host, path);
  host.getSourceFile = (path, language, onError, fresh) => {
    const entry = virtual.get(path);
    return entry
      ? ts.createSourceFile(path, entry.text, language, true)
      : getSourceFile.call(host, path, language, onError, fresh);
  };

  const program = ts.createProgram({ rootNames: [...virtual.keys()], options, host });
  const errors: BlockError[] = [];
  for (const diagnostic of ts.getPreEmitDiagnostics(program)) {
    const message = `TS${diagnostic.code}: ${ts.flattenDiagnosticMessageText(diagnostic.messageText, '\n')}`;
    const entry = diagnostic.file ? virtual.get(diagnostic.file.fileName) : undefined;
    if (!diagnostic.file) {
      errors.push({ file: 'tsconfig.json', line: 0, message });
      continue;
    }
    if (!entry) continue; // the library's own errors are the repository type-check's business
    const { line } = diagnostic.file.getLineAndCharacterOfPosition(diagnostic.start ?? 0);
    const { block, contextLines } = entry;
    errors.push(
      line < contextLines
        ? { file: block.file, line: block.context!.line + line, message: `${message} (in the docs-check context)` }
        : { file: block.file, line: block.line + line - contextLines, message },
    );
  }
  return errors;
}

export function readDocument(file: string): string {
  return readFileSync(join(repoRoot, file), 'utf8');
}

export function formatErrors(errors: BlockError[]): string {
  return [...errors]
    .sort((a, b) => a.file.localeCompare(b.file) || a.line - b.line)
    .map((error) => `${relative('.', join(repoRoot, error.file))}:${error.line}: ${error.message}`)
    .join('\n');
}
