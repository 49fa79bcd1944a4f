import type { Server, ServerResponse } from 'node:http';
import { SlotList } from 'nest-prompt-orchestrator/low-level';

/**
 * What a graceful shutdown needs to know: how many requests are in flight,
 * and whether the gateway is draining. Once draining, the listener is closed
 * (no new connections), requests that still arrive on open connections get a
 * retryable 503, and requests and streams in flight get the grace period to
 * finish.
 */
export class Lifecycle {
  /**
   * Responses not yet over: on drain, those that have not sent their headers yet say `Connection: close`. Not a Set:
   * every request adds and removes one (see `SlotList`).
   */
  private readonly inFlight = new SlotList<ServerResponse>();
  private draining = false;
  private idle?: () => void;

  get isDraining(): boolean {
    return this.draining;
  }

  /** Counts a request until its response is over (finished, or the client gone). */
  track(response: ServerResponse): void {
    const slot = this.enter(response);
    response.once('close', () => this.leave(response, slot));
  }

  /** `track` for a caller that listens for the response's end itself: `leave` with what this returns when it is over. */
  enter(response: ServerResponse): number {
    return this.inFlight.add(response);
  }

  leave(response: ServerResponse, slot: number): void {
    if (this.inFlight.delete(slot, response) && this.inFlight.size === 0) this.idle?.();
  }

  /**
   * A request that arrived on an open connection during the drain: its answer
   * closes the connection, so the client's next request goes to a new one
   * (another replica) instead of a socket about to be reset.
   */
  refuse(response: ServerResponse): void {
    if (!response.headersSent) response.setHeader('connection', 'close');
  }

  /** Stops accepting, then waits for what is in flight, for at most `graceMs`; then cuts what is left. */
  async drain(server: Server, graceMs: number): Promise<{ finished: boolean; cut: number }> {
    this.draining = true;
    server.close();
    server.closeIdleConnections();
    // Answers still to come close their connections: a kept-alive client must not reuse a socket we are about to cut.
    for (const response of this.inFlight) this.refuse(response);
    let timer: ReturnType<typeof setTimeout> | undefined;
    const finished = await new Promise<boolean>((resolve) => {
      if (this.inFlight.size === 0) return resolve(true);
      this.idle = () => resolve(true);
      timer = setTimeout(() => resolve(false), graceMs);
    });
    clearTimeout(timer);
    const cut = this.inFlight.size;
    server.closeAllConnections();
    return { finished, cut };
  }
}
