// Preloaded into a gateway process (`--import`): when it writes that it listens, appends to SIGNAL_CHECK_FILE how many
// SIGTERM listeners it has by then. Whoever reads that line may stop the gateway at once: the line must come after.
import { appendFileSync } from 'node:fs';

const file = process.env.SIGNAL_CHECK_FILE;
const write = process.stdout.write.bind(process.stdout);
process.stdout.write = (chunk, ...rest) => {
  if (file && String(chunk).includes('listening on')) appendFileSync(file, `${process.listenerCount('SIGTERM')}\n`);
  return write(chunk, ...rest);
};
