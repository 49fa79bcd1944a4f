import { createHash } from 'node:crypto';

type Json = Record<string, unknown>;

/** Where an upstream says what it serves, and how to read that answer. */
export interface IdentitySource {
  /** Fetches the answer that holds the identity (llama-server: GET /props); undefined when there was none. */
  fetch(headers: Record<string, string>, signal: AbortSignal): Promise<unknown>;
  /** The identity in that answer (what changes the answers) and the server instance (what changes on a restart). */
  read(answer: Json): { identity: string; instance?: string } | undefined;
}

export interface UpstreamIdentityOptions {
  /** Requests check the identity again at most this often. Default 2 000 ms. */
  checkEveryMs?: number;
  /** Bound on one check. Default 2 000 ms. */
  timeoutMs?: number;
  /** Called when a check shows another model, context or server process. */
  onChange?: (identity: string) => void;
}

/**
 * Who answers behind the upstream URL, as part of every dedup key: the same
 * request to another model (or the same model with another context size) is
 * another question. For most providers the URL says it all. For a llama.cpp
 * server, a restart can change the model or the context behind the same URL,
 * so the identity is read from its `/props` and read again: before a request
 * whose last check is older than `checkEveryMs`, when the connection to the
 * server was lost, when the breaker's health probe sees it back, and whenever a
 * client's own `GET /props` passes through.
 */
export class UpstreamIdentity {
  private identity = 'unknown';
  private instance?: string;
  private digest: string;
  private checkedAt = Number.NEGATIVE_INFINITY;
  private checking?: Promise<void>;
  /** Whether the last check got an answer: only then does a request wait for the next one. */
  private answering = false;
  private readonly checkEveryMs: number;
  private readonly timeoutMs: number;

  constructor(
    private readonly upstream: string,
    private readonly source?: IdentitySource,
    private readonly options: UpstreamIdentityOptions = {},
  ) {
    this.checkEveryMs = options.checkEveryMs ?? 2_000;
    this.timeoutMs = options.timeoutMs ?? 2_000;
    this.digest = this.hash();
  }

  /** What goes into the dedup key (a digest: the identity itself can be long). */
  get current(): string {
    return this.digest;
  }

  /** Whether `current` can be used as it is: no check is due (nearly always true; `fresh` waits otherwise). */
  get isFresh(): boolean {
    return !this.source || performance.now() - this.checkedAt < this.checkEveryMs;
  }

  /** The identity as last read (`unknown` until then), for health and tests. */
  describe(): { identity: string; instance?: string; checkedAt?: number } {
    return {
      identity: this.identity,
      instance: this.instance,
      checkedAt: Number.isFinite(this.checkedAt) ? this.checkedAt : undefined,
    };
  }

  /** Learns from an answer a client got anyway (its own GET /props). */
  observe(answer: unknown): void {
    if (!this.source || typeof answer !== 'object' || answer === null || Array.isArray(answer)) return;
    const read = this.source.read(answer as Json);
    if (read) this.set(read.identity, read.instance);
  }

  /**
   * The identity for a request's key. When the last check is older than `checkEveryMs`, it is checked again first,
   * so a request never gets an answer of the model served before a restart it could have seen. It waits only while
   * the upstream answers (a check takes a millisecond then); an upstream that did not answer the last check is
   * checked in the background, never holding requests for the check's timeout.
   */
  async fresh(headers: Record<string, string>): Promise<string> {
    if (!this.source || performance.now() - this.checkedAt < this.checkEveryMs) return this.digest;
    const check = this.check(headers);
    if (this.answering) await check;
    return this.digest;
  }

  /** Checks now (one check at a time): the server may have restarted. Never throws. */
  check(headers: Record<string, string> = {}): Promise<void> {
    if (!this.source) return Promise.resolve();
    this.checking ??= (async () => {
      this.checkedAt = performance.now();
      try {
        const answer = await this.source!.fetch(headers, AbortSignal.timeout(this.timeoutMs));
        this.answering = answer !== undefined;
        this.observe(answer);
      } catch {
        // Unreachable now: the next request, the health probe or a lost connection asks again.
        this.answering = false;
        this.checkedAt = Number.NEGATIVE_INFINITY;
      } finally {
        this.checking = undefined;
      }
    })();
    return this.checking;
  }

  private set(identity: string, instance: string | undefined): void {
    this.checkedAt = performance.now();
    if (identity === this.identity && instance === this.instance) return;
    const changed = this.identity !== 'unknown' && identity !== this.identity;
    this.identity = identity;
    this.instance = instance;
    this.digest = this.hash();
    if (changed) this.options.onChange?.(identity);
  }

  private hash(): string {
    return createHash('sha256').update(`${this.upstream}\n${this.identity}`).digest('base64url').slice(0, 22);
  }
}
