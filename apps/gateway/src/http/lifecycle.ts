import { Injectable } from '@nestjs/common';
import type { Server, ServerResponse } from 'node:http';

/**
 * What a graceful shutdown needs to know: how many requests are in flight,
 * and whether the gateway is draining. Once draining, the listener is closed
 * (no new connections), requests that still arrive on open connections get a
 * retryable 503, and requests and streams in flight get the grace period to
 * finish.
 */
@Injectable()
export class Lifecycle {
  private inFlight = 0;
  private draining = false;
  private idle?: () => void;

  get isDraining(): boolean {
    return this.draining;
  }

  /** Counts a request until its response is over (finished, or the client gone). */
  track(response: ServerResponse): void {
    this.inFlight++;
    response.once('close', () => {
      this.inFlight--;
      if (this.inFlight === 0) this.idle?.();
    });
  }

  /** Stops accepting, then waits for what is in flight, for at most `graceMs`; then cuts what is left. */
  async drain(server: Server, graceMs: number): Promise<{ finished: boolean; cut: number }> {
    this.draining = true;
    server.close();
    server.closeIdleConnections();
    let timer: ReturnType<typeof setTimeout> | undefined;
    const finished = await new Promise<boolean>((resolve) => {
      if (this.inFlight === 0) return resolve(true);
      this.idle = () => resolve(true);
      timer = setTimeout(() => resolve(false), graceMs);
    });
    clearTimeout(timer);
    const cut = this.inFlight;
    server.closeAllConnections();
    return { finished, cut };
  }
}
