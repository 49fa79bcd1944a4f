import { afterEach, describe, expect, it } from '@jest/globals';
import type { LoggerService } from '@nestjs/common';
import { escapeKey } from '../../apps/mock-provider/src/key-quotes.js';
import { startMockProvider } from '../../apps/mock-provider/src/index.js';
import { ensureBuilt, startGatewayProcess } from '../support/gateway-process.js';
import { postJson, sseData, startGateway, type GatewayUnderTest } from '../support/gateway-harness.js';

/**
 * A provider that quotes the key it was sent (the gateway's provider key) in an error, in every shape and JSON
 * escaping of the APIs the gateway speaks (the mock's `mock:quote-key-*` markers): the tenant never gets the key,
 * neither in the bytes nor once it parses them, and the gateway's log never holds it.
 */
const PROVIDER_KEY = 'sk-proj-Redact9-key-4f1c-8a2e-b7d9e0';
const FORMS = [PROVIDER_KEY, escapeKey(PROVIDER_KEY, 'dash'), escapeKey(PROVIDER_KEY, 'all'), PROVIDER_KEY.slice(-12)];
const ESCAPES = ['plain', 'dash', 'all'] as const;
// Shapes whose plain form was redacted already (a relayed error body or error event): only escaped forms are new.
const ESCAPED = ['dash', 'all'] as const;

/** Everything a Nest logger is told. */
class CapturingLogger implements LoggerService {
  readonly lines: string[] = [];
  log = (...args: unknown[]) => void this.lines.push(args.map(String).join(' '));
  error = this.log;
  warn = this.log;
  debug = this.log;
  verbose = this.log;
}

function expectClean(text: string): void {
  for (const form of FORMS) expect(text).not.toContain(form);
  // As the client's JSON parser reads it: each event's data, and a whole JSON body.
  const parsed = sseData(text).filter((data) => data !== '[DONE]');
  if (parsed.length === 0 && text.trimStart().startsWith('{')) parsed.push(text);
  for (const data of parsed) expect(JSON.stringify(JSON.parse(data))).not.toContain(PROVIDER_KEY);
}

const chat = (marker: string, stream: boolean) => ({
  model: 'gpt-4o',
  stream,
  messages: [{ role: 'user', content: `please ${marker}` }],
});

describe('Provider keys in error shapes', () => {
  let gateway: GatewayUnderTest | undefined;
  let logger: CapturingLogger;
  afterEach(async () => {
    await gateway?.close();
    gateway = undefined;
  });

  const start = async (provider: 'openai' | 'anthropic' | 'llama' = 'openai') => {
    logger = new CapturingLogger();
    const env = { openai: 'OPENAI_API_KEY', anthropic: 'ANTHROPIC_API_KEY', llama: 'LLAMA_API_KEY' }[provider];
    gateway = await startGateway({
      flags: ['--provider', provider, '--retries', '0'],
      env: { [env]: PROVIDER_KEY },
      logger,
    });
    return gateway;
  };

  const post = (path: string, body: unknown, headers: Record<string, string> = {}) =>
    postJson(`${gateway!.gatewayUrl}${path}`, body, headers);

  const expectLogClean = () => {
    for (const line of logger.lines) for (const form of FORMS) expect(line).not.toContain(form);
  };

  it.each(ESCAPES)('chat, relayed stream: an `event: error` with no "error" field (%s)', async (escape) => {
    await start();
    const answer = await post('/v1/chat/completions', chat(`mock:quote-key-chat-${escape}`, true));
    expect(answer.text).toContain('[redacted]');
    expectClean(answer.text);
    expectLogClean();
  });

  it.each(ESCAPES)(
    'chat, relayed stream: a chunk with "error": null quoting the key in another field (%s)',
    async (escape) => {
      await start();
      const answer = await post('/v1/chat/completions', chat(`mock:quote-key-null-${escape}`, true));
      expect(answer.text).toContain('[redacted]');
      expectClean(answer.text);
    },
  );

  it.each([true, false])('chat: a key cut across two chunks (client stream: %s, upstream SSE)', async (stream) => {
    await start();
    for (const escape of ESCAPES) {
      const answer = await post('/v1/chat/completions', chat(`mock:quote-key-split-${escape}`, stream));
      expect(answer.text).toContain('[redacted]');
      expectClean(answer.text);
    }
  });

  it.each(ESCAPED)('chat: a JSON error body (%s)', async (escape) => {
    await start();
    const answer = await post('/v1/chat/completions', chat(`mock:quote-key-body-${escape}`, false));
    expect(answer.status).toBe(401);
    expect(answer.text).toContain('[redacted]');
    expectClean(answer.text);
    expectLogClean();
  });

  it.each(ESCAPED)("/v1/responses: the Responses API's own `event: error` (%s)", async (escape) => {
    await start();
    const answer = await post('/v1/responses', {
      model: 'gpt-4o',
      stream: true,
      input: `mock:quote-key-responses-${escape}`,
    });
    expect(answer.text).toContain('[redacted]');
    expectClean(answer.text);
  });

  it.each(ESCAPED)('Anthropic: an `event: error` in a relayed stream (%s)', async (escape) => {
    await start('anthropic');
    const answer = await post('/v1/messages', {
      model: 'claude-sonnet-4-5',
      max_tokens: 5,
      stream: true,
      messages: [{ role: 'user', content: `mock:quote-key-anthropic-${escape}` }],
    });
    expect(answer.text).toContain('[redacted]');
    expectClean(answer.text);
  });

  it.each(ESCAPED)('llama.cpp: an error object in a native stream (%s)', async (escape) => {
    await start('llama');
    const answer = await post('/completion', { prompt: `mock:quote-key-llama-${escape}`, stream: true });
    expect(answer.text).toContain('[redacted]');
    expectClean(answer.text);
  });

  it("the built gateway's log (stdout, JSON lines at info, prompts included) never holds the key in any shape", async () => {
    await ensureBuilt();
    const provider = await startMockProvider({ latencyMs: 1 });
    const gatewayProcess = await startGatewayProcess(
      ['--upstream', provider.url, '--retries', '0', '--log-format', 'json', '--log-level', 'info', '--log-prompts'],
      {
        OPENAI_API_KEY: PROVIDER_KEY,
      },
    );
    try {
      for (const escape of ESCAPES) {
        for (const shape of ['body', 'chat', 'null', 'split'] as const) {
          expectClean(
            (
              await postJson(
                `${gatewayProcess.url}/v1/chat/completions`,
                chat(`mock:quote-key-${shape}-${escape}`, shape !== 'body'),
              )
            ).text,
          );
        }
        expectClean(
          (
            await postJson(`${gatewayProcess.url}/v1/responses`, {
              model: 'gpt-4o',
              stream: true,
              input: `mock:quote-key-responses-${escape}`,
            })
          ).text,
        );
      }
      // The request lines are written in batches: the last one is waited for, not a fixed time.
      for (let lines = 0; lines < 15; lines = gatewayProcess.output().split('"route"').length - 1)
        await new Promise((resolve) => setTimeout(resolve, 50));
      for (const form of FORMS) expect(gatewayProcess.output()).not.toContain(form);
    } finally {
      await gatewayProcess.stop();
      await provider.close();
    }
  }, 240_000);
});
