import type { Logger } from 'pino';
import { redactor } from '../common/redaction.js';
import { lineSinkOf } from './logger.js';

/** What one request line says (see `GatewayTelemetry.finished`). */
export interface RequestLineFields {
  reqId: string;
  /** The id is the client's own text (`x-request-id`), not one the gateway made. */
  reqIdGiven: boolean;
  method: string;
  /** A control-plane request (metrics, health, status page): written at debug, not info. */
  debug?: boolean;
  /** The request's trace and span (W3C ids), when tracing records it: the line joins its trace. */
  traceId?: string;
  spanId?: string;
  /** How it ended for the client: miss, joined, cached, none, refused or error (see `ClientOutcome`). */
  outcome: string;
  /** A streamed answer: time to its first chunk written to the client. */
  ttftMs?: number;
  /** USD its own call cost; USD a joined or cached answer saved. */
  costUsd?: number;
  savedUsd?: number;
  /** What the provider said when it refused or failed the call (redacted, at most about 1 KB). */
  upstreamError?: string;
  /** The route's name, or (for a request no route served) its path. */
  route: string;
  /** Whether `route` is one of the gateway's route names (else it is a client's path). */
  named: boolean;
  status: number;
  dedup: string | null;
  tenant: string | null;
  breaker: string | null;
  totalMs: number;
  queueMs?: number;
  upstreamMs?: number;
  model?: string;
  /** The model a fallback group was asked for instead (see `RequestContext.servedModel`). */
  servedModel?: string;
  /** The upstream (pool member) its last attempt went to, when there are several or they are named. */
  upstream?: string;
  usage?: { in: number; out: number };
  savedUsage?: { in: number; out: number };
  error?: string;
  prompt?: string;
}

/** Distinct model names whose redacted, quoted form is kept (they repeat on nearly every line). */
const MAX_MODELS = 256;

/**
 * Writes the request line, the one line the gateway writes per request.
 * Through pino's own `info` each line costs more (its serialiser walks the
 * object, the redaction paths wrap it, the redaction hook scans the whole
 * line for key shapes); here the line is written in the same JSON shape
 * (`level`, `time`, `pid`, the fields, `msg`), straight to the logger's own
 * destination, in the same batches. All but two of its fields are the
 * gateway's own words (route names, outcomes, hashes, numbers): only the
 * client's request id and model name are redacted and escaped, and a line
 * with anything else a client wrote (a path no route serves, the prompt) goes
 * through pino as before.
 */
export class RequestLines {
  private readonly sink?: (line: string) => void;
  private readonly prefix = `{"level":30,"time":"`;
  private readonly pid = `","pid":${process.pid},"reqId":`;
  private isoSecond = -1;
  private isoPrefix = '';
  private readonly models = new Map<string, string>();
  private modelsVersion = redactor.version;

  constructor(private readonly logger: Logger) {
    this.sink = lineSinkOf(logger);
  }

