import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { GatewayConfig } from '../config/gateway-config.js';
import { ApiError } from '../common/api-error.js';
import { answerAndClose, apiOfUrl } from './error-reply.js';

/**
 * Guards of the connection table against clients that hold slots without
 * using them (docs/security.md, "Slow clients and the connection table"): a
 * cap per client address, a deadline for the body once the headers are in,
 * and a 413 instead of `100 Continue` for a declared body over --max-body.
 * They work on the node:http server, so both platforms and the data plane get them.
 */
export function guardConnectionTable(
  server: Server,
  config: GatewayConfig,
  handle: (request: IncomingMessage, response: ServerResponse) => void,
): void {
  limitPerAddress(server, config.maxConnectionsPerAddress, config.loopbackLimited);
  const watchBody = config.bodyTimeoutMs > 0 ? bodyDeadlines(config) : undefined;
  if (watchBody) server.on('request', watchBody);
  // With a listener here Node no longer answers `100 Continue` itself: a body it would refuse is never asked for.
  server.on('checkContinue', (request: IncomingMessage, response: ServerResponse) => {
    const length = request.headers['content-length'];
    if (length !== undefined && Number(length) > config.maxBodyBytes) {
      const error = new ApiError(
        413,
        `The request body is larger than this gateway accepts (${config.maxBodyBytes} bytes).`,
        'request_too_large',
      );
      return refuse(config, request, response, error);
    }
    response.writeContinue();
    watchBody?.(request, response);
    handle(request, response);
  });
}

function isLoopback(address: string): boolean {
  return address.startsWith('127.') || address === '::1' || address.startsWith('::ffff:127.');
}

/** Counts each address's open connections; one past `max` is closed before the HTTP parser reads a byte of it. */
function limitPerAddress(server: Server, max: number, loopbackToo: boolean): void {
  if (max <= 0) return;
  const open = new Map<string, number>();
  server.prependListener('connection', (socket: Socket) => {
    const address = socket.remoteAddress;
    if (address === undefined || (!loopbackToo && isLoopback(address))) return;
    const count = open.get(address) ?? 0;
    if (count >= max) return void socket.destroy();
    open.set(address, count + 1);
    socket.once('close', () => {
      const left = (open.get(address) ?? 1) - 1;
      if (left <= 0) open.delete(address);
      else open.set(address, left);
    });
  });
}

interface PendingBody {
  request: IncomingMessage;
  response: ServerResponse;
  deadline: number;
}

/**
 * Returns what to call on each request: a body still arriving --body-timeout after its headers gets a 408 and its
 * connection is closed. Bodies are checked on a sweep (as Node checks its own request timeout), not a timer each,
 * and the sweep runs only while some body is awaited.
 */
function bodyDeadlines(config: GatewayConfig): (request: IncomingMessage, response: ServerResponse) => void {
  const pending = new Set<PendingBody>();
  const period = Math.min(1_000, config.bodyTimeoutMs);
  let sweep: NodeJS.Timeout | undefined;
  const check = () => {
    const now = performance.now();
    for (const entry of pending) {
      const { request, response } = entry;
      if (request.complete || request.destroyed || response.writableEnded) pending.delete(entry);
      else if (now >= entry.deadline) {
        pending.delete(entry);
        const error = new ApiError(
          408,
          `The request body did not arrive within ${config.bodyTimeoutMs / 1000} s of its headers.`,
          'body_timeout',
        );
        refuse(config, request, response, error);
      }
    }
    if (pending.size === 0) {
      clearInterval(sweep);
      sweep = undefined;
    }
  };
  return (request, response) => {
    const headers = request.headers;
    const length = headers['content-length'];
    if (request.complete || ((length === undefined || length === '0') && headers['transfer-encoding'] === undefined))
      return;
    const entry = { request, response, deadline: performance.now() + config.bodyTimeoutMs };
    pending.add(entry);
    // Let go as soon as the body is in: a request held until the next sweep would outlive the young generation.
    request.once('end', () => pending.delete(entry));
    if (sweep === undefined) {
      sweep = setInterval(check, period);
      sweep.unref();
    }
  };
}

/** Answers `error` in the route's API and closes the connection (a client mid-body is cut: its slot is what counts). */
function refuse(config: GatewayConfig, request: IncomingMessage, response: ServerResponse, error: ApiError): void {
  const socket = request.socket;
  if (response.headersSent || response.destroyed) return void socket.destroy();
  response.once('finish', () => socket.destroy());
  answerAndClose(response, error, apiOfUrl(config, request.url));
}
