import type { LoggerService, LogLevel } from '@nestjs/common';
import { pino, type Logger } from 'pino';
import { createRequire } from 'node:module';
import type { ObservabilityConfig } from '../config/gateway-config.js';
import { redactor } from '../common/redaction.js';
import { LineWriter } from './line-writer.js';

/**
 * The gateway's structured logger (pino) on stdout. JSON lines go to a
 * buffered, asynchronous writer (`LineWriter`), in batches: a request never
 * waits on a write. Pretty output (for a terminal) formats in-process and
 * synchronously: it is for people watching, not for load. Lines still
 * buffered are written at exit.
 */
export function createLogger(config: ObservabilityConfig): Logger {
  const options = {
    level: config.logLevel,
    base: { pid: process.pid },
    timestamp: pino.stdTimeFunctions.isoTime,
    // Whatever a caller passes by mistake, these never reach a line.
    redact: {
      paths: ['authorization', 'headers.authorization', 'headers["x-api-key"]', 'apiKey', 'key'],
      censor: '[redacted]',
    },
    // And whatever a message quotes: the keys the gateway knows, by value, and the shapes of common providers' keys.
    hooks: { streamWrite: (line: string) => redactor.text(line) },
  };
  if (config.logFormat === 'pretty') {
    // Loaded only for pretty output: JSON lines (the default off a terminal) do without it.
    const pretty = createRequire(import.meta.url)('pino-pretty') as typeof import('pino-pretty');
    return pino(
      options,
      pretty({
        colorize: Boolean(process.stdout.isTTY),
        sync: true,
        ignore: 'pid,hostname',
        translateTime: 'SYS:HH:MM:ss.l',
      }),
    );
  }
  const destination = stdoutWriter();
  const logger = pino(options, destination);
  lineSinks.set(logger, (line) => destination.write(line));
  return logger;
}

const lineSinks = new WeakMap<Logger, (line: string) => void>();

/**
 * Where lines already serialised in the logger's own JSON shape may be written
 * straight, beside its own (see `RequestLines`): the destination of a logger
 * made by `createLogger` for JSON output. Absent for any other logger (pretty
 * output, a test's own): lines then go through the logger.
 */
export function lineSinkOf(logger: Logger): ((line: string) => void) | undefined {
  return lineSinks.get(logger);
}

let stdout: LineWriter | undefined;
/** A quiet gateway's lines still appear within this long. */
const FLUSH_MS = 200;

/** One writer of stdout per process (an app built twice in one process shares it). */
function stdoutWriter(): LineWriter {
  if (stdout) return stdout;
  const writer = (stdout = new LineWriter({ fd: 1, flushMs: FLUSH_MS }));
  process.once('exit', () => writer.flushSync());
  return writer;
}

/** Contexts whose `log` lines are news for the operator (an outage over, a reload that took), unlike Nest's start-up chatter. */
const OWN_CONTEXTS = new Set(['Gateway', 'Orchestrator']);

/**
 * Nest's own messages (warnings, errors) as lines of the same logger, so that stdout stays one format; the
 * gateway's and the orchestrator's own `log` lines too, at `info`.
 */
export function nestLoggerOf(logger: Logger, levels: LogLevel[] = ['error', 'warn']): LoggerService {
  const enabled = new Set(levels);
  const write =
    (level: 'info' | 'warn' | 'error' | 'debug' | 'trace', nestLevel: LogLevel) =>
    (message: unknown, ...rest: unknown[]) => {
      const context = typeof rest.at(-1) === 'string' ? (rest.at(-1) as string) : undefined;
      if (!enabled.has(nestLevel) && !(nestLevel === 'log' && context !== undefined && OWN_CONTEXTS.has(context)))
        return;
      logger[level](
        { context },
        typeof message === 'string' ? message : String((message as Error)?.message ?? message),
      );
    };
  return {
    log: write('info', 'log'),
    warn: write('warn', 'warn'),
    error: write('error', 'error'),
    debug: write('debug', 'debug'),
    verbose: write('trace', 'verbose'),
  };
}
