import type { ServerResponse } from 'node:http';

/** Bounds of the status page's event streams (docs/operations.md, "The status page"). */
export const STREAM_LIMITS = {
  /** Streams open at once, for everybody. */
  total: 32,
  /** Streams open at once from one client address (a few tabs). */
  perClient: 4,
  /** A stream ends after this long; the page's EventSource reconnects by itself (and is checked again). */
  maxSeconds: 600,
  /** Snapshots a watcher may leave unread before it is cut. */
  unreadBytes: 1024 * 1024,
};

/** What the watchers are sent, and when. */
export interface WatchedBoard {
  /** The snapshot as JSON text: at once from one process, or once every worker's board is gathered. */
  snapshotText(): string | Promise<string>;
  /** Milliseconds to the end of the board's current second, when its next snapshot is due. */
  untilNextSecond(): number;
  /** The gateway is draining: a page kept open must not hold a graceful shutdown for its whole grace period. */
  draining(): boolean;
}

/**
 * The open status pages (SSE streams): each is sent the board's snapshot when it opens, at the end of every second
 * while any is open (nothing ticks otherwise), and at once when asked (a breaker transition). Streams are few and
 * bounded (an operator's page, not a public feed), so that idle or never-reading watchers cannot take the gateway's
 * connections or memory from its callers.
 */
export class StatusWatchers {
  private readonly clients = new Set<ServerResponse>();
  private readonly streamsByPeer = new Map<string, number>();
  private timer?: ReturnType<typeof setTimeout>;
  /** A snapshot being gathered from the workers; another asked for meanwhile is sent once it is done. */
  private broadcasting = false;
  private broadcastAgain = false;

  constructor(private readonly board: WatchedBoard) {}

  /** Why a new stream from `peer` is refused (too many open), or undefined. */
  refuse(peer: string): string | undefined {
    if (this.clients.size >= STREAM_LIMITS.total)
      return `the status page already has ${STREAM_LIMITS.total} event streams open`;
    if ((this.streamsByPeer.get(peer) ?? 0) >= STREAM_LIMITS.perClient)
      return `this client already has ${STREAM_LIMITS.perClient} event streams open`;
    return undefined;
  }

  /** Keeps `response` up to date until it closes, or its time is up (the browser then reconnects). */
  add(response: ServerResponse, peer: string): void {
    this.clients.add(response);
    this.startTicking();
    this.streamsByPeer.set(peer, (this.streamsByPeer.get(peer) ?? 0) + 1);
    const timeUp = setTimeout(() => response.end(), STREAM_LIMITS.maxSeconds * 1000);
    timeUp.unref();
    response.once('close', () => {
      clearTimeout(timeUp);
      this.clients.delete(response);
      const left = (this.streamsByPeer.get(peer) ?? 1) - 1;
      if (left > 0) this.streamsByPeer.set(peer, left);
      else this.streamsByPeer.delete(peer);
    });
    const text = this.board.snapshotText();
    if (typeof text === 'string') return this.send(response, text);
    void text.then((data) => {
      if (this.clients.has(response)) this.send(response, data);
    });
  }

  /** Sends every open page the snapshot now. */
  broadcast(): void {
    if (this.clients.size === 0) return;
    if (this.broadcasting) {
      this.broadcastAgain = true;
      return;
    }
    const text = this.board.snapshotText();
    if (typeof text === 'string') return this.sendAll(text);
    this.broadcasting = true;
    void text
      .then((data) => this.sendAll(data))
      .finally(() => {
        this.broadcasting = false;
        if (!this.broadcastAgain) return;
        this.broadcastAgain = false;
        this.broadcast();
      });
  }

  close(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    for (const client of this.clients) client.end();
    this.clients.clear();
  }

  /** Once a second while a page is open, at the end of each of the board's seconds. */
  private startTicking(): void {
    if (this.timer !== undefined || this.clients.size === 0) return;
    this.timer = setTimeout(() => this.tick(), Math.max(0, this.board.untilNextSecond()));
    this.timer.unref();
  }

  private tick(): void {
    this.timer = undefined;
    if (this.board.draining()) return this.close();
    this.broadcast();
    this.startTicking();
  }

  private sendAll(data: string): void {
    for (const client of this.clients) this.send(client, data);
  }

  private send(client: ServerResponse, data: string): void {
    // A watcher that does not read: cut, rather than buffer a snapshot a second for it without end.
    if (client.writableLength > STREAM_LIMITS.unreadBytes) return void client.destroy();
    client.write(`event: snapshot\ndata: ${data}\n\n`);
  }
}
