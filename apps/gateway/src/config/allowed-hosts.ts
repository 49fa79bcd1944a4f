import type { IncomingMessage } from 'node:http';
import { isIP } from 'node:net';
import { hostname } from 'node:os';

/** The part of the gateway's config a host check reads (`GatewayConfig` has these fields). */
export interface HostSettings {
  host: string;
  allowedHosts?: AllowedHost[] | '*';
  trustProxy: boolean;
}

/** One `--allowed-hosts` entry: a lower-case name (IPv6 in brackets), and a port (absent: any port). */
export interface AllowedHost {
  name: string;
  port?: number;
}

const LOOPBACK_NAMES = ['localhost', '127.0.0.1', '[::1]'];
/**
 * Names no one can register in public DNS: a rebinding page's host is a name its author registered, so it never
 * ends like these. Kubernetes Services are reached as `name`, `name.ns.svc` or `name.ns.svc.cluster.local`.
 */
const PRIVATE_SUFFIXES = ['.svc', '.cluster.local', '.internal', '.local', '.localhost', '.home.arpa'];
/** Host values seen and served, kept so that the next request with the same header costs one Set look-up. */
const SEEN_MAX = 1024;

/** Whether the gateway listens on loopback only. */
export function listensOnLoopback(host: string): boolean {
  return host === 'localhost' || host === '::1' || /^127\.\d+\.\d+\.\d+$/.test(host);
}

/**
 * Which `Host` values the gateway answers (see docs/security.md, "DNS rebinding and the Host header"):
 * - `--allowed-hosts *`: any;
 * - on loopback: the loopback names and addresses, any port, plus the names listed;
 * - beyond loopback: the loopback names, any IP address literal (a rebinding page is always reached by a name),
 *   the bind address, and then the names listed, or when none are, the machine's host name and names that cannot
 *   be registered in public DNS (single-label names, `.svc`, `.cluster.local`, `.internal`, `.local`).
 * With `--trust-proxy`, the first `X-Forwarded-Host` is checked instead of `Host` when a proxy sent one.
 */
export class HostCheck {
  readonly any: boolean;
  private readonly names = new Map<string, number | undefined>();
  private readonly ipLiterals: boolean;
  private readonly privateNames: boolean;
  private readonly seen = new Set<string>();
  private readonly trustProxy: boolean;

  constructor(config: HostSettings) {
    this.any = config.allowedHosts === '*';
    this.trustProxy = config.trustProxy;
    const loopback = listensOnLoopback(config.host);
    for (const name of LOOPBACK_NAMES) this.names.set(name, undefined);
    const listed = Array.isArray(config.allowedHosts) ? config.allowedHosts : [];
    for (const { name, port } of listed) this.names.set(name, port);
    this.ipLiterals = !loopback;
    this.privateNames = !loopback && listed.length === 0;
    if (!loopback) {
      const bind = config.host.toLowerCase();
      if (bind !== '0.0.0.0' && bind !== '::' && isIP(bind) === 0) this.names.set(bind, undefined);
      if (this.privateNames) this.names.set(hostname().toLowerCase(), undefined);
    }
  }

  /** The host the client asked for: `Host`, or with --trust-proxy the proxy's `X-Forwarded-Host` when it sent one. */
  hostOf(request: IncomingMessage): string | undefined {
    const headers = request.headers;
    if (this.trustProxy) {
      const forwarded = headers['x-forwarded-host'];
      if (typeof forwarded === 'string' && forwarded !== '') return forwarded;
    }
    return headers.host;
  }

  /**
   * Whether the request may be served. One Set look-up once a Host value was served before; a request without a
   * host at all (HTTP/1.0) is served: browsers always send one.
   */
  allows(request: IncomingMessage): boolean {
    if (this.any) return true;
    const host = this.hostOf(request);
    if (host === undefined || this.seen.has(host)) return true;
    if (!this.allowsHost(host)) return false;
    if (this.seen.size < SEEN_MAX) this.seen.add(host);
    return true;
  }

  /** A `host[:port]` value (the first of a comma list, as a chain of proxies writes X-Forwarded-Host). */
  allowsHost(value: string): boolean {
    if (this.any) return true;
    const parsed = parseHost(value.split(',')[0].trim());
    if (parsed === undefined) return false;
    const { name, port } = parsed;
    if (this.names.has(name)) {
      const wanted = this.names.get(name);
      return wanted === undefined || wanted === port;
    }
    if (this.ipLiterals && (isIP(name) === 4 || (name.startsWith('[') && isIP(name.slice(1, -1)) === 6))) return true;
    return this.privateNames && (!name.includes('.') || PRIVATE_SUFFIXES.some((suffix) => name.endsWith(suffix)));
  }

  /**
   * The status page sign-in's origin check: the page's origin must be a host this gateway serves by name (the
   * loopback names, the listed ones, the bind address, the host name). A host served only through a wide rule (any
   * IP address, any private name) must also be the host asked for: a page on another such host is another site.
   * `*` widens nothing here: a rebinding page's origin always equals the host it asked for.
   */
  allowsOrigin(origin: string, request: IncomingMessage): boolean {
    let host: string;
    try {
      const url = new URL(origin);
      if (url.protocol !== 'http:' && url.protocol !== 'https:') return false;
      host = url.host;
    } catch {
      return false;
    }
    const parsed = parseHost(host);
    if (parsed === undefined) return false;
    if (this.names.has(parsed.name)) {
      const wanted = this.names.get(parsed.name);
      return wanted === undefined || wanted === parsed.port;
    }
    const asked = this.hostOf(request);
    return (
      !this.any && asked !== undefined && this.allowsHost(host) && host === asked.split(',')[0].trim().toLowerCase()
    );
  }
}

/** `name[:port]` or `[v6][:port]`, lower-cased, a trailing dot dropped; undefined when it is not a host. */
export function parseHost(value: string): AllowedHost | undefined {
  const lower = value.toLowerCase();
  const match = /^(\[[0-9a-f:.]+\]|[a-z0-9_.-]+?)\.?(?::(\d{1,5}))?$/.exec(lower);
  if (!match) return undefined;
  const port = match[2] === undefined ? undefined : Number(match[2]);
  if (port !== undefined && (port < 1 || port > 65535)) return undefined;
  if (match[1] === '' || match[1].startsWith('.')) return undefined;
  return port === undefined ? { name: match[1] } : { name: match[1], port };
}

const CHECKS = new WeakMap<object, HostCheck>();

/** The gateway's one `HostCheck` per configuration (the server and the status page's sign-in share it). */
export function hostCheckOf(config: HostSettings): HostCheck {
  let check = CHECKS.get(config);
  if (!check) {
    check = new HostCheck(config);
    CHECKS.set(config, check);
  }
  return check;
}

/**
 * The client's address: the socket's peer, or with --trust-proxy the last `X-Forwarded-For` entry (the address the
 * proxy in front of the gateway saw: entries before it are the client's own word).
 */
export function clientAddress(request: IncomingMessage, trustProxy: boolean): string {
  if (trustProxy) {
    const forwarded = request.headers['x-forwarded-for'];
    if (typeof forwarded === 'string') {
      const last = forwarded.slice(forwarded.lastIndexOf(',') + 1).trim();
      if (last !== '') return last;
    }
  }
  return request.socket.remoteAddress ?? 'unknown';
}
