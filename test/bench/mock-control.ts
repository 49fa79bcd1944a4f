import { Agent, request } from 'undici';
import type { MockCall, MockMode, MockStats, MockTuning } from '../../apps/mock-provider/src/mock-provider.types.js';

export type { MockCall, MockMode, MockStats };

/** Control traffic gets its own connections, so it never queues behind the load it steers. */
let controlAgent: Agent | undefined;

function agent(): Agent {
  controlAgent ??= new Agent({ connections: 4, keepAliveTimeout: 1_000 });
  return controlAgent;
}

/** The mock provider's control API (/__mock/...): never counted, never delayed, never affected by the mode. */
export class MockControl {
  constructor(readonly url: string) {}

  async setMode(mode: MockMode): Promise<{ droppedHungConnections: number }> {
    return (await this.send('POST', '/__mock/mode', { mode })) as { droppedHungConnections: number };
  }

  async configure(tuning: MockTuning): Promise<void> {
    await this.send('POST', '/__mock/config', tuning);
  }

  async reset(): Promise<void> {
    await this.send('POST', '/__mock/reset', {});
  }

  async stats(): Promise<MockStats> {
    return (await this.send('GET', '/__mock/stats')) as MockStats;
  }

  async calls(sinceSeq?: number): Promise<MockCall[]> {
    const query = sinceSeq === undefined ? '' : `?since=${sinceSeq}`;
    return (await this.send('GET', `/__mock/calls${query}`)) as MockCall[];
  }

  private async send(method: 'GET' | 'POST', path: string, body?: unknown): Promise<unknown> {
    const response = await request(`${this.url}${path}`, {
      method,
      dispatcher: agent(),
      headers: body === undefined ? undefined : { 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
      headersTimeout: 10_000,
      bodyTimeout: 10_000,
    });
    const text = await response.body.text();
    if (response.statusCode !== 200) throw new Error(`mock control ${method} ${path}: ${response.statusCode} ${text}`);
    return JSON.parse(text) as unknown;
  }
}

/** GET a JSON document over the harness's own connections (e.g. the gateway's /health). */
export async function getJson(url: string): Promise<unknown> {
  const response = await request(url, { dispatcher: agent(), headersTimeout: 5_000, bodyTimeout: 5_000 });
  return JSON.parse(await response.body.text()) as unknown;
}

/** Closes the harness's control connections (a later call opens new ones). */
export async function closeControlConnections(): Promise<void> {
  const closing = controlAgent;
  controlAgent = undefined;
  await closing?.close();
}
