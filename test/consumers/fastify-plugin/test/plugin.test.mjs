import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { after, before, test } from 'node:test';
import Fastify from 'fastify';
import { callSignalOf, orchestratorPlugin } from 'nest-prompt-orchestrator/fastify';

const calls = {};
// Requests that reached the app (before the orchestrator): the test waits for all of them before the answer.
let arrivals = 0;
const count = (name) => (calls[name] = (calls[name] ?? 0) + 1);
let release;
let gate;
const hold = () => (gate = new Promise((resolve) => (release = resolve)));
const waitFor = async (condition) => {
  const deadline = Date.now() + 5_000;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error('timed out');
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
};

let app;
let url;
before(async () => {
  app = Fastify();
  await app.register(orchestratorPlugin, { breakers: { flaky: { failureThreshold: 2 } } });
  app.addHook('onRequest', async (request) => {
    if (request.url === '/answer') arrivals++;
  });
  app.post('/answer', { config: { orchestrate: { dedup: true } } }, async (request, reply) => {
    const call = count('answer');
    assert.ok(callSignalOf(request) instanceof AbortSignal);
    reply.header('x-computed-at', `call-${call}`);
    await gate;
    return { call, question: request.body.question };
  });
  app.get('/price', { config: { orchestrate: { dedup: true } } }, async () => ({ call: count('price') }));
  app.get('/fail', { config: { orchestrate: { breaker: 'flaky' } } }, async () => {
    count('fail');
    throw Object.assign(new Error('upstream down'), { statusCode: 503 });
  });
  app.get('/plain', async () => ({ plain: true }));
  await app.listen({ port: 0, host: '127.0.0.1' });
  url = `http://127.0.0.1:${app.server.address().port}`;
});
after(() => app.close());

const ask = () =>
  fetch(`${url}/answer`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ question: 'same' }),
  });

test('is loaded without Nest installed', () => {
  assert.throws(() => createRequire(import.meta.url).resolve('@nestjs/common'), { code: 'MODULE_NOT_FOUND' });
});

test('identical concurrent requests run the handler once, with the headers it set; a later POST is a new call', async () => {
  hold();
  const pending = Array.from({ length: 50 }, ask);
  await waitFor(() => calls.answer === 1 && arrivals === 50);
  await new Promise((resolve) => setTimeout(resolve, 100));
  release();
  const answers = await Promise.all(pending);
  const outcomes = answers.map((a) => a.headers.get('x-orchestrator-dedup'));
  assert.equal(outcomes.filter((o) => o === 'miss').length, 1);
  assert.equal(outcomes.filter((o) => o === 'joined').length, 49);
  assert.ok(answers.every((a) => a.headers.get('x-computed-at') === 'call-1'));
  assert.deepEqual(await answers[49].json(), { call: 1, question: 'same' });
  assert.equal(calls.answer, 1);

  const later = await ask();
  assert.equal(later.headers.get('x-orchestrator-dedup'), 'miss');
  assert.equal((await later.json()).call, 2);
});

test('a GET is answered from the window', async () => {
  await fetch(`${url}/price`);
  const again = await fetch(`${url}/price`);
  assert.equal(again.headers.get('x-orchestrator-dedup'), 'cached');
  assert.equal(calls.price, 1);
});

test('the breaker opens and refuses at once, in Nest/Fastify shape with the retry headers', async () => {
  for (let i = 0; i < 2; i++) assert.equal((await fetch(`${url}/fail`)).status, 503);
  const refused = await fetch(`${url}/fail`);
  assert.equal(refused.status, 503);
  assert.equal(refused.headers.get('x-should-retry'), 'false');
  assert.ok(Number(refused.headers.get('retry-after')) >= 1);
  const body = await refused.json();
  assert.deepEqual(
    { ...body, message: typeof body.message },
    { statusCode: 503, message: 'string', error: 'Service Unavailable', code: 'circuit_open' },
  );
  assert.equal(calls.fail, 2);
});

test('routes without settings are left alone', async () => {
  const plain = await fetch(`${url}/plain`);
  assert.deepEqual(await plain.json(), { plain: true });
  assert.equal(plain.headers.get('x-orchestrator-dedup'), null);
});
