import { afterAll, afterEach, beforeAll, describe, expect, it } from '@jest/globals';
import OpenAI from 'openai';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startMockProvider, type MockProvider } from '../../apps/mock-provider/src/index.js';
import { ensureBuilt, startGatewayProcess, type GatewayProcess } from '../support/gateway-process.js';

/**
 * The gateway's log lines as an operator reads them: stdout of the built
 * gateway in its own process (not a terminal, so JSON), with the official SDK
 * as client. Each line's fields are checked, and the secrets the requests
 * carried (gateway key, prompt text) are looked for in the whole output.
 */

const GATEWAY_KEY = 'gw-log-test-key-4b1d9c';
const PROMPT = 'the quarterly figures of project nightingale';
/**
 * How long a log line is waited for, and each test's timeout (a test starts up to three gateway processes): generous,
 * since they only bound how long a broken run takes to say so, and a saturated machine is slow at everything.
 */
const LINE_WAIT_MS = 60_000;
const TEST_TIMEOUT_MS = 300_000;

let provider: MockProvider;
let gateway: GatewayProcess | undefined;

beforeAll(async () => {
  await ensureBuilt();
  provider = await startMockProvider({ latencyMs: 20 });
}, 180_000);
afterAll(async () => {
  await provider?.close();
});
afterEach(async () => {
  gateway?.kill();
  await gateway?.exited;
  gateway = undefined;
  provider.setMode('ok');
}, TEST_TIMEOUT_MS);

const start = (flags: string[] = []) =>
  startGatewayProcess(['--upstream', provider.url, '--gateway-keys', GATEWAY_KEY, ...flags]);
const client = (g: GatewayProcess) => new OpenAI({ baseURL: `${g.url}/v1`, apiKey: GATEWAY_KEY, maxRetries: 0 });

/** Every JSON line of the output so far. */
function jsonLines(output: string): Array<Record<string, any>> {
  return output
    .split('\n')
    .filter((line) => line.startsWith('{'))
    .map((line) => JSON.parse(line) as Record<string, any>);
}

async function waitForLine(
  g: GatewayProcess,
  match: (line: Record<string, any>) => boolean,
): Promise<Record<string, any>> {
  const deadline = Date.now() + LINE_WAIT_MS;
  for (;;) {
    const found = jsonLines(g.output()).find(match);
    if (found) return found;
    if (Date.now() > deadline) throw new Error(`no matching log line in:\n${g.output()}`);
    await new Promise((resolve) => setTimeout(resolve, 20)); // polling interval
  }
}