  write(f: RequestLineFields): void {
    if (!this.sink || !f.named || f.prompt !== undefined || f.debug) return this.slow(f);
    let line = `${this.prefix}${this.now()}${this.pid}${f.reqIdGiven ? JSON.stringify(redactor.text(f.reqId)) : `"${f.reqId}"`}`;
    if (f.traceId !== undefined) line += `,"traceId":"${f.traceId}","spanId":"${f.spanId}"`;
    line += `,"method":"${f.method}","route":"${f.route}","status":${f.status},"outcome":"${f.outcome}","dedup":${quoted(f.dedup)},"tenant":${quoted(f.tenant)}`;
    line += `,"breaker":${quoted(f.breaker)},"totalMs":${f.totalMs}`;
    if (f.queueMs !== undefined) line += `,"queueMs":${f.queueMs},"upstreamMs":${f.upstreamMs}`;
    if (f.ttftMs !== undefined) line += `,"ttftMs":${f.ttftMs}`;
    if (f.model !== undefined) line += `,"model":${this.model(f.model)}`;
    if (f.servedModel !== undefined) line += `,"servedModel":${this.model(f.servedModel)}`;
    // An upstream's name is the operator's (upstreams file) or made from its URL: escaped all the same.
    if (f.upstream !== undefined) line += `,"upstream":${JSON.stringify(f.upstream)}`;
    if (f.usage) line += `,"usage":{"in":${f.usage.in},"out":${f.usage.out}}`;
    else if (f.savedUsage) line += `,"savedUsage":{"in":${f.savedUsage.in},"out":${f.savedUsage.out}}`;
    if (f.costUsd !== undefined) line += `,"costUsd":${f.costUsd}`;
    if (f.savedUsd !== undefined) line += `,"savedUsd":${f.savedUsd}`;
    if (f.error !== undefined) line += `,"error":${JSON.stringify(redactor.text(f.error))}`;
    // Redacted where it was read (see `upstreamErrorText`); escaped here.
    if (f.upstreamError !== undefined) line += `,"upstreamError":${JSON.stringify(f.upstreamError)}`;
    this.sink(`${line},"msg":"request"}\n`);
  }

  /** Through pino: its serialiser and its redaction of the whole line. */
  private slow(f: RequestLineFields): void {
    const line: Record<string, unknown> = { reqId: f.reqId };
    if (f.traceId !== undefined) {
      line.traceId = f.traceId;
      line.spanId = f.spanId;
    }
    Object.assign(line, {
      method: f.method,
      route: f.route,
      status: f.status,
      outcome: f.outcome,
      dedup: f.dedup,
      tenant: f.tenant,
      breaker: f.breaker,
      totalMs: f.totalMs,
    });
    if (f.queueMs !== undefined) {
      line.queueMs = f.queueMs;
      line.upstreamMs = f.upstreamMs;
    }
    if (f.ttftMs !== undefined) line.ttftMs = f.ttftMs;
    if (f.model !== undefined) line.model = f.model;
    if (f.servedModel !== undefined) line.servedModel = f.servedModel;
    if (f.upstream !== undefined) line.upstream = f.upstream;
    if (f.usage) line.usage = f.usage;
    else if (f.savedUsage) line.savedUsage = f.savedUsage;
    if (f.costUsd !== undefined) line.costUsd = f.costUsd;
    if (f.savedUsd !== undefined) line.savedUsd = f.savedUsd;
    if (f.error !== undefined) line.error = f.error;
    if (f.upstreamError !== undefined) line.upstreamError = f.upstreamError;
    if (f.prompt !== undefined) line.prompt = f.prompt;
    if (f.debug) this.logger.debug(line, 'request');
    else this.logger.info(line, 'request');
  }

  /** pino's `isoTime` (`2026-12-02T07:40:47.123Z`): the date and time to the second made once a second, then the milliseconds. */
  private now(): string {
    const ms = Date.now();
    const second = ms - (ms % 1000);
    if (second !== this.isoSecond) {
      this.isoSecond = second;
      this.isoPrefix = new Date(second).toISOString().slice(0, 20);
    }
    const milli = ms - second;
    return `${this.isoPrefix}${milli < 10 ? '00' : milli < 100 ? '0' : ''}${milli}Z`;
  }

  /** A model name redacted and quoted, as kept for the names seen (forgotten when the gateway learns new keys). */
  private model(name: string): string {
    if (this.modelsVersion !== redactor.version) {
      this.models.clear();
      this.modelsVersion = redactor.version;
    }
    let json = this.models.get(name);
    if (json === undefined) {
      json = JSON.stringify(redactor.text(name));
      if (this.models.size < MAX_MODELS) this.models.set(name, json);
    }
    return json;
  }
}

/** A word of the gateway's own (an outcome, a state, a hash), or null. */
function quoted(value: string | null): string {
  return value === null ? 'null' : `"${value}"`;
}
