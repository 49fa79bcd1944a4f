import { afterAll, afterEach, beforeAll, describe, expect, it } from '@jest/globals';
import OpenAI from 'openai';
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
});

const start = (flags: string[] = []) => startGatewayProcess(['--upstream', provider.url, '--gateway-keys', GATEWAY_KEY, ...flags]);
const client = (g: GatewayProcess) => new OpenAI({ baseURL: `${g.url}/v1`, apiKey: GATEWAY_KEY, maxRetries: 0 });

/** Every JSON line of the output so far. */
function jsonLines(output: string): Array<Record<string, any>> {
  return output
    .split('\n')
    .filter((line) => line.startsWith('{'))
    .map((line) => JSON.parse(line) as Record<string, any>);
}

async function waitForLine(g: GatewayProcess, match: (line: Record<string, any>) => boolean): Promise<Record<string, any>> {
  const deadline = Date.now() + 5_000;
  for (;;) {
    const found = jsonLines(g.output()).find(match);
    if (found) return found;
    if (Date.now() > deadline) throw new Error(`no matching log line in:\n${g.output()}`);
    await new Promise((resolve) => setTimeout(resolve, 20)); // polling interval
  }
}

describe('gateway logs', () => {
  it('one JSON line per request with its facts, and neither the key nor the prompt anywhere', async () => {
    gateway = await start();
    const openai = client(gateway);
    const params = { model: 'gpt-4o-mini', temperature: 0, messages: [{ role: 'user' as const, content: PROMPT }] };
    const [first] = await Promise.all([openai.chat.completions.create(params).withResponse(), openai.chat.completions.create(params)]);
    const requestId = first.response.headers.get('x-request-id');
    await openai.chat.completions.create(params);

    const line = await waitForLine(gateway, (l) => l.msg === 'request' && l.reqId === requestId);
    expect(line).toMatchObject({ level: 30, method: 'POST', route: 'chat', status: 200, breaker: 'closed', model: 'gpt-4o-mini' });
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

    // A refused key is a line too (401), and the key it tried is not in it either.
    await expect(new OpenAI({ baseURL: `${gateway.url}/v1`, apiKey: 'sk-wrong-key-77aa', maxRetries: 0 }).models.list()).rejects.toMatchObject({ status: 401 });
    await waitForLine(gateway, (l) => l.msg === 'request' && l.status === 401 && l.error === 'invalid_api_key');

    const output = gateway.output();
    expect(output).not.toContain(GATEWAY_KEY);
    expect(output).not.toContain('sk-wrong-key-77aa');
    expect(output).not.toContain('nightingale');
    expect(jsonLines(output).filter((l) => l.msg === 'request' && l.route === 'chat')).toHaveLength(3);
  });

  it("what a client wrote in the request line (its request id, its model name) is redacted and escaped: the line stays one JSON object", async () => {
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
  });

  it('breaker transitions as their own lines (warn when it opens, info when it closes)', async () => {
    gateway = await start(['--breaker-failures', '2', '--retries', '0', '--breaker-open', '60']);
    const openai = client(gateway);
    provider.setMode('error503');
    for (let i = 0; i < 2; i++) {
      await expect(openai.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: `${PROMPT} ${i}` }] })).rejects.toMatchObject({ status: 503 });
    }
    const opened = await waitForLine(gateway, (l) => l.event === 'breaker_transition' && l.to === 'open');
    expect(opened).toMatchObject({ level: 40, breaker: 'upstream', from: 'closed' });
    const failed = await waitForLine(gateway, (l) => l.msg === 'request' && l.status === 503);
    expect(failed.route).toBe('chat');
    provider.setMode('ok');
    await waitForLine(gateway, (l) => l.event === 'breaker_transition' && l.to === 'closed' && l.level === 30);
    expect(gateway.output()).not.toContain('nightingale');
  });

  it('the shared store going away is one line, not one per request', async () => {
    gateway = await start(['--redis', 'redis://127.0.0.1:1', '--redis-timeout', '0.05']);
    const openai = client(gateway);
    for (let i = 0; i < 3; i++) await openai.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: `store ${i}` }] });
    const degraded = await waitForLine(gateway, (l) => l.event === 'store_degraded');
    expect(degraded.level).toBe(40);
    expect(jsonLines(gateway.output()).filter((l) => l.event === 'store_degraded')).toHaveLength(1);
  });

  it('prompts only with --log-prompts; no request lines with --no-request-log; pretty lines when asked', async () => {
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
    const deadline = Date.now() + 5_000;
    while (!/INFO.*request/.test(gateway.output()) && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 20));
    expect(gateway.output()).toMatch(/INFO.*request/);
    expect(jsonLines(gateway.output())).toHaveLength(0);
  });
});
