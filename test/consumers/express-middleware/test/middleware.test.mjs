import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { after, before, test } from 'node:test';
import express from 'express';
import { orchestrated } from 'nest-prompt-orchestrator/express';

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

let server;
let url;
const orchestrate = orchestrated({ breakers: { flaky: { failureThreshold: 2 } } });
before(async () => {
  const app = express();
  app.post(
    '/answer',
    (req, res, next) => {
      arrivals++;
      next();
    },
    express.json(),
    orchestrate({ dedup: true }, async function answer(req, res, signal) {
      const call = count('answer');
      assert.ok(signal instanceof AbortSignal);
      res.setHeader('x-computed-at', `call-${call}`);
      await gate;
      return { call, question: req.body.question };
    }),
  );
  app.get(
    '/price',
    orchestrate({ dedup: true }, async function price() {
      return { call: count('price') };
    }),
  );
  app.get(
    '/fail',
    orchestrate({ breaker: 'flaky' }, async () => {
      count('fail');
      throw Object.assign(new Error('upstream down'), { status: 503 });
    }),
  );
  // Two handlers that are only called the same, with settings of their own: each has its own breaker.
  const sameName = (fails) =>
    async function handler() {
      if (!fails) return { ok: true };
      count('same');
      throw Object.assign(new Error('upstream down'), { status: 503 });
    };
  app.get('/same-a', orchestrate({ breaker: { failureThreshold: 2 } }, sameName(true)));
  app.get('/same-b', orchestrate({ breaker: { failureThreshold: 5 } }, sameName(false)));
  app.get(
    '/hang',
    orchestrate(
      { timeout: 50 },
      (req, res, signal) => new Promise((resolve) => signal.addEventListener('abort', resolve)),
    ),
  );
  // Errors that are not the orchestrator's go to Express's error handling, as usual.
  app.use((error, req, res, _next) => res.status(error.status ?? 500).json({ message: error.message }));
  await new Promise((resolve) => (server = app.listen(0, '127.0.0.1', resolve)));
  url = `http://127.0.0.1:${server.address().port}`;
});
after(async () => {
  await new Promise((resolve) => server.close(resolve));
  await orchestrate.orchestrator.close();
});

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

test('the breaker opens and refuses at once, in Nest shape with the retry headers', async () => {
  for (let i = 0; i < 2; i++) assert.equal((await fetch(`${url}/fail`)).status, 503);
  const refused = await fetch(`${url}/fail`);
  assert.equal(refused.status, 503);
  assert.equal(refused.headers.get('x-should-retry'), 'false');
  const body = await refused.json();
  assert.deepEqual(
    { ...body, message: typeof body.message },
    { statusCode: 503, message: 'string', error: 'Service Unavailable', code: 'circuit_open' },
  );
  assert.equal(calls.fail, 2);
});

test('handlers that share a function name do not share a breaker', async () => {
  for (let i = 0; i < 2; i++) assert.equal((await fetch(`${url}/same-a`)).status, 503);
  const refused = await fetch(`${url}/same-a`);
  assert.equal((await refused.json()).code, 'circuit_open');
  assert.equal(calls.same, 2);
  const other = await fetch(`${url}/same-b`);
  assert.equal(other.status, 200);
  assert.deepEqual(await other.json(), { ok: true });
});

test('a timeout aborts the call and answers 504', async () => {
  const timedOut = await fetch(`${url}/hang`);
  assert.equal(timedOut.status, 504);
  assert.equal((await timedOut.json()).code, 'upstream_timeout');
});
