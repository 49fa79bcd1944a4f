import { timingSafeEqual } from 'node:crypto';
import { keyDigest } from '../common/credentials.js';
import { redactor } from '../common/redaction.js';
import { FileReloader } from '../common/file-reloader.js';
import { parseKeys, readKeysFile, type KeyEntry, type VirtualKey } from '../config/keys-file.js';

export type { VirtualKey };

/**
 * The virtual keys in force. Lookups compare SHA-256 digests in constant
 * time, against every entry (the time taken says nothing about which key
 * nearly matched). A file is read again when it changes and on SIGHUP (both
 * debounced); a file that cannot be used leaves the keys in force unchanged and
 * is reported in one line naming the problem.
 */
export class VirtualKeys {
  private entries: KeyEntry[];
  private admins?: { of: KeyEntry[]; digests: readonly Buffer[] };
  private reloader?: FileReloader;

  private constructor(
    entries: KeyEntry[],
    private readonly file: string | undefined,
    private readonly log: (line: string, problem: boolean) => void,
  ) {
    this.entries = entries;
    redactor.add(entries.map((entry) => entry.plain));
  }

  /** From a file (watched) or inline JSON; throws `KeysFileError` when the first read fails (start-up stops). */
  static load(source: { file?: string; json?: string }, log: (line: string, problem: boolean) => void): VirtualKeys {
    if (source.file !== undefined) {
      const keys = new VirtualKeys(readKeysFile(source.file), source.file, log);
      // Up to 10,000 keys to hash: a burst of events or signals reads the file once (see FileReloader).
      keys.reloader = new FileReloader(
        source.file,
        (reason) => keys.reload(reason),
        (line) => log(line, true),
        'keys file',
      );
      return keys;
    }
    return new VirtualKeys(parseKeys(source.json ?? ''), undefined, log);
  }

  get size(): number {
    return this.entries.length;
  }

  /** The key a client presented, or undefined. */
  find(presented: string | undefined): VirtualKey | undefined {
    if (!presented) return undefined;
    const digest = keyDigest(presented);
    let found: VirtualKey | undefined;
    for (const entry of this.entries) {
      if (timingSafeEqual(entry.digest, digest) && !found) found = entry.key;
    }
    return found;
  }

  /** Digests of the keys that may sign in to the status page (the same array until the keys change). */
  adminDigests(): readonly Buffer[] {
    if (this.admins?.of !== this.entries)
      this.admins = { of: this.entries, digests: this.entries.filter((e) => e.key.admin).map((e) => e.digest) };
    return this.admins.digests;
  }

  /** Reads the file again; keeps the keys in force if it cannot be used. Returns whether the new keys took over. */
  reload(reason: string): boolean {
    if (this.file === undefined) return false;
    try {
      this.entries = readKeysFile(this.file);
      redactor.add(this.entries.map((entry) => entry.plain));
      this.log(
        this.entries.length === 0
          ? `keys file reloaded (${reason}): it lists no keys, so every virtual key is refused`
          : `keys file reloaded (${reason}): ${this.entries.length} key(s)`,
        this.entries.length === 0,
      );
      return true;
    } catch (error) {
      this.log(
        `keys file not reloaded (${reason}), the previous ${this.entries.length} key(s) stay in force: ${(error as Error).message}`,
        true,
      );
      return false;
    }
  }

  close(): void {
    this.reloader?.close();
  }
}
