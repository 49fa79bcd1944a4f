import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { test } from 'node:test';

const require = createRequire(import.meta.url);

test('installing the package brings no Nest package in', () => {
  for (const name of ['@nestjs/common', '@nestjs/core']) {
    assert.throws(() => require.resolve(name), { code: 'MODULE_NOT_FOUND' }, `${name} is installed`);
  }
});

test('/core: 100 identical concurrent calls make one upstream call (ES module)', async () => {
  const { Orchestrator } = await import('nest-prompt-orchestrator/core');
  const orchestrator = new Orchestrator({ breakers: { llm: { failureThreshold: 3 } } });
  const summaries = orchestrator.policy({ dedup: true, breaker: 'llm', concurrency: 8, timeout: 5_000 });
  let calls = 0;
  const summarize = async (signal) => {
    calls++;
    assert.ok(signal instanceof AbortSignal);
    await new Promise((resolve) => setTimeout(resolve, 50));
    return { summary: 'short' };
  };
  const answers = await Promise.all(
    Array.from({ length: 100 }, () => orchestrator.run(summaries, summarize, { key: 'tenant-a:doc-1' })),
  );
  assert.equal(calls, 1);
  assert.ok(answers.every((answer) => answer.summary === 'short'));
  assert.deepEqual(orchestrator.health().dedup, { miss: 1, joined: 99, cached: 0 });
  await orchestrator.close();
});

test('/core: the breaker opens after its threshold and refuses at once (CommonJS)', async () => {
  const { Orchestrator, isOrchestratorError, errorBody, errorHeaders } = require('nest-prompt-orchestrator/core');
  const orchestrator = new Orchestrator();
  let calls = 0;
  const failing = async () => {
    calls++;
    throw Object.assign(new Error('upstream 503'), { status: 503 });
  };
  for (let i = 0; i < 5; i++) await assert.rejects(orchestrator.run({ breaker: 'llm' }, failing), /upstream 503/);
  const refused = await orchestrator.run({ breaker: 'llm' }, failing).catch((error) => error);
  assert.equal(calls, 5);
  assert.ok(isOrchestratorError(refused));
  assert.equal(errorBody(refused).code, 'circuit_open');
  assert.equal(errorBody(refused).statusCode, 503);
  assert.equal(errorHeaders(refused)['x-should-retry'], 'false');
  await orchestrator.close();
});

test('/low-level: the call entry below run() resolves for import and require, one object per orchestrator', async () => {
  const { Orchestrator } = await import('nest-prompt-orchestrator/core');
  const esm = await import('nest-prompt-orchestrator/low-level');
  const cjs = require('nest-prompt-orchestrator/low-level');
  assert.match(require.resolve('nest-prompt-orchestrator/low-level'), /dist[\\/]cjs[\\/]low-level\.js$/);
  const orchestrator = new Orchestrator();
  const calls = esm.lowLevelCalls(orchestrator);
  assert.equal(esm.lowLevelCalls(orchestrator), calls);
  assert.equal(typeof cjs.lowLevelCalls, 'function');
  const policy = orchestrator.policy({ dedup: true });
  const { of } = await import('rxjs');
  const started = calls.startLocal(policy, { key: 'k' }, () => calls.toCallEvents(of(42)));
  assert.equal(started.outcome, 'miss');
  const events = [];
  await new Promise((resolve, reject) =>
    started.events.subscribe({ next: (e) => events.push(e), error: reject, complete: resolve }),
  );
  assert.deepEqual(events, [{ kind: 'value', value: 42 }]);
  assert.equal(calls.hashIdentity('secret').length, 22);
  await orchestrator.close();
});
