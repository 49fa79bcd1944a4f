/**
 * Simulated paid model provider (OpenAI, Anthropic and llama.cpp server routes) for the demo, the end-to-end tests
 * and the benchmarks.
 *
 * Built on bare `node:http` rather than Nest on purpose: the stand-in must cost less than anything it is used to
 * measure, so per request it does little beyond parsing JSON and writing the answer.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { NOT_FOUND_BODY, type ApiFamily } from './api-errors.js';
import { CallRecorder, nowMs } from './call-recorder.js';
import { hashCredential, isRecord } from './content.js';
import { Exchange, ExchangeAborted } from './exchange.js';
import { discardBody, parseJson, readBody, writeJson, type BodyResult, type JsonParse } from './http-io.js';
import { applyTuning, checkCount, checkDelay, checkMode, DEFAULT_TUNING, resolveModeOptions } from './mock-config.js';
import type {
  MockCall,
  MockConfig,
  MockMode,
  MockModeOptions,
  MockOutcome,
  MockProvider,
  MockProviderOptions,
  MockStats,
  MockTuning,
} from './mock-provider.types.js';
import type { RouteDefinition } from './route-definition.js';
import { findRoute, HEALTH_PATHS } from './routes.js';
import { FixedAnswers, readBytes } from './fixed-answers.js';
import { QUOTE_KEY_MARKER, quoteKey, type QuoteEscape, type QuoteShape } from './key-quotes.js';

export const DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024;

/** A request whose body holds this is answered with a 500 (in its API's format). */
export const FAIL_MARKER = 'mock:fail-500';
export const DEFAULT_CALL_LOG_LIMIT = 100_000;
const CONTROL_BODY_LIMIT = 1024 * 1024;
const CONTROL_PREFIX = '/__mock/';

const CONTROL_ENDPOINTS: Readonly<Record<string, 'GET' | 'POST'>> = {
  '/__mock/stats': 'GET',
  '/__mock/calls': 'GET',
  '/__mock/config': 'GET',
  '/__mock/mode': 'POST',
  '/__mock/reset': 'POST',
};

interface RequestFacts {
  path: string;
  family: ApiFamily;
  stream: boolean;
  receivedAt: number;
  isHealthCheck: boolean;
  model?: string;
}

function initialOutcome(mode: MockMode): MockOutcome {
  switch (mode) {
    case 'hang':
    case 'reset':
    case 'error503':
    case 'error429':
      return mode;
    default:
      return 'ok';
  }
}

/** Request headers kept in the call log: the ones that change an answer or its billing; never a credential. */
export const RECORDED_HEADERS = [
  'openai-organization',
  'openai-project',
  'anthropic-version',
  'anthropic-beta',
  'x-request-id',
  'x-conversation-id',
  'traceparent',
  'tracestate',
];

function recordedHeaders(req: IncomingMessage): { headers?: Record<string, string> } {
  let headers: Record<string, string> | undefined;
  for (const name of RECORDED_HEADERS) {
    const value = req.headers[name];
    if (typeof value === 'string') (headers ??= {})[name] = value;
  }
  return headers ? { headers } : {};
}

function credentialHash(req: IncomingMessage): string | undefined {
  const authorization = req.headers.authorization;
  if (typeof authorization === 'string' && authorization !== '') {
    return hashCredential(authorization.replace(/^Bearer\s+/i, ''));
  }
  const apiKey = req.headers['x-api-key'];
  if (typeof apiKey === 'string' && apiKey !== '') return hashCredential(apiKey);
  return undefined;
}

/** Why a request without a usable key is refused (`requireKey`), in the words of OpenAI's errors; undefined: accepted. */
function keyRefusal(req: IncomingMessage): string | undefined {
  const authorization = req.headers.authorization;
  const apiKey = req.headers['x-api-key'];
  const key =
    typeof authorization === 'string' && authorization !== ''
      ? authorization.replace(/^Bearer\s+/i, '')
      : typeof apiKey === 'string'
        ? apiKey
        : '';
  if (key === '') return "You didn't provide an API key. You need to provide your API key in an Authorization header.";
  return key.startsWith('sk-')
    ? undefined
    : `Incorrect API key provided: ${key}. You can find your API key at https://platform.openai.com/account/api-keys.`;
}

