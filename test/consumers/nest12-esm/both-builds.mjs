// Loads both builds of the package into one process, as an app can by accident (a CommonJS part that
// requires it and an ES module part that imports it), and checks what the two copies share. Plain Node,
// outside Jest: the CommonJS build loads the ESM-only Nest 12 through require() of ES modules (Node 20.19+).
import 'reflect-metadata';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { Body, Controller, Get, HttpCode, Module, Post } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';

const require = createRequire(import.meta.url);
const ok = (what) => console.log(`ok - ${what}`);

assert.match(require.resolve('nest-prompt-orchestrator'), /dist[\\/]cjs[\\/]index\.js$/);
assert.match(import.meta.resolve('nest-prompt-orchestrator'), /dist\/esm\/index\.js$/);
ok('require() resolves to dist/cjs, import to dist/esm');

const cjs = require('nest-prompt-orchestrator');
const esm = await import('nest-prompt-orchestrator');
assert.deepEqual(
  Object.keys(cjs)
    .filter((name) => name !== '__esModule')
    .sort(),
  Object.keys(esm).sort(),
);
assert.notEqual(cjs.OrchestratorModule, esm.OrchestratorModule);
ok('both builds export the same names (and are two copies)');

assert.ok(esm.isOrchestratorError(new cjs.CircuitOpenError('upstream', 1)));
assert.ok(cjs.isOrchestratorError(new esm.OverloadedError('upstream', 1)));
ok("errors of one build are recognised by the other's isOrchestratorError()");

// A controller decorated with the CommonJS build's decorators, in an app that imports the ES module build's
// OrchestratorModule: its interceptor reads the route settings and fills the @CallSignal() slot.
let calls = 0;
let signal;
class AskController {
  ask(body, callSignal) {
    calls++;
    signal = callSignal;
    return { calls, echo: body };
  }
  stream() {
    return new cjs.StreamedResponse(['data: 1\n\n']);
  }
}
const method = (name, decorators) =>
  Reflect.decorate(
    decorators,
    AskController.prototype,
    name,
    Object.getOwnPropertyDescriptor(AskController.prototype, name),
  );
method('ask', [Post(), HttpCode(200), cjs.Dedup({ windowMs: 60_000 }), cjs.CallTimeout(5_000)]);
Body()(AskController.prototype, 'ask', 0);
cjs.CallSignal()(AskController.prototype, 'ask', 1);
method('stream', [Get('stream'), cjs.Dedup()]);
Reflect.decorate([Controller('ask')], AskController);
class AppModule {}
Reflect.decorate([Module({ imports: [esm.OrchestratorModule.forRoot()], controllers: [AskController] })], AppModule);

const app = await NestFactory.create(AppModule, { logger: false });
try {
  await app.listen(0, '127.0.0.1');
  const url = await app.getUrl();
  const ask = () =>
    fetch(`${url}/ask`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"q":1}' });
  const first = await ask();
  const second = await ask();
  assert.equal(first.status, 200);
  assert.equal(first.headers.get('x-orchestrator-dedup'), 'miss');
  assert.equal(second.headers.get('x-orchestrator-dedup'), 'cached');
  assert.deepEqual(await second.json(), { calls: 1, echo: { q: 1 } });
  assert.equal(calls, 1);
  assert.ok(signal instanceof AbortSignal);
  ok("decorators of the CommonJS build are served by the ES module build's OrchestratorModule");

  // Answers are branded with Symbol.for too: a StreamedResponse of the other build is streamed.
  const stream = await fetch(`${url}/ask/stream`);
  assert.match(stream.headers.get('content-type') ?? '', /^text\/event-stream/);
  assert.equal(await stream.text(), 'data: 1\n\n');
  ok("a StreamedResponse of the CommonJS build is streamed by the ES module build's interceptor");
} finally {
  await app.close();
}

// The optional `nest-prompt-orchestrator/throttler` entry, with @nestjs/throttler's own module and guard: both
// builds resolve, and its storage limits a plain route (429 with Retry-After past the limit).
{
  assert.match(require.resolve('nest-prompt-orchestrator/throttler'), /dist[\\/]cjs[\\/]throttler[\\/]index\.js$/);
  const throttlerCjs = require('nest-prompt-orchestrator/throttler');
  const throttler = await import('nest-prompt-orchestrator/throttler');
  assert.deepEqual(
    Object.keys(throttlerCjs)
      .filter((name) => name !== '__esModule')
      .sort(),
    Object.keys(throttler).sort(),
  );
  ok('nest-prompt-orchestrator/throttler resolves for require and import');

  const { APP_GUARD } = await import('@nestjs/core');
  const { ThrottlerGuard, ThrottlerModule } = await import('@nestjs/throttler');
  class PingController {
    ping() {
      return { pong: true };
    }
  }
  Reflect.decorate(
    [Get()],
    PingController.prototype,
    'ping',
    Object.getOwnPropertyDescriptor(PingController.prototype, 'ping'),
  );
  Reflect.decorate([Controller('ping')], PingController);
  class LimitedModule {}
  Reflect.decorate(
    [
      Module({
        imports: [
          ThrottlerModule.forRoot({
            throttlers: [{ ttl: 60_000, limit: 2 }],
            storage: new throttler.MemoryWindowCounters(),
            errorMessage: throttler.rateLimitErrorBody().error.message,
          }),
        ],
        controllers: [PingController],
        providers: [{ provide: APP_GUARD, useClass: ThrottlerGuard }],
      }),
    ],
    LimitedModule,
  );
  const limited = await NestFactory.create(LimitedModule, { logger: false });
  try {
    await limited.listen(0, '127.0.0.1');
    const url = await limited.getUrl();
    const statuses = [];
    let refused;
    for (let i = 0; i < 3; i++) {
      refused = await fetch(`${url}/ping`);
      statuses.push(refused.status);
    }
    assert.deepEqual(statuses, [200, 200, 429]);
    assert.ok(Number(refused.headers.get('retry-after')) >= 1);
    ok("ThrottlerGuard with the package's storage answers 429 with Retry-After past the limit");
  } finally {
    await limited.close();
  }
}
