import { createServer, request, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Gate } from './platforms.js';
import { socketOwner } from './socket-owner.js';

/**
 * A loopback proxy in front of the simulated provider. While `hold()` is on,
 * model calls (POST) wait here before reaching the provider; `pauseStreams()`
 * lets an answer's first bytes through and keeps the rest until `resume()`.
 * Everything else (health probes, GET /v1/models) passes at once.
 */
export class GatedUpstream {
  url = '';
  private server?: Server;
  private holding = false;
  private readonly held: Array<() => void> = [];
  private streamGate?: Gate;
  /** Model calls that arrived here, held or not. */
  calls = 0;
  /** The processes `attributeTo` names, and each GET (health probes) since, with its sender's PID (or undefined). */
  private senders: readonly number[] = [];
  readonly gets: Array<{ path: string; from: number | undefined }> = [];

  constructor(private readonly target: string) {}

  async start(): Promise<void> {
    this.server = createServer((req, res) => this.handle(req, res));
    await new Promise<void>((resolve) => this.server!.listen(0, '127.0.0.1', resolve));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  get heldCount(): number {
    return this.held.length;
  }

  hold(): void {
    this.holding = true;
  }

  release(): void {
    this.holding = false;
    for (const forward of this.held.splice(0)) forward();
  }

  /** From now on, records which of `pids` sent each GET request (see `gets`), forgetting those recorded before. */
  attributeTo(pids: readonly number[]): void {
    this.senders = [...pids];
    this.gets.length = 0;
  }

  /**
   * The GETs of `path` recorded since `attributeTo`: how many, how many came from a process other than the one that
   * sent most of them, and how many from none of the processes named.
   */
  sent(path: string): { total: number; notByTheMost: number; unknownSender: number } {
    const counts = new Map<number | undefined, number>();
    for (const get of this.gets) if (get.path === path) counts.set(get.from, (counts.get(get.from) ?? 0) + 1);
    const total = [...counts.values()].reduce((sum, n) => sum + n, 0);
    const known = [...counts].filter(([from]) => from !== undefined).map(([, n]) => n);
    return { total, notByTheMost: total - Math.max(0, ...known), unknownSender: counts.get(undefined) ?? 0 };
  }

  pauseStreams(): void {
    this.streamGate = new Gate();
  }

  resume(): void {
    this.streamGate?.resolve();
    this.streamGate = undefined;
  }

  async close(): Promise<void> {
    this.release();
    this.resume();
    this.server?.closeAllConnections();
    await new Promise<void>((resolve) => (this.server ? this.server.close(() => resolve()) : resolve()));
  }

  private handle(req: IncomingMessage, res: ServerResponse): void {
    const forward = () => {
      const upstream = request(`${this.target}${req.url}`, { method: req.method, headers: req.headers }, (answer) => {
        res.writeHead(answer.statusCode ?? 502, answer.headers);
        const gate = this.streamGate;
        let first = true;
        answer.on('data', (chunk: Buffer) => {
          res.write(chunk);
          if (first && gate) {
            answer.pause();
            void gate.promise.then(() => answer.resume());
          }
          first = false;
        });
        answer.on('end', () => res.end());
        answer.on('error', () => res.destroy());
      });
      upstream.on('error', () => res.destroy());
      req.pipe(upstream);
    };
    if (req.method === 'GET' && this.senders.length > 0) {
      const serverPort = (this.server!.address() as AddressInfo).port;
      const from = socketOwner(req.socket.remotePort ?? 0, serverPort, this.senders);
      this.gets.push({ path: (req.url ?? '').split('?')[0], from });
    }
    if (req.method !== 'POST') return forward();
    this.calls++;
    if (this.holding) this.held.push(forward);
    else forward();
  }
}
