import cluster from 'node:cluster';
import { isGatewayMessage, type Gathered, type ToPrimary, type ToWorker, type WorkerAsk } from './messages.js';

type Push = Extract<ToWorker, { gw: 'event' | 'failing' | 'breaker' }>;
type DistributiveOmit<T, K extends PropertyKey> = T extends unknown ? Omit<T, K> : never;

/**
 * A worker's end of the IPC channel to the primary (one per process: the
 * channel is the process's). Questions are answered in order by the primary;
 * an answer is handed to its callback synchronously, so that whatever the
 * answer sets up (a follower's inbox) exists before the next message is read.
 * Without a primary (it died: node:cluster then ends the worker too, but not
 * before its last requests run) every question is answered `undefined`.
 */
export class WorkerChannel {
  private static current?: WorkerChannel;

  /** The channel of this process, when it is a worker of `--workers`. */
  static get(): WorkerChannel | undefined {
    if (!cluster.isWorker || typeof process.send !== 'function') return undefined;
    return (WorkerChannel.current ??= new WorkerChannel());
  }

  private seq = 0;
  private open = true;
  private readonly answers = new Map<number, (value: unknown) => void>();
  private readonly pushes: { [K in Push['gw']]?: (message: Extract<Push, { gw: K }>) => void } = {};
  private readonly collectors = new Map<Gathered, () => unknown>();
  private readonly onClose = new Set<() => void>();
  // Sending fails only once the channel is closed, which 'disconnect' reports; the callback keeps the failure from
  // becoming an unhandled 'error' event.
  private readonly ignore = () => undefined;

  private constructor() {
    process.on('message', (message: unknown) => {
      if (isGatewayMessage<ToWorker>(message)) this.receive(message);
    });
    process.once('disconnect', () => {
      this.open = false;
      const waiting = [...this.answers.values()];
      this.answers.clear();
      for (const answer of waiting) answer(undefined);
      for (const close of this.onClose) close();
    });
  }

  get connected(): boolean {
    return this.open;
  }

  send(message: ToPrimary): void {
    if (this.open) process.send!(message, undefined, undefined, this.ignore);
  }

  /** Sends a question; `onAnswer` gets the answer (or `undefined` when the primary is gone), synchronously on receipt. */
  ask(message: DistributiveOmit<WorkerAsk, 'c'>, onAnswer: (value: unknown) => void): number | undefined {
    if (!this.open) {
      onAnswer(undefined);
      return undefined;
    }
    const c = ++this.seq;
    this.answers.set(c, onAnswer);
    this.send({ ...message, c });
    return c;
  }

  /** `ask` as a promise, for callers that need no synchronous hand-over; bounded by `timeoutMs` when given. */
  request<R>(message: DistributiveOmit<WorkerAsk, 'c'>, timeoutMs?: number): Promise<R | undefined> {
    return new Promise((resolve) => {
      let timer: ReturnType<typeof setTimeout> | undefined;
      const c = this.ask(message, (value) => {
        clearTimeout(timer);
        resolve(value as R | undefined);
      });
      if (timeoutMs !== undefined && c !== undefined) {
        timer = setTimeout(() => {
          this.answers.delete(c);
          resolve(undefined);
        }, timeoutMs);
        timer.unref();
      }
    });
  }

  /** The handler of one kind of message the primary pushes (one per kind). */
  on<K extends Push['gw']>(kind: K, handler: (message: Extract<Push, { gw: K }>) => void): void {
    (this.pushes as Record<string, unknown>)[kind] = handler;
  }

  /** What this worker answers when the primary gathers `what` from every worker. */
  provide(what: Gathered, collect: () => unknown): void {
    this.collectors.set(what, collect);
  }

  /** Called once the primary is gone. */
  whenClosed(close: () => void): void {
    this.onClose.add(close);
  }

  private receive(message: ToWorker): void {
    switch (message.gw) {
      case 're': {
        const answer = this.answers.get(message.c);
        this.answers.delete(message.c);
        answer?.(message.v);
        return;
      }
      case 'collect':
        void this.collect(message.g, message.what);
        return;
      default:
        (this.pushes[message.gw] as ((m: Push) => void) | undefined)?.(message);
    }
  }

  private async collect(g: number, what: Gathered): Promise<void> {
    const collector = this.collectors.get(what);
    let data: unknown;
    try {
      data = collector ? await collector() : null;
    } catch {
      // A part that cannot be made is reported as none: the primary counts this worker as silent.
      data = null;
    }
    this.send({ gw: 'part', g, data });
  }
}
