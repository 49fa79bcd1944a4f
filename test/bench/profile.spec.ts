import { describe, expect, it } from '@jest/globals';
import { perfByOwner } from './profile.js';

// Samples as `perf script -F period,ip,sym,dso` prints them (leaf frame first), 0.5 ms of CPU each.
const sample = (...frames: string[]) =>
  ['    500000 ', ...frames.map((frame) => `\t    7f0000001000 ${frame}`)].join('\n');
const JS = (name: string, url: string) => `JS:*${name} ${url}:10:3 (/tmp/perf-4242.map)`;
const NODE = (symbol: string) => `${symbol} (/usr/bin/node)`;
const KERNEL = (symbol: string) => `${symbol} ([kernel.kallsyms])`;
const GATEWAY = 'file:///repo/dist/apps/gateway/src/data-plane/data-plane.js';

const SCRIPT = [
  // The collector, wherever it runs from.
  sample(
    NODE('v8::internal::ScavengerCollector::CollectGarbage'),
    NODE('v8::internal::Heap::Scavenge'),
    JS('respond', GATEWAY),
  ),
  // A socket write's kernel time, named by the function that made the call.
  sample(KERNEL('tcp_sendmsg_locked'), KERNEL('do_syscall_64'), NODE('__GI___writev'), JS('respond', GATEWAY)),
  // A builtin is charged to the JavaScript that called it.
  sample(
    NODE('Builtins_KeyedLoadIC_Megamorphic'),
    JS('ConsumerObserver.next', '/repo/node_modules/rxjs/dist/cjs/internal/Subscriber.js'),
  ),
  sample(JS('writeH1', '/repo/node_modules/undici/lib/dispatcher/client-h1.js')),
  sample(
    'JS:wasm-function[20]-20-turbofan (/tmp/perf-4242.map)',
    JS('execute', '/repo/node_modules/undici/lib/dispatcher/client-h1.js'),
  ),
  // The optimising compiler's thread.
  sample(
    NODE('v8::internal::compiler::GraphReducer::ReduceTop'),
    NODE('v8::internal::OptimizingCompileDispatcher::CompileTask::RunInternal'),
  ),
  // Native code with no JavaScript above it (the event loop's own).
  sample(NODE('uv__io_poll'), NODE('uv_run')),
  '',
].join('\n\n');

describe('perfByOwner', () => {
  const summary = perfByOwner(SCRIPT, { requests: 10, row: 'small' });

  it('sums CPU per request by owner: the collector, the compiler and the kernel apart, native code charged to its caller', () => {
    expect(summary.source).toBe('perf');
    expect(summary.sampledMs).toBeCloseTo(3.5);
    const nonZero = Object.fromEntries(Object.entries(summary.usPerRequest).filter(([, us]) => us > 0));
    expect(nonZero).toEqual({ gc: 50, compiler: 50, kernel: 50, rxjs: 50, undici: 100, node: 50 });
  });

  it("names a kernel sample's function, and where the JavaScript is", () => {
    const kernel = summary.top.find((f) => f.owner === 'kernel');
    expect(kernel).toMatchObject({
      fn: '(kernel) respond',
      where: 'dist/apps/gateway/src/data-plane/data-plane.js:10',
      usPerRequest: 50,
    });
    expect(summary.top.find((f) => f.owner === 'rxjs')).toMatchObject({
      fn: 'ConsumerObserver.next',
      where: 'node_modules/rxjs/dist/cjs/internal/Subscriber.js:10',
    });
    expect(summary.top.find((f) => f.owner === 'gc')).toMatchObject({ fn: '(garbage collector)', where: '' });
    expect(summary.top.find((f) => f.owner === 'node')).toMatchObject({ fn: '(native) uv__io_poll', where: '' });
  });

  it('skips what is not a sample', () => {
    expect(perfByOwner('\n\nnot a sample\n\n    0 \n', { requests: 1, row: 'none' }).sampledMs).toBe(0);
  });
});
