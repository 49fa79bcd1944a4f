import { afterEach, beforeAll, describe, expect, it } from '@jest/globals';
import { spawnSync } from 'node:child_process';
import { request } from 'node:http';
import { startMockProvider, type MockProvider } from '../../apps/mock-provider/src/index.js';
import { uniquePrompt } from '../support/gateway-harness.js';
import { ensureBuilt, startGatewayProcess, type AppProcess } from '../support/gateway-process.js';
import { parseMetrics, valueOf, type Sample } from '../support/metrics-text.js';

/**
 * The metrics and log lines of `--workers 2` as one port: label caps hold
 * for the port (not per worker), and a breaker change made by one worker and
 * applied by the other is counted and logged once.
 */

const METRICS = '/orchestrator/metrics';

let provider: MockProvider | undefined;
let gateway: AppProcess | undefined;
beforeAll(async () => {
  await ensureBuilt();
}, 180_000);
afterEach(async () => {
  await gateway?.stop();
  gateway = undefined;
  await provider?.close();
  provider = undefined;
});

/** A chat request on a connection of its own: node:cluster hands each new connection to the next worker in turn. */
function askOnNewConnection(url: string, body: object): Promise<{ status: number; json: Record<string, any> }> {
  const text = JSON.stringify(body);
  return new Promise((resolve, reject) => {
    const req = request(
      `${url}/v1/chat/completions`,
      {
        method: 'POST',
        agent: false,
        headers: {
          'content-type': 'application/json',
          'content-length': Buffer.byteLength(text),
          authorization: 'Bearer sk-workers-metrics',
        },
      },
      (res) => {
        let data = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => (data += chunk));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, json: JSON.parse(data) as Record<string, any> }));
      },
    );
    req.on('error', reject);
    req.end(text);
  });
}

async function until<T>(
  what: string,
  read: () => Promise<T>,
  condition: (value: T) => boolean,
  timeoutMs = 30_000,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await read();
    if (condition(value)) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 25)); // polling interval
  }
}

const scrape = async (url: string): Promise<Sample[]> => parseMetrics(await (await fetch(`${url}${METRICS}`)).text());

/** A `--workers 2` gateway whose two workers both report. */
async function start(flags: string[] = []): Promise<AppProcess> {
  provider = await startMockProvider({ latencyMs: 5 });
  const started = await startGatewayProcess(['--upstream', provider.url, '--workers', '2', ...flags], {}, 120_000);
  gateway = started;
  await until(
    'both workers to report',
    () => scrape(started.url),
    (s) => valueOf(s, 'gateway_workers', { state: 'reporting' }) === 2,
    120_000,
  );
  return started;
}

describe('--workers 2: one port, one set of bounds and counts', () => {
  it('70 distinct model names over two workers (35 each, within a worker cap of 50): the port labels 50 and "other"', async () => {
    const g = await start();
    let promptTokens = 0;
    for (let i = 0; i < 70; i++) {
      const answer = await askOnNewConnection(g.url, {
        model: `model-${i}`,
        messages: [{ role: 'user', content: uniquePrompt('models') }],
      });
      expect(answer.status).toBe(200);
      promptTokens += answer.json.usage.prompt_tokens as number;
    }
    const samples = await until(
      'every token to be counted',
      () => scrape(g.url),
      (s) => valueOf(s, 'gateway_tokens_total', { direction: 'in' }) === promptTokens,
    );
    const models = new Set(samples.filter((s) => s.name === 'gateway_tokens_total').map((s) => s.labels.model));
    expect(models.size).toBe(51);
    expect(models.has('other')).toBe(true);
    // The port's scrape (the workers' added up by the primary) is valid exposition too.
    const text = await (await fetch(`${g.url}${METRICS}`)).text();
    const checked = spawnSync('promtool', ['check', 'metrics'], { input: text, encoding: 'utf8' });
    if (checked.error)
      throw new Error('promtool is not installed: run `npm run test:prerequisites` (Debian package prometheus)');
    expect({ status: checked.status, problems: `${checked.stdout}${checked.stderr}` }).toEqual({
      status: 0,
      problems: '',
    });
  });

  it('the breaker opened by one worker and applied by the other: one transition from 0, one line that says it opened', async () => {
    const g = await start(['--breaker-failures', '2', '--retries', '0', '--breaker-open', '60']);
    const before = await scrape(g.url);
    expect(
      before.some(
        (s) =>
          s.name === 'orchestrator_breaker_transitions_total' && s.labels.from === 'closed' && s.labels.to === 'open',
      ),
    ).toBe(true);
    expect(valueOf(before, 'orchestrator_breaker_transitions_total', { from: 'closed', to: 'open' })).toBe(0);
    provider!.setMode('error503');
    const body = () => ({ model: 'm', messages: [{ role: 'user', content: uniquePrompt('outage') }] });
    await until(
      'the breaker to open',
      () => askOnNewConnection(g.url, body()),
      (a) => a.json.error?.code === 'circuit_open',
    );
    // Both workers refuse: the one that opened it, and the one told.
    for (let i = 0; i < 4; i++) expect((await askOnNewConnection(g.url, body())).json.error?.code).toBe('circuit_open');
    const after = await scrape(g.url);
    expect(valueOf(after, 'orchestrator_breaker_transitions_total', { from: 'closed', to: 'open' })).toBe(1);
    const lines = () =>
      g
        .output()
        .split('\n')
        .filter((line) => line.startsWith('{'))
        .map((line) => JSON.parse(line) as Record<string, any>);
    // Each worker writes its lines in order: once both have logged a refusal, a line of theirs about the opening
    // (made there, or applied there) would be out too.
    await until(
      'both workers to log a refusal',
      async () => lines(),
      (l) => new Set(l.filter((x) => x.msg === 'request' && x.error === 'circuit_open').map((x) => x.pid)).size === 2,
    );
    const opened = lines().filter((l) => l.event === 'breaker_transition' && l.to === 'open');
    expect(opened).toHaveLength(1);
  });
});
