import { CliUsageError, parseCli, usage } from './cli-options.js';
import { startMockProvider } from './mock-provider.js';

async function main(): Promise<number> {
  let command;
  try {
    command = parseCli(process.argv.slice(2), process.env);
  } catch (error) {
    if (!(error instanceof CliUsageError)) throw error;
    process.stderr.write(`mock-provider: ${error.message}\nRun with --help for usage.\n`);
    return 1;
  }
  if (command.kind === 'help') {
    process.stdout.write(usage());
    return 0;
  }

  let provider;
  try {
    provider = await startMockProvider(command.options);
  } catch (error) {
    process.stderr.write(`mock-provider: cannot start: ${error instanceof Error ? error.message : String(error)}\n`);
    return 1;
  }
  // Scripts wait for this exact line before sending traffic.
  process.stdout.write(`mock-provider listening on ${provider.url}\n`);

  const running = provider;
  await new Promise<void>((resolve) => {
    let stopping = false;
    const stop = (signal: NodeJS.Signals): void => {
      if (stopping) {
        // A second signal means the caller is done waiting.
        process.exit(1);
      }
      stopping = true;
      process.stderr.write(`mock-provider: ${signal}, shutting down\n`);
      running.close().then(resolve, resolve);
    };
    process.on('SIGINT', stop);
    process.on('SIGTERM', stop);
  });
  return 0;
}

main().then(
  (code) => {
    process.exitCode = code;
  },
  (error: unknown) => {
    process.stderr.write(`mock-provider: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
    process.exitCode = 1;
  },
);