describe('gateway logs', () => {
  it(
    'one JSON line per request with its facts, and neither the key nor the prompt anywhere',
    async () => {
      gateway = await start();
      const openai = client(gateway);
      const params = { model: 'gpt-4o-mini', temperature: 0, messages: [{ role: 'user' as const, content: PROMPT }] };
      const [first] = await Promise.all([
        openai.chat.completions.create(params).withResponse(),
        openai.chat.completions.create(params),
      ]);
      const requestId = first.response.headers.get('x-request-id');
      await openai.chat.completions.create(params);

      const line = await waitForLine(gateway, (l) => l.msg === 'request' && l.reqId === requestId);
      expect(line).toMatchObject({
        level: 30,
        method: 'POST',
        route: 'chat',
        status: 200,
        breaker: 'closed',
        model: 'gpt-4o-mini',
      });
      expect(['miss', 'joined']).toContain(line.dedup);
      expect(line.tenant).toMatch(/^[\w-]{12}$/);
      expect(typeof line.totalMs).toBe('number');
      expect(typeof line.time).toBe('string');
      const miss = await waitForLine(gateway, (l) => l.msg === 'request' && l.dedup === 'miss');
      expect(miss.usage).toEqual({ in: first.data.usage!.prompt_tokens, out: first.data.usage!.completion_tokens });
      expect(typeof miss.queueMs).toBe('number');
      expect(miss.upstreamMs).toBeGreaterThanOrEqual(20);
      const joined = await waitForLine(gateway, (l) => l.msg === 'request' && l.dedup === 'joined');
      expect(joined.tenant).toBe(miss.tenant);
      const cached = await waitForLine(gateway, (l) => l.msg === 'request' && l.dedup === 'cached');
      expect(cached.savedUsage).toEqual(miss.usage);
      // Requests answered from this process are not read again: what they say of themselves is the leader's summary.
      expect(joined.model).toBe('gpt-4o-mini');
      expect(cached.model).toBe('gpt-4o-mini');

      // A refused key is a line too (401), and the key it tried is not in it either.
      await expect(
        new OpenAI({ baseURL: `${gateway.url}/v1`, apiKey: 'sk-wrong-key-77aa', maxRetries: 0 }).models.list(),
      ).rejects.toMatchObject({ status: 401 });
      await waitForLine(gateway, (l) => l.msg === 'request' && l.status === 401 && l.error === 'invalid_api_key');

      const output = gateway.output();
      expect(output).not.toContain(GATEWAY_KEY);
      expect(output).not.toContain('sk-wrong-key-77aa');
      expect(output).not.toContain('nightingale');
      expect(jsonLines(output).filter((l) => l.msg === 'request' && l.route === 'chat')).toHaveLength(3);
    },
    TEST_TIMEOUT_MS,
  );

  it(
    'what a client wrote in the request line (its request id, its model name) is redacted and escaped: the line stays one JSON object',
    async () => {
      gateway = await start();
      const openai = client(gateway);
      const leakyId = 'sk-proj-abcdefghijklmnop1234';
      const leakyModel = `"quoted" model\nwith ${GATEWAY_KEY} and sk-ant-api03-zzzzyyyyxxxx inside`;
      await openai.chat.completions.create(
        { model: leakyModel, messages: [{ role: 'user', content: 'redacted line' }] },
        { headers: { 'x-request-id': leakyId } },
      );
      const line = await waitForLine(gateway, (l) => l.msg === 'request' && l.route === 'chat' && l.status === 200);
      expect(line.reqId).toBe('[redacted]');
      expect(line.model).toBe('"quoted" model\nwith [redacted] and [redacted] inside');
      const output = gateway.output();
      expect(output).not.toContain(leakyId);
      expect(output).not.toContain(GATEWAY_KEY);
      expect(output).not.toContain('sk-ant-api03-zzzzyyyyxxxx');
    },
    TEST_TIMEOUT_MS,
  );

  it(
    'breaker transitions as their own lines (warn when it opens, info when it closes)',
    async () => {
      gateway = await start(['--breaker-failures', '2', '--retries', '0', '--breaker-open', '60']);
      const openai = client(gateway);
      provider.setMode('error503');
      for (let i = 0; i < 2; i++) {
        await expect(
          openai.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: `${PROMPT} ${i}` }] }),
        ).rejects.toMatchObject({ status: 503 });
      }
      const opened = await waitForLine(gateway, (l) => l.event === 'breaker_transition' && l.to === 'open');
      expect(opened).toMatchObject({ level: 40, breaker: 'upstream', from: 'closed' });
      const failed = await waitForLine(gateway, (l) => l.msg === 'request' && l.status === 503);
      expect(failed.route).toBe('chat');
      provider.setMode('ok');
      await waitForLine(gateway, (l) => l.event === 'breaker_transition' && l.to === 'closed' && l.level === 30);
      expect(gateway.output()).not.toContain('nightingale');
    },
    TEST_TIMEOUT_MS,
  );

  it(
    'the shared store going away is one line, not one per request',
    async () => {
      gateway = await start(['--redis', 'redis://127.0.0.1:1', '--redis-timeout', '0.05']);
      const openai = client(gateway);
      for (let i = 0; i < 3; i++)
        await openai.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: `store ${i}` }] });
      const degraded = await waitForLine(gateway, (l) => l.event === 'store_degraded');
      expect(degraded.level).toBe(40);
      expect(jsonLines(gateway.output()).filter((l) => l.event === 'store_degraded')).toHaveLength(1);
    },
    TEST_TIMEOUT_MS,
  );

  it(
    'prompts only with --log-prompts; no request lines with --no-request-log; pretty lines when asked',
    async () => {
      gateway = await start(['--log-prompts']);
      await client(gateway).chat.completions.create({ model: 'm', messages: [{ role: 'user', content: PROMPT }] });
      const line = await waitForLine(gateway, (l) => l.msg === 'request' && l.route === 'chat');
      expect(line.prompt).toContain('nightingale');
      expect(gateway.output()).not.toContain(GATEWAY_KEY);
      gateway.kill();
      await gateway.exited;

      gateway = await start(['--no-request-log']);
      await client(gateway).chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'quiet' }] });
      // Stopped gracefully (SIGTERM drains, then exits), its output is complete: a request line would be in it by now,
      // however long the machine took to write it.
      gateway.child.kill('SIGTERM');
      expect(await gateway.exited).toBe(0);
      expect(jsonLines(gateway.output()).filter((l) => l.msg === 'request')).toHaveLength(0);

      gateway = await start(['--log-format', 'pretty']);
      await client(gateway).chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'pretty' }] });
      const deadline = Date.now() + LINE_WAIT_MS;
      while (!/INFO.*request/.test(gateway.output()) && Date.now() < deadline)
        await new Promise((resolve) => setTimeout(resolve, 20));
      expect(gateway.output()).toMatch(/INFO.*request/);
      expect(jsonLines(gateway.output())).toHaveLength(0);
    },
    TEST_TIMEOUT_MS,
  );
});