function splitUrl(rawUrl: string | undefined): { path: string; query: string } {
  const url = rawUrl ?? '/';
  const mark = url.indexOf('?');
  return mark === -1 ? { path: url, query: '' } : { path: url.slice(0, mark), query: url.slice(mark + 1) };
}

function formatUrl(host: string, port: number): string {
  return host.includes(':') ? `http://[${host}]:${port}` : `http://${host}:${port}`;
}

function errorMessage(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

class MockProviderServer implements MockProvider {
  url = '';
  port = 0;
  private current: MockConfig;
  private readonly recorder: CallRecorder;
  private readonly maxBodyBytes: number;
  private readonly sockets = new Set<Socket>();
  /** Requests parked by `hang` mode, kept so they can be dropped on a mode switch or on close. */
  private readonly hung = new Set<Exchange>();
  private readonly fixed?: FixedAnswers;
  private readonly requireKey: boolean;
  private closing: Promise<void> | undefined;
  /** Calls waiting out their latency right now (what `capacity` compares against). */
  private busy = 0;
  private readonly server: Server;

  constructor(options: MockProviderOptions) {
    // Config objects are replaced, never mutated, so an exchange holding the one it arrived under keeps a snapshot.
    this.current = applyTuning(
      {
        ...DEFAULT_TUNING,
        mode: checkMode(options.mode ?? 'ok'),
        modeOptions: resolveModeOptions(options.modeOptions),
      },
      {
        ...(options.latencyMs === undefined ? {} : { latencyMs: options.latencyMs }),
        ...(options.latencyJitterMs === undefined ? {} : { latencyJitterMs: options.latencyJitterMs }),
        ...(options.streamChunkDelayMs === undefined ? {} : { streamChunkDelayMs: options.streamChunkDelayMs }),
        ...(options.model === undefined ? {} : { model: options.model }),
        ...(options.capacity === undefined ? {} : { capacity: options.capacity }),
      },
    );
    this.maxBodyBytes = checkCount(options.maxBodyBytes ?? DEFAULT_MAX_BODY_BYTES, 'maxBodyBytes');
    const logLimit = checkCount(options.callLogLimit ?? DEFAULT_CALL_LOG_LIMIT, 'callLogLimit');
    this.recorder = new CallRecorder(Math.max(1, logLimit));
    this.requireKey = options.requireKey === true;
    if (options.fixedAnswerEvents !== undefined && options.fixedAnswerEvents > 0) {
      const spacing = {
        intervalMs: checkDelay(options.fixedEventIntervalMs ?? 0, 'fixedEventIntervalMs'),
        eventsPerWrite: Math.max(1, checkCount(options.fixedEventsPerWrite ?? 1, 'fixedEventsPerWrite')),
      };
      this.fixed = new FixedAnswers(
        checkCount(options.fixedAnswerEvents, 'fixedAnswerEvents'),
        this.current.model,
        spacing,
      );
    }
    this.server = createServer((req, res) => {
      this.handle(req, res).catch(() => {
        // Last resort: a failure here must cost one connection, never the process.
        if (!res.destroyed) res.destroy();
      });
    });
    this.server.on('connection', (socket: Socket) => {
      this.sockets.add(socket);
      socket.on('close', () => this.sockets.delete(socket));
    });
  }

  listen(port: number, host: string): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      const onError = (error: Error): void => reject(error);
      this.server.once('error', onError);
      // A queue as deep as the kernel allows (net.core.somaxconn caps it): a herd of fresh connections measured
      // straight against the provider must not be slowed by dropped SYNs the gateway does not have.
      this.server.listen(port, host, 65_535, () => {
        this.server.off('error', onError);
        // Accept failures (EMFILE under a heavy benchmark) reach clients as refused connections; they must not
        // become an unhandled 'error' event that ends the process.
        this.server.on('error', () => undefined);
        const address = this.server.address();
        this.port = typeof address === 'object' && address !== null ? address.port : port;
        this.url = formatUrl(host, this.port);
        resolve();
      });
    });
  }

  stats(): MockStats {
    return this.recorder.stats();
  }

  calls(sinceSeq?: number): MockCall[] {
    return this.recorder.calls(sinceSeq);
  }

  reset(): void {
    this.recorder.reset();
  }

  setMode(mode: MockMode, options?: MockModeOptions): number {
    const next: MockConfig = { ...this.current, mode: checkMode(mode), modeOptions: resolveModeOptions(options) };
    this.current = next;
    if (mode === 'hang') return 0;
    const dropped = this.dropHung();
    this.recorder.countDropped(dropped);
    return dropped;
  }

  configure(tuning: MockTuning): void {
    this.current = applyTuning(this.current, tuning);
  }

  config(): MockConfig {
    return { ...this.current, modeOptions: { ...this.current.modeOptions } };
  }

  waitFor(predicate: (stats: MockStats) => boolean, timeoutMs = 5000): Promise<MockStats> {
    return this.recorder.waitFor(predicate, timeoutMs);
  }

  close(): Promise<void> {
    this.closing ??= new Promise<void>((resolve) => {
      this.dropHung();
      this.server.close(() => resolve());
      for (const socket of this.sockets) socket.destroy();
      this.server.closeAllConnections();
      this.recorder.rejectWaiters('mock-provider closed');
    });
    return this.closing;
  }

  private dropHung(): number {
    const parked = [...this.hung];
    this.hung.clear();
    for (const exchange of parked) exchange.hangUp('hang');
    return parked.length;
  }

  private park(exchange: Exchange): void {
    this.hung.add(exchange);
    exchange.res.on('close', () => this.hung.delete(exchange));
  }

  /** Records the call under the configuration in force now, which then governs the whole exchange. */
  private begin(req: IncomingMessage, res: ServerResponse, facts: RequestFacts): Exchange {
    const config = this.current;
    const authHash = credentialHash(req);
    const call = this.recorder.begin(
      {
        route: facts.path,
        method: req.method ?? 'GET',
        mode: config.mode,
        stream: facts.stream,
        receivedAt: facts.receivedAt,
        outcome: initialOutcome(config.mode),
        ...(facts.model === undefined ? {} : { model: facts.model }),
        ...(authHash === undefined ? {} : { authHash }),
        ...recordedHeaders(req),
      },
      facts.isHealthCheck,
    );
    return new Exchange(req, res, call, config, facts.family, (done) => this.recorder.finish(done.call));
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const receivedAt = nowMs();
    const { path, query } = splitUrl(req.url);
    const method = req.method ?? 'GET';

    if (path.startsWith(CONTROL_PREFIX)) {
      await this.control(req, res, path, query);
      return;
    }
    if (method === 'GET' && HEALTH_PATHS.has(path)) {
      this.health(req, res, path, receivedAt);
      return;
    }
    const route = findRoute(method, path);
    if (route === undefined) {
      this.recorder.countNotFound();
      discardBody(req);
      writeJson(res, 404, NOT_FOUND_BODY);
      return;
    }
    if (this.fixed && route.family === 'openai' && method === 'POST' && this.current.mode === 'ok') {
      return this.fixedAnswer(req, res, path, receivedAt, this.fixed);
    }

    let body: BodyResult;
    try {
      body = await readBody(req, this.maxBodyBytes);
    } catch {
      // The client left before its request was complete: there is no one to answer.
      return;
    }
    const parsed = route.method === 'POST' && body.kind === 'ok' ? parseJson(body.text) : undefined;
    const record = parsed?.ok === true && isRecord(parsed.value) ? parsed.value : undefined;
    const model = record?.model;
    const exchange = this.begin(req, res, {
      path,
      family: route.family,
      stream: route.streams && record?.stream === true,
      receivedAt,
      isHealthCheck: false,
      ...(typeof model === 'string' ? { model } : {}),
    });

    try {
      await this.serve(exchange, route, body, parsed, record);
    } catch (error) {
      if (error instanceof ExchangeAborted || exchange.aborted) return;
      if (!res.headersSent) exchange.sendError('internal', `mock-provider failed: ${errorMessage(error)}`);
      else res.destroy();
    }
  }

  /** `fixedAnswerEvents`: one prepared answer, the request counted and read as bytes only (see `FixedAnswers`). */
  private async fixedAnswer(
    req: IncomingMessage,
    res: ServerResponse,
    path: string,
    receivedAt: number,
    fixed: FixedAnswers,
  ): Promise<void> {
    const body = await readBytes(req, this.maxBodyBytes);
    if (body === undefined) {
      if (!res.destroyed) writeJson(res, 413, NOT_FOUND_BODY);
      return;
    }
    const stream = FixedAnswers.streams(body);
    const call = this.recorder.begin(
      { route: path, method: 'POST', mode: 'ok', stream, receivedAt, outcome: 'ok' },
      false,
    );
    const latency = this.current.latencyMs;
    if (latency > 0) await new Promise((resolve) => setTimeout(resolve, latency));
    call.status = res.destroyed ? undefined : fixed.write(res, stream);
    this.recorder.finish(call);
  }

  /** The latency, stretched by how far the calls waiting for it exceed the configured capacity (if there is one). */
  private async waitLatency(exchange: Exchange): Promise<void> {
    const capacity = exchange.config.capacity;
    const base = exchange.latencyMs();
    if (capacity === 0) return exchange.wait(base);
    this.busy++;
    try {
      await exchange.wait(base * Math.max(1, this.busy / capacity));
    } finally {
      this.busy--;
    }
  }

  /** The mode decides first, as for a real outage; only the ok-like modes look at the request itself. */
  private async serve(
    exchange: Exchange,
    route: RouteDefinition,
    body: BodyResult,
    parsed: JsonParse | undefined,
    record: Record<string, unknown> | undefined,
  ): Promise<void> {
    const { mode, modeOptions } = exchange.config;
    if (mode === 'hang') {
      this.park(exchange);
      return;
    }
    await this.waitLatency(exchange);
    if (mode === 'reset') {
      exchange.hangUp('reset');
      return;
    }
    if (mode === 'error429') {
      const retry = modeOptions.retryAfterSeconds;
      exchange.sendError(
        'rate_limited',
        'The mock provider is in error429 mode.',
        retry === null ? {} : { 'retry-after': String(retry) },
      );
      return;
    }
    if (mode === 'error503') {
      const retry = modeOptions.retryAfterSeconds;
      exchange.sendError(
        'unavailable',
        'The mock provider is in error503 mode.',
        retry === null ? {} : { 'retry-after': String(retry) },
      );
      return;
    }
    if (this.requireKey) {
      const refusal = keyRefusal(exchange.req);
      if (refusal !== undefined) {
        exchange.sendError('unauthorized', refusal);
        return;
      }
    }
    if (body.kind === 'too_large') {
      const message = `Request body of ${body.bytes} bytes exceeds the limit of ${this.maxBodyBytes} bytes.`;
      exchange.sendError('too_large', message);
      return;
    }
    if (parsed !== undefined) {
      if (!parsed.ok) {
        exchange.sendError('invalid_request', parsed.message);
        return;
      }
      if (record === undefined) {
        exchange.sendError('invalid_request', 'Request body must be a JSON object.');
        return;
      }
      const problem = route.validate?.(record);
      if (problem !== undefined) {
        exchange.sendError('invalid_request', problem);
        return;
      }
    }
    // Markers in a request make that one request misbehave, whatever the mode: the way a provider fails one
    // request it cannot serve (a 500) or takes long over one (a long generation), while others are answered.
    const marked = record === undefined ? '' : JSON.stringify(record);
    if (marked.includes(FAIL_MARKER)) {
      exchange.sendError('internal', 'The mock provider failed this request (mock:fail-500 in its body).');
      return;
    }
    const quote = QUOTE_KEY_MARKER.exec(marked);
    if (quote) return quoteKey(exchange, quote[1] as QuoteShape, (quote[2] ?? 'plain') as QuoteEscape);
    const slow = /mock:slow-(\d{1,6})/.exec(marked);
    if (slow) await exchange.wait(Number(slow[1]));
    if (mode === 'error200' && record?.stream !== true) {
      // llama-server answers some failures with a 200 whose body is an error object.
      exchange.sendJson(200, {
        error: { code: 500, message: 'The mock provider failed (error200 mode).', type: 'server_error' },
      });
      return;
    }
    await route.handle(exchange, record ?? {});
  }

  /** Health checks skip latency: probes must see the mode, not the simulated model speed. */
  private health(req: IncomingMessage, res: ServerResponse, path: string, receivedAt: number): void {
    discardBody(req);
    const exchange = this.begin(req, res, { path, family: 'llama', stream: false, receivedAt, isHealthCheck: true });
    switch (exchange.config.mode) {
      case 'hang':
        this.park(exchange);
        return;
      case 'reset':
        exchange.hangUp('reset');
        return;
      case 'error503':
        exchange.sendJson(503, { error: { code: 503, message: 'Service unavailable', type: 'unavailable_error' } });
        return;
      default:
        exchange.sendJson(200, { status: 'ok' });
    }
  }

  private async control(req: IncomingMessage, res: ServerResponse, path: string, query: string): Promise<void> {
    const headers = { 'cache-control': 'no-store' };
    const expected = CONTROL_ENDPOINTS[path];
    if (expected === undefined) {
      discardBody(req);
      const error = { message: `Unknown control endpoint ${path}`, endpoints: CONTROL_ENDPOINTS };
      writeJson(res, 404, { error }, headers);
      return;
    }
    const method = req.method ?? 'GET';
    // /__mock/config is the one path with two methods.
    if (method !== expected && !(path === '/__mock/config' && method === 'POST')) {
      discardBody(req);
      writeJson(res, 405, { error: { message: `${path} expects ${expected}` } }, { ...headers, allow: expected });
      return;
    }

    if (method === 'GET') {
      discardBody(req);
      if (path === '/__mock/stats') writeJson(res, 200, this.stats(), headers);
      else if (path === '/__mock/config') writeJson(res, 200, this.config(), headers);
      else {
        const since = new URLSearchParams(query).get('since');
        const sinceSeq = since === null ? 0 : Number(since);
        if (!Number.isSafeInteger(sinceSeq) || sinceSeq < 0) {
          writeJson(res, 400, { error: { message: "'since' must be a non-negative integer" } }, headers);
          return;
        }
        writeJson(res, 200, this.calls(sinceSeq), headers);
      }
      return;
    }

    let body: BodyResult;
    try {
      body = await readBody(req, CONTROL_BODY_LIMIT);
    } catch {
      return;
    }
    if (body.kind === 'too_large') {
      writeJson(res, 413, { error: { message: 'Control request body too large' } }, headers);
      return;
    }
    if (path === '/__mock/reset') {
      this.reset();
      writeJson(res, 200, this.stats(), headers);
      return;
    }
    const parsed = parseJson(body.text);
    if (!parsed.ok || !isRecord(parsed.value)) {
      const message = parsed.ok ? 'Control request body must be a JSON object.' : parsed.message;
      writeJson(res, 400, { error: { message } }, headers);
      return;
    }
    try {
      if (path === '/__mock/mode') {
        const { mode, ...modeOptions } = parsed.value;
        const dropped = this.setMode(checkMode(mode), modeOptions);
        writeJson(res, 200, { ...this.config(), droppedHungConnections: dropped }, headers);
      } else {
        this.configure(parsed.value);
        writeJson(res, 200, this.config(), headers);
      }
    } catch (error) {
      writeJson(res, 400, { error: { message: errorMessage(error) } }, headers);
    }
  }
}

/** Starts listening and resolves once the port is bound. Throws RangeError on bad options. */
export async function startMockProvider(options: MockProviderOptions = {}): Promise<MockProvider> {
  const port = checkCount(options.port ?? 0, 'port');
  if (port > 65535) throw new RangeError(`port must be at most 65535, got ${port}`);
  const provider = new MockProviderServer(options);
  await provider.listen(port, options.host ?? '127.0.0.1');
  return provider;
}
