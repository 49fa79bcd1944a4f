/** The lines a gateway service writes under its own context (`Gateway`, `Upstreams`): warnings and news. */
export interface ContextLog {
  log(line: string): void;
  warn(line: string): void;
  error(line: string): void;
}

/**
 * Where the services' lines go, in the shape of Nest's `LoggerService` (the message, then its context): the app's
 * logger (`nestLoggerOf` by default, or whatever `createGateway` is given) receives them as it receives Nest's own.
 */
export interface LineSink {
  log(message: string, context: string): void;
  warn(message: string, context: string): void;
  error(message: string, context: string): void;
}

/** A sink that writes nothing (`createGateway(config, { logger: false })`). */
export const SILENT_LINES: LineSink = { log: () => undefined, warn: () => undefined, error: () => undefined };

/** One service's lines, under its context. */
export function contextLog(sink: LineSink, context: string): ContextLog {
  return {
    log: (line) => sink.log(line, context),
    warn: (line) => sink.warn(line, context),
    error: (line) => sink.error(line, context),
  };
}
