/** A response whose answer is ready: `writeReply` writes it (and must not throw). */
export interface PendingReply {
  writeReply(): void;
}

/**
 * Answers written together, once the event loop has handled every socket that was ready in its turn (in the
 * turn's check phase, by one `setImmediate`), rather than each the moment it is ready.
 *
 * A write to a socket whose reader is asleep wakes that reader, and the writer pays for the wake-up: on loopback
 * the kernel delivers the bytes and wakes the reading process inside the writer's own `write`, and waking a
 * process on another core costs an interrupt between the cores (in a virtual machine, a paravirtual one). Under
 * load a client process whose requests (on any of its connections) were read in one turn is then woken once for
 * all of their answers, not once each: on window hits that took most of the wake-ups' cost off each request
 * (docs/benchmarks/2026-12-03-figures-behind-the-code.md). An answer waits at most for the rest of its turn: the requests read in the
 * same turn, each handled in microseconds; with one request in a turn, nothing but the phase boundary. The same
 * idea as uWebSockets' corking of every response until the end of its loop iteration. Hand-written: Node's `cork`
 * is per socket, and `end()` uncorks it.
 */
export class ReplyBatch {
  private replies: PendingReply[] = [];
  /** The array emptied by the last flush, used again by the next batch. */
  private spare: PendingReply[] = [];

  /** `reply` is written with the others of this turn. */
  add(reply: PendingReply): void {
    if (this.replies.push(reply) === 1) setImmediate(this.flush);
  }

  /** Replies waiting for the end of this turn. */
  get waiting(): number {
    return this.replies.length;
  }

  private readonly flush = (): void => {
    const replies = this.replies;
    this.replies = this.spare;
    for (let i = 0; i < replies.length; i++) replies[i].writeReply();
    replies.length = 0;
    this.spare = replies;
  };
}
