import { watch, type FSWatcher } from 'node:fs';
import { basename, dirname } from 'node:path';

const RELOAD_QUIET_MS = 200;
const RELOAD_MAX_WAIT_MS = 1_000;

/**
 * Calls `reload` when a file the gateway read at start changes, and on SIGHUP.
 * Several events arrive for one save, and signals can come in bursts (a loop of
 * `kill -HUP`): the file is read once they stop for 200 ms, and at least once a
 * second while they do not. The directory is watched, not the file: editors and
 * `mv` replace the file, which ends a watch on it.
 */
export class FileReloader {
  private watcher?: FSWatcher;
  private debounce?: NodeJS.Timeout;
  /** When the first event of the burst being debounced arrived. */
  private pendingSince?: number;
  private readonly onHangup = () => this.reloadSoon('SIGHUP');

  constructor(
    private readonly file: string,
    private readonly reload: (reason: string) => void,
    /** Told when the file cannot be watched (SIGHUP still reloads it). */
    warn: (line: string) => void,
    /** What the file is called in that line (`keys file`, `upstreams file`). */
    what: string,
  ) {
    process.on('SIGHUP', this.onHangup);
    const name = basename(file);
    try {
      this.watcher = watch(dirname(file), { persistent: false }, (_event, changed) => {
        if (changed !== null && changed !== name) return;
        this.reloadSoon('file changed');
      });
      this.watcher.on('error', () => undefined);
    } catch (error) {
      warn(`${what} not watched (${(error as Error).message.slice(0, 120)}); reload it with SIGHUP`);
    }
  }

  private reloadSoon(reason: string): void {
    const now = Date.now();
    this.pendingSince ??= now;
    clearTimeout(this.debounce);
    const delay = Math.max(0, Math.min(RELOAD_QUIET_MS, this.pendingSince + RELOAD_MAX_WAIT_MS - now));
    this.debounce = setTimeout(() => {
      this.pendingSince = undefined;
      this.reload(reason);
    }, delay);
    this.debounce.unref();
  }

  close(): void {
    clearTimeout(this.debounce);
    this.watcher?.close();
    process.removeListener('SIGHUP', this.onHangup);
  }
}
