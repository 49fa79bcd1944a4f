import { createServer, request, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Gate } from './platforms.js';

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
    if (req.method !== 'POST') return forward();
    this.calls++;
    if (this.holding) this.held.push(forward);
    else forward();
  }
}
