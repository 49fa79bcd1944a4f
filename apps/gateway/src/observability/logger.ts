import { pino, type Logger } from 'pino';
import pretty from 'pino-pretty';
import type { ObservabilityConfig } from '../config/gateway-config.js';

/**
 * The gateway's structured logger (pino) on stdout. JSON lines go through an
 * asynchronous destination (sonic-boom): a request never waits on a write.
 * Pretty output (for a terminal) formats in-process and synchronously: it is
 * for people watching, not for load. Lines still buffered are flushed at exit.
 */
export function createLogger(config: ObservabilityConfig): Logger {
  const options = {
    level: config.logLevel,
    base: { pid: process.pid },
    timestamp: pino.stdTimeFunctions.isoTime,
    // Whatever a caller passes by mistake, these never reach a line.
    redact: { paths: ['authorization', 'headers.authorization', 'headers["x-api-key"]', 'apiKey', 'key'], censor: '[redacted]' },
  };
  if (config.logFormat === 'pretty') {
    return pino(options, pretty({ colorize: Boolean(process.stdout.isTTY), sync: true, ignore: 'pid,hostname', translateTime: 'SYS:HH:MM:ss.l' }));
  }
  return pino(options, stdoutDestination());
}

let stdout: ReturnType<typeof pino.destination> | undefined;

/** One asynchronous stdout writer per process (an app built twice in one process shares it). */
function stdoutDestination(): ReturnType<typeof pino.destination> {
  if (stdout) return stdout;
  const destination = (stdout = pino.destination({ dest: 1, sync: false, minLength: 0 }));
  process.once('exit', () => {
    try {
      destination.flushSync();
    } catch {
      // Not open yet, or stdout is gone: nothing more can be written.
    }
  });
  return destination;
}
