import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { mkdtempSync, renameSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { hashCredential, startMockProvider, type MockProvider } from '../../apps/mock-provider/src/index.js';
import { StatusBoard } from '../../apps/gateway/src/status/status-board.js';
import { startGateway, uniquePrompt, type GatewayUnderTest } from '../support/gateway-harness.js';

/**
 * `--upstreams-file` reloaded while the gateway runs, over sockets, in front
 * of simulated providers that count every call: a member added serves only
 * after its first good health check; a member removed gets no new call while
 * its stream in flight finishes whole, then disappears; SIGHUP reloads; a file
 * that cannot be used keeps the upstreams in force, with a warning.
 *
 * The file is a symlink, as a Kubernetes ConfigMap mounts one: replacing the
 * link is a change the gateway sees in its directory; rewriting the target in
 * place is not (only SIGHUP reloads it).
 */

const KEY_1 = 'rotatedOne0123456789abcd';
const KEY_2 = 'rotatedTwo0123456789abcd';

interface UpstreamLine {
  name: string;
  pool: string;
  health: string;
  available: boolean;
  inFlight: number;
  draining?: boolean;
}
interface Health {
  upstreams: UpstreamLine[];
  breakers: Array<{ name: string }>;
}

/**
 * Polls a condition until it holds. The test's own timeout fails a wait that never ends; `end` (in the suite's
 * afterAll) stops such a wait, so that nothing polls a gateway that is gone.
 */
function waits() {
  let ended = false;
  const until = async (condition: () => boolean | Promise<boolean>): Promise<void> => {
    while (!ended) {
      try {
        if (await condition()) return;
      } catch (error) {
        if (ended) return;
        throw error;
      }
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  };
  return { until, end: () => (ended = true) };
}

/** An upstreams file behind a symlink: `link` swaps the link to a new target, `rewrite` edits the target in place. */
function linkedFile() {
  const shown = mkdtempSync(join(tmpdir(), 'npo-reload-link-'));
  const data = mkdtempSync(join(tmpdir(), 'npo-reload-data-'));
  const path = join(shown, 'upstreams.json');
  let version = 0;
  let target = '';
  const write = (document: unknown) =>
    writeFileSync(target, typeof document === 'string' ? document : JSON.stringify(document));
  const link = (document: unknown) => {
    target = join(data, `v${++version}.json`);
    write(document);
    const temporary = join(shown, `.upstreams.json.${version}`);
    symlinkSync(target, temporary);
    renameSync(temporary, path);
  };
  return { path, link, rewrite: write };
}

describe('an upstreams file reloaded while the gateway runs (--provider openai)', () => {
  let a: MockProvider;
  let b: MockProvider;
  let c: MockProvider;
  let g: GatewayUnderTest;
  const { until, end } = waits();
  const file = linkedFile();
  const lines: Array<{ level: string; text: string }> = [];
  const logger = {
    log: (m: unknown) => lines.push({ level: 'log', text: String(m) }),
    warn: (m: unknown) => lines.push({ level: 'warn', text: String(m) }),
    error: (m: unknown) => lines.push({ level: 'error', text: String(m) }),
  };
  const logged = (level: string, text: string) => lines.some((l) => l.level === level && l.text.includes(text));

  let client: OpenAI;
  const ask = (content: string) =>
    client.chat.completions.create({ model: 'mock-model', messages: [{ role: 'user', content }] }).withResponse();
  const health = async () => (await (await fetch(`${g.gatewayUrl}/health`)).json()) as Health;
  const member = async (name: string) => (await health()).upstreams.find((u) => u.name === name && !u.draining);
  const chatCalls = (mock: MockProvider) => mock.calls().filter((call) => call.route === '/v1/chat/completions');
  /** What the status page shows (its snapshot, as the page's event stream sends it). */
  const board = () => g.app.get(StatusBoard).snapshot();
  const metrics = async () => (await fetch(`${g.gatewayUrl}/orchestrator/metrics`)).text();

  beforeAll(async () => {
    [a, b, c] = await Promise.all([
      startMockProvider({ latencyMs: 5 }),
      startMockProvider({ latencyMs: 5 }),
      startMockProvider({ latencyMs: 5 }),
    ]);
    file.link({ upstreams: [{ name: 'a', url: a.url }] });
    g = await startGateway({
      provider: a,
      // Breakers that never open here: what keeps a member from calls is its place in the pool, not its failures.
      flags: [
        '--upstreams-file',
        file.path,
        '--health-interval',
        '0.05',
        '--retries',
        '0',
        '--breaker-failures',
        '1000',
      ],
      logger,
    });
    client = new OpenAI({ baseURL: `${g.gatewayUrl}/v1`, apiKey: 'client-key-0123456789', maxRetries: 0 });
  });

  afterAll(async () => {
    end();
    await g?.close();
    await Promise.all([a, b, c].map((mock) => mock?.close()));
  });

  it('sends a member added to the file no call until its first good health check, then serves with it', async () => {
    // c's health route (the OpenAI model list) answers 503, and so would its chat route; a fails too.
    c.setMode('error503');
    a.setMode('error503');
    file.link({
      upstreams: [
        { name: 'a', url: a.url },
        { name: 'c', url: c.url },
      ],
    });
    await until(() => logged('log', 'upstreams file reloaded (file changed): 2 upstream(s); added c'));
    await until(() => c.calls().filter((call) => call.route === '/v1/models').length >= 2);
    expect(await member('c')).toMatchObject({ pool: 'upstream', health: 'pending', available: false });

    // Every call goes to a (and fails there): c, not yet checked good, is not even tried last.
    for (let i = 0; i < 3; i++) await expect(ask(uniquePrompt('before'))).rejects.toMatchObject({ status: 503 });
    expect(chatCalls(a)).toHaveLength(3);
    expect(chatCalls(c)).toHaveLength(0);

    c.setMode('ok');
    await until(async () => (await member('c'))?.available === true);
    const { data, response } = await ask(uniquePrompt('after'));
    expect(response.headers.get('x-orchestrator-upstream')).toBe('c');
    expect(data.choices[0].message.content).toMatch(/^Echo: after /);
    expect(chatCalls(c)).toHaveLength(1);
    a.setMode('ok');
  });

  it('sends a member removed from the file no new call, while its stream in flight finishes whole; then it is gone', async () => {
    // Events a second apart: the stream is still running when the removal lands.
    a.setMode('slowStream', { slowChunkDelayMs: 1_000 });
    const earlier = chatCalls(a).length;
    const prompt = uniquePrompt('long');
    const stream = await client.chat.completions
      .create({ model: 'mock-model', messages: [{ role: 'user', content: prompt }], stream: true })
      .withResponse();
    expect(stream.response.headers.get('x-orchestrator-upstream')).toBe('a');
    const chunks = stream.data[Symbol.asyncIterator]();
    const first = await chunks.next();
    expect(first.done).toBe(false);

    file.link({ upstreams: [{ name: 'c', url: c.url }] });
    await until(() => logged('log', 'upstreams file reloaded (file changed): 1 upstream(s); removed a (draining)'));
    const draining = (await health()).upstreams.find((u) => u.name === 'a');
    expect(draining).toMatchObject({ draining: true, available: false, inFlight: 1 });
    expect(board().upstreams.find((u) => u.name === 'a')?.member).toMatchObject({ draining: true, available: false });
    expect(await metrics()).toMatch(/^orchestrator_breaker_state\{name="a"\} 0$/m);

    const before = chatCalls(c).length;
    for (let i = 0; i < 3; i++) {
      const { response } = await ask(uniquePrompt('during'));
      expect(response.headers.get('x-orchestrator-upstream')).toBe('c');
    }
    expect(chatCalls(a)).toHaveLength(earlier + 1);
    expect(chatCalls(c).length - before).toBe(3);

    let text = first.value?.choices[0]?.delta?.content ?? '';
    let finish: string | null | undefined;
    for (let next = await chunks.next(); !next.done; next = await chunks.next()) {
      text += next.value.choices[0]?.delta?.content ?? '';
      finish = next.value.choices[0]?.finish_reason ?? finish;
    }
    expect(text).toBe(`Echo: ${prompt}`);
    expect(finish).toBe('stop');
    expect(a.calls().find((call) => call.route === '/v1/chat/completions' && call.stream)?.outcome).toBe('ok');

    // Drained: the member, its breaker and its limiter are gone from /health, the status page and the metrics.
    await until(async () => !(await health()).upstreams.some((u) => u.name === 'a'));
    expect((await health()).breakers.map((x) => x.name)).not.toContain('a');
    expect(board().upstreams.map((u) => u.name)).toEqual(['c']);
    const after = await metrics();
    expect(after).toMatch(/^orchestrator_breaker_state\{name="c"\} 0$/m);
    expect(after).not.toMatch(/name="a"|limiter="a"/);
    a.setMode('ok');
  });

  it('reloads on SIGHUP, which reads a change no watcher sees (the link target rewritten in place)', async () => {
    file.rewrite({
      upstreams: [
        { name: 'c', url: c.url },
        { name: 'b', url: b.url, apiKey: KEY_1 },
      ],
    });
    process.emit('SIGHUP', 'SIGHUP');
    await until(() => logged('log', 'upstreams file reloaded (SIGHUP): 2 upstream(s); added b'));
    await until(async () => (await member('b'))?.available === true);
    // b takes calls when c cannot: sent its own key.
    c.setMode('error503');
    const { response } = await ask(uniquePrompt('sighup'));
    expect(response.headers.get('x-orchestrator-upstream')).toBe('b');
    expect(new Set(chatCalls(b).map((call) => call.authHash))).toEqual(new Set([hashCredential(KEY_1)]));
  });

  it('gives a member a new key in place: it stays in rotation, and its next call carries the new key', async () => {
    const checks = b.calls().filter((call) => call.route === '/v1/models').length;
    file.rewrite({
      upstreams: [
        { name: 'c', url: c.url },
        { name: 'b', url: b.url, apiKey: KEY_2 },
      ],
    });
    process.emit('SIGHUP', 'SIGHUP');
    await until(() => logged('log', 'upstreams file reloaded (SIGHUP): 2 upstream(s); new key for b'));
    expect(await member('b')).toMatchObject({ health: 'up', available: true });
    const { response } = await ask(uniquePrompt('rekeyed'));
    expect(response.headers.get('x-orchestrator-upstream')).toBe('b');
    expect(chatCalls(b).at(-1)?.authHash).toBe(hashCredential(KEY_2));
    // Not checked again: the same server with rotated credentials.
    expect(b.calls().filter((call) => call.route === '/v1/models')).toHaveLength(checks);
    c.setMode('ok');
  });

  it('keeps the upstreams in force when the new file cannot be used, and says why in one warning', async () => {
    file.link({
      upstreams: [
        { name: 'c', url: c.url },
        { name: 'b', url: 'ftp://127.0.0.1:1', apiKey: KEY_2 },
      ],
    });
    await until(() => logged('warn', 'upstreams file not reloaded'));
    const warning = lines.find((l) => l.level === 'warn' && l.text.includes('upstreams file not reloaded'))!.text;
    expect(warning).toBe(
      'upstreams file not reloaded (file changed), the previous 2 upstream(s) stay in force: upstreams[1]: "url" must use http: or https:, got "ftp:"',
    );
    expect(lines.map((l) => l.text).join('\n')).not.toContain(KEY_2);
    expect((await health()).upstreams.map((u) => [u.name, u.available])).toEqual([
      ['c', true],
      ['b', true],
    ]);
    const { response } = await ask(uniquePrompt('kept'));
    expect(response.status).toBe(200);
  });
});

describe('an upstreams file reloaded while the gateway runs (--provider llama)', () => {
  let first: MockProvider;
  let second: MockProvider;
  let g: GatewayUnderTest;
  const { until, end } = waits();
  const file = linkedFile();
  const lines: string[] = [];
  const logger = {
    log: (m: unknown) => lines.push(String(m)),
    warn: (m: unknown) => lines.push(String(m)),
    error: () => undefined,
  };
  const completion = (prompt: string) =>
    fetch(`${g.gatewayUrl}/completion`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ prompt, n_predict: 4 }),
    });
  const member = async (name: string) =>
    ((await (await fetch(`${g.gatewayUrl}/health`)).json()) as Health).upstreams.find((u) => u.name === name);
  const completions = (mock: MockProvider) => mock.calls().filter((call) => call.route === '/completion');

  beforeAll(async () => {
    [first, second] = await Promise.all([startMockProvider({ latencyMs: 5 }), startMockProvider({ latencyMs: 5 })]);
    file.link({ upstreams: [{ name: 'gpu-1', url: first.url }] });
    g = await startGateway({
      provider: first,
      flags: [
        '--provider',
        'llama',
        '--upstreams-file',
        file.path,
        '--health-interval',
        '0.05',
        '--retries',
        '0',
        '--breaker-failures',
        '1000',
      ],
      logger,
    });
  });

  afterAll(async () => {
    end();
    await g?.close();
    await Promise.all([first?.close(), second?.close()]);
  });

  it('puts a server added to the file in rotation at its first /health 200, and not before', async () => {
    // The new server is loading its model (/health 503); the first one fails too.
    second.setMode('error503');
    first.setMode('error503');
    file.link({
      upstreams: [
        { name: 'gpu-1', url: first.url },
        { name: 'gpu-2', url: second.url },
      ],
    });
    await until(() =>
      lines.some((l) => l.startsWith('upstreams file reloaded (file changed): 2 upstream(s); added gpu-2')),
    );
    await until(() => second.stats().healthChecks >= 2);
    expect(await member('gpu-2')).toMatchObject({ health: 'loading', available: false });
    for (let i = 0; i < 2; i++) expect((await completion(uniquePrompt('loading'))).status).toBe(503);
    expect(completions(second)).toHaveLength(0);

    second.setMode('ok');
    await until(async () => (await member('gpu-2'))?.health === 'up');
    const answer = await completion(uniquePrompt('up'));
    expect(answer.status).toBe(200);
    expect(answer.headers.get('x-orchestrator-upstream')).toBe('gpu-2');
    expect(completions(second)).toHaveLength(1);
    first.setMode('ok');
  });
});