describe('request lines that join', () => {
  let dir: string;
  let collector: Server | undefined;
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'gateway-logs-'));
  });
  afterAll(async () => {
    rmSync(dir, { recursive: true, force: true });
    await new Promise((resolve) => (collector ? collector.close(resolve) : resolve(undefined)));
  });
  /** The request log file's lines so far. */
  const fileLines = (file: string) =>
    readFileSync(file, 'utf8')
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l) as Record<string, any>);
  async function waitForFileLine(
    file: string,
    match: (line: Record<string, any>) => boolean,
  ): Promise<Record<string, any>> {
    const deadline = Date.now() + LINE_WAIT_MS;
    for (;;) {
      let found: Record<string, any> | undefined;
      try {
        found = fileLines(file).find(match);
      } catch {
        // not written yet
      }
      if (found) return found;
      if (Date.now() > deadline) throw new Error(`no matching line in ${file}`);
      await new Promise((resolve) => setTimeout(resolve, 20)); // polling interval
    }
  }

  it(
    'a stream: one line with its outcome, upstream, trace and span, TTFT and cost; the request log file has the same request id, trace and upstream',
    async () => {
      // An OTLP/HTTP receiver that takes every export: tracing is on, and the line names the request's span.
      collector = createServer((req, res) => {
        req.resume();
        req.on('end', () => res.writeHead(200, { 'content-type': 'application/json' }).end('{}'));
      });
      await new Promise<void>((resolve) => collector!.listen(0, '127.0.0.1', resolve));
      const port = (collector.address() as { port: number }).port;
      const file = join(dir, 'stream.jsonl');
      gateway = await start(['--otlp-endpoint', `http://127.0.0.1:${port}`, '--request-log', file]);
      const stream = await client(gateway)
        .chat.completions.create({
          model: 'gpt-4o-mini',
          stream: true,
          messages: [{ role: 'user', content: `${PROMPT} stream` }],
        })
        .withResponse();
      for await (const _ of stream.data) void _;
      const requestId = stream.response.headers.get('x-request-id');
      const line = await waitForLine(gateway, (l) => l.msg === 'request' && l.reqId === requestId);
      expect(line).toMatchObject({
        level: 30,
        route: 'chat',
        status: 200,
        outcome: 'miss',
        upstream: 'upstream',
        model: 'gpt-4o-mini',
      });
      expect(line.traceId).toMatch(/^[0-9a-f]{32}$/);
      expect(line.spanId).toMatch(/^[0-9a-f]{16}$/);
      expect(line.ttftMs).toBeGreaterThanOrEqual(20);
      expect(line.ttftMs).toBeLessThanOrEqual(line.totalMs);
      expect(line.costUsd).toBeGreaterThan(0);
      expect(line.usage).toEqual({ in: expect.any(Number), out: expect.any(Number) });
      const entry = await waitForFileLine(file, (l) => l.reqId === requestId);
      expect(entry).toMatchObject({
        traceId: line.traceId,
        spanId: line.spanId,
        upstream: 'upstream',
        status: 200,
        outcome: 'miss',
        cost: line.costUsd,
      });
    },
    TEST_TIMEOUT_MS,
  );

  it(
    "a refusal is its request's one line; a provider's 400 is upstream_rejected and its 503 upstream_error, each with what the provider said",
    async () => {
      const file = join(dir, 'errors.jsonl');
      gateway = await start([
        '--breaker-failures',
        '2',
        '--retries',
        '0',
        '--breaker-open',
        '60',
        '--request-log',
        file,
      ]);
      const openai = client(gateway);
      // The provider refuses a body it cannot read (messages not a list): the client gets its 400 as it was.
      const rejected = await fetch(`${gateway.url}/v1/chat/completions`, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${GATEWAY_KEY}`,
          'content-type': 'application/json',
          'x-request-id': 'rejected-1',
        },
        body: JSON.stringify({ model: 'm', messages: 'not a list' }),
      });
      expect(rejected.status).toBe(400);
      const rejectedLine = await waitForLine(gateway, (l) => l.msg === 'request' && l.reqId === 'rejected-1');
      expect(rejectedLine).toMatchObject({
        status: 400,
        outcome: 'error',
        error: 'upstream_rejected',
        upstream: 'upstream',
      });
      expect(rejectedLine.upstreamError).toContain('invalid_request_error');

      provider.setMode('error503');
      for (let i = 0; i < 2; i++) {
        await expect(
          openai.chat.completions.create(
            { model: 'm', messages: [{ role: 'user', content: `${PROMPT} ${i}` }] },
            { headers: { 'x-request-id': `failed-${i}` } },
          ),
        ).rejects.toMatchObject({ status: 503 });
      }
      const failed = await waitForLine(gateway, (l) => l.msg === 'request' && l.reqId === 'failed-0');
      expect(failed).toMatchObject({ status: 503, outcome: 'error', error: 'upstream_error' });
      expect(typeof failed.upstreamError).toBe('string');
      expect(failed.upstreamError.length).toBeLessThanOrEqual(1025);

      for (let i = 0; i < 3; i++) {
        await expect(
          openai.chat.completions.create(
            { model: 'm', messages: [{ role: 'user', content: `${PROMPT} refused ${i}` }] },
            { headers: { 'x-request-id': `refused-${i}` } },
          ),
        ).rejects.toMatchObject({ code: 'circuit_open' });
      }
      const refused = await waitForLine(gateway, (l) => l.msg === 'request' && l.reqId === 'refused-2');
      expect(refused).toMatchObject({ status: 503, outcome: 'refused', error: 'circuit_open', upstream: 'upstream' });
      // Nothing else about a refusal: no warning per request (the breaker's opening is its own line, once).
      const output = gateway.output();
      for (let i = 0; i < 3; i++) expect(output.split('\n').filter((l) => l.includes(`refused-${i}`))).toHaveLength(1);
      expect(
        jsonLines(output).filter((l) => l.level >= 40 && l.msg !== 'request' && l.event !== 'breaker_transition'),
      ).toEqual([]);
      expect(jsonLines(output).filter((l) => l.event === 'breaker_transition' && l.to === 'open')).toHaveLength(1);
      // The request log file joins on the same ids, with the same error codes.
      expect(await waitForFileLine(file, (l) => l.reqId === 'refused-2')).toMatchObject({
        error: 'circuit_open',
        upstream: 'upstream',
        status: 503,
      });
      expect(await waitForFileLine(file, (l) => l.reqId === 'rejected-1')).toMatchObject({
        error: 'upstream_rejected',
        status: 400,
      });
    },
    TEST_TIMEOUT_MS,
  );

  it(
    'control-plane requests (health, metrics, the status page) are lines at debug: absent at info',
    async () => {
      const auth = { authorization: `Bearer ${GATEWAY_KEY}` };
      const controlTraffic = async (g: GatewayProcess) => {
        for (const path of ['/health', '/health/live', '/orchestrator/metrics', '/orchestrator'])
          await (await fetch(`${g.url}${path}`, { headers: auth })).arrayBuffer();
        // Written after them, in order: once this line is out, theirs would be too.
        await client(g).chat.completions.create({
          model: 'm',
          messages: [{ role: 'user', content: 'after the probes' }],
        });
        await waitForLine(g, (l) => l.msg === 'request' && l.route === 'chat');
      };
      gateway = await start();
      await controlTraffic(gateway);
      expect(jsonLines(gateway.output()).filter((l) => l.msg === 'request' && l.route !== 'chat')).toEqual([]);
      gateway.kill();
      await gateway.exited;

      gateway = await start(['--log-level', 'debug']);
      await controlTraffic(gateway);
      const control = jsonLines(gateway.output()).filter((l) => l.msg === 'request' && l.route !== 'chat');
      expect(control.map((l) => l.route).sort()).toEqual([
        '/health',
        '/health/live',
        '/orchestrator',
        '/orchestrator/metrics',
      ]);
      for (const l of control) expect(l.level).toBe(20);
    },
    TEST_TIMEOUT_MS,
  );
});
