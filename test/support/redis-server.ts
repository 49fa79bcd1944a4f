import { spawn, type ChildProcess } from 'node:child_process';
import { accessSync, constants, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createServer, connect } from 'node:net';
import { execFileOwned, ownChild } from './children.js';

/**
 * A Redis server a test owns: its own process on its own loopback port (never
 * the machine's shared 6379), so the test can kill, freeze and restart it.
 */
export interface OwnedRedis {
  /** `redis://127.0.0.1:PORT` (with the password when one is required). */
  url: string;
  port: number;
  /** The server process's id (while it runs). */
  readonly pid: number | undefined;
  /** SIGKILL: the server is gone, connections drop. */
  kill(): Promise<void>;
  /** SIGSTOP: the server keeps its connections open but answers nothing. */
  freeze(): void;
  /** SIGCONT after freeze(). */
  thaw(): void;
  /** Starts it again on the same port (after kill()). */
  restart(): Promise<void>;
  /** Stops it for good; safe to call twice. */
  close(): Promise<void>;
}

export interface OwnedRedisOptions {
  /** Makes the server refuse clients that do not authenticate with it. */
  requirePassword?: string;
  /** More arguments for redis-server, given the port it gets (e.g. cluster or replication settings). */
  args?: (port: number) => string[];
  /** The whole argument list instead (e.g. a Sentinel: its config file and `--sentinel`). */
  argv?: (port: number) => string[];
  /** Serve TLS only, on the port, with these files (clients must show a certificate signed by `ca`). */
  tls?: TlsFiles;
}

/** PEM files made by `makeTlsFiles`. */
export interface TlsFiles {
  dir: string;
  ca: string;
  serverCert: string;
  serverKey: string;
  clientCert: string;
  clientKey: string;
}

/** Why `redis-server` cannot be started here, if it cannot (tests fail with this reason rather than hang). */
export function redisServerMissing(): string | undefined {
  const executable = (path: string) => {
    try {
      accessSync(path, constants.X_OK);
      return true;
    } catch {
      return false;
    }
  };
  const found = (process.env.PATH ?? '').split(':').some((dir) => dir && executable(`${dir}/redis-server`));
  return found
    ? undefined
    : 'redis-server is not on PATH: on Debian, as root, apt-get install -y redis-server (npm test does it first: scripts/test-prerequisites.mjs)';
}

export async function startOwnedRedis(options: OwnedRedisOptions = {}): Promise<OwnedRedis> {
  const missing = redisServerMissing();
  if (missing) throw new Error(missing);
  let port = 0;
  let child: ChildProcess | undefined;
  let output = '';
  const start = async () => {
    const tls = options.tls;
    const args = options.argv
      ? options.argv(port)
      : [
          ...(tls
            ? [
                '--port',
                '0',
                '--tls-port',
                String(port),
                '--tls-cert-file',
                tls.serverCert,
                '--tls-key-file',
                tls.serverKey,
                '--tls-ca-cert-file',
                tls.ca,
              ]
            : ['--port', String(port)]),
          ...['--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--daemonize', 'no'],
          ...(options.args?.(port) ?? []),
        ];
    if (options.requirePassword) args.push('--requirepass', options.requirePassword);
    output = '';
    const started = ownChild(spawn('redis-server', args, { stdio: ['ignore', 'pipe', 'pipe'] }), 'redis-server');
    child = started;
    let failed = false;
    started.on('error', (error) => {
      failed = true;
      output = `${output}${error.message}\n`.slice(-4_000);
    });
    started.stdout?.on('data', (b: Buffer) => (output = (output + b.toString()).slice(-4_000)));
    started.stderr?.on('data', (b: Buffer) => (output = (output + b.toString()).slice(-4_000)));
    const closed = new Promise((resolve) => started.once('close', resolve));
    const gone = () => failed || started.exitCode !== null || started.signalCode !== null;
    await waitForPort(port, 60_000, gone).catch(async (error: Error) => {
      if (!gone()) started.kill('SIGKILL');
      // Its last words (e.g. "Address already in use") are read before they are reported.
      await Promise.race([closed, new Promise((resolve) => setTimeout(resolve, 1_000))]);
      throw new Error(`redis-server did not start on port ${port}: ${error.message}\n${output}`);
    });
  };
  const stop = async (signal: NodeJS.Signals) => {
    const running = child;
    if (!running || running.exitCode !== null || running.signalCode !== null) return;
    const exited = new Promise<void>((resolve) => running.once('exit', () => resolve()));
    running.kill('SIGCONT'); // a frozen server cannot die of SIGTERM
    running.kill(signal);
    await exited;
  };
  // The port is free when picked, yet another process may take it before redis-server binds it: then another one.
  for (let attempt = 1; ; attempt++) {
    port = await freePort();
    try {
      await start();
      break;
    } catch (error) {
      if (attempt === 3 || !/Address already in use/i.test((error as Error).message)) throw error;
    }
  }
  const auth = options.requirePassword ? `:${encodeURIComponent(options.requirePassword)}@` : '';
  return {
    url: `${options.tls ? 'rediss' : 'redis'}://${auth}127.0.0.1:${port}`,
    port,
    get pid() {
      return child && child.exitCode === null && child.signalCode === null ? child.pid : undefined;
    },
    kill: () => stop('SIGKILL'),
    freeze: () => child?.kill('SIGSTOP'),
    thaw: () => child?.kill('SIGCONT'),
    restart: async () => {
      await stop('SIGKILL');
      await start();
    },
    close: () => stop('SIGKILL'),
  };
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      const port = typeof address === 'object' && address ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}

/** Polls until a connection to the port succeeds (no fixed sleep); gives up at once if the server is `gone`. */
async function waitForPort(port: number, timeoutMs: number, gone: () => boolean): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (gone()) throw new Error('redis-server exited before it listened');
    const open = await new Promise<boolean>((resolve) => {
      const socket = connect(port, '127.0.0.1');
      socket.once('connect', () => {
        socket.destroy();
        resolve(true);
      });
      socket.once('error', () => resolve(false));
    });
    if (open) return;
    if (Date.now() > deadline) throw new Error(`nothing listens after ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
}

const run = execFileOwned;

/** `redis-cli -p PORT args...` (TLS when `tls` is given), its output. */
export async function redisCli(port: number, args: string[], tls?: TlsFiles): Promise<string> {
  const secure = tls ? ['--tls', '--cacert', tls.ca, '--cert', tls.clientCert, '--key', tls.clientKey] : [];
  const { stdout } = await run('redis-cli', ['-h', '127.0.0.1', '-p', String(port), ...secure, ...args], {
    timeout: 30_000,
  });
  return stdout;
}

async function until(what: string, check: () => Promise<boolean>, timeoutMs = 30_000): Promise<void> {
  for (const deadline = Date.now() + timeoutMs; ;) {
    if (await check().catch(() => false)) return;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 100)); // polling interval
  }
}

/** A Redis Cluster a test owns: its nodes, each its own process. */
export interface OwnedRedisCluster {
  /** `redis://127.0.0.1:PORT` of the first node (any node would do). */
  url: string;
  nodes: OwnedRedis[];
  /** The node that is master of the slot `key` hashes to, as the cluster now says. */
  masterOf(key: string): Promise<OwnedRedis>;
  /** Until every slot is served again (e.g. after a master was killed and its replica took over). */
  healthy(): Promise<void>;
  close(): Promise<void>;
}

/**
 * `masters` masters, each with `replicasPerMaster` replicas, joined with
 * `redis-cli --cluster create`. A node unreachable for a second is failed
 * over (`cluster-node-timeout 1000`).
 */
export async function startRedisCluster(
  options: { masters?: number; replicasPerMaster?: number; tls?: TlsFiles } = {},
): Promise<OwnedRedisCluster> {
  const tls = options.tls;
  const masters = options.masters ?? 3;
  const replicas = options.replicasPerMaster ?? 0;
  const dir = mkdtempSync(join(tmpdir(), 'npo-redis-cluster-'));
  const nodes: OwnedRedis[] = [];
  const close = async () => {
    await Promise.all(nodes.map((node) => node.close()));
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    for (let i = 0; i < masters * (1 + replicas); i++) {
      nodes.push(
        await startOwnedRedis({
          tls,
          args: (port) => [
            ...[
              '--cluster-enabled',
              'yes',
              '--cluster-config-file',
              join(dir, `nodes-${port}.conf`),
              '--cluster-node-timeout',
              '1000',
            ],
            // Each node its own file for the copies replication makes; a replica may take over however long ago it
            // last heard from its master (an idle test cluster pings rarely).
            ...['--dir', dir, '--dbfilename', `dump-${port}.rdb`, '--cluster-replica-validity-factor', '0'],
            ...(tls ? ['--tls-cluster', 'yes', '--tls-replication', 'yes'] : []),
          ],
        }),
      );
    }
    await redisCli(
      nodes[0].port,
      [
        '--cluster',
        'create',
        ...nodes.map((n) => `127.0.0.1:${n.port}`),
        '--cluster-replicas',
        String(replicas),
        '--cluster-yes',
      ],
      tls,
    );
    const healthy = async () => {
      const alive = () => nodes.filter((n) => n.pid !== undefined);
      await until(
        'the cluster to serve every slot',
        async () => {
          const infos = await Promise.all(alive().map((n) => redisCli(n.port, ['cluster', 'info'], tls)));
          return infos.every((info) => /cluster_state:ok/.test(info) && /cluster_slots_ok:16384/.test(info));
        },
        60_000,
      ).catch(async (error: Error) => {
        const views = await Promise.all(
          alive().map((n) => redisCli(n.port, ['cluster', 'nodes'], tls).catch((e: Error) => e.message)),
        );
        throw new Error(`${error.message}; the nodes say:\n${views.join('\n')}`);
      });
    };
    await healthy();
    const masterOf = async (key: string) => {
      const alive = nodes.find((n) => n.pid !== undefined)!;
      const slot = Number((await redisCli(alive.port, ['cluster', 'keyslot', key], tls)).trim());
      const lines = (await redisCli(alive.port, ['cluster', 'nodes'], tls)).trim().split('\n');
      for (const line of lines) {
        const [, address, flags, , , , , , ...ranges] = line.split(' ');
        if (!flags.includes('master') || flags.includes('fail')) continue;
        const owns = ranges.some((range) => {
          const [from, to = from] = range.split('-').map(Number);
          return slot >= from && slot <= to;
        });
        const port = Number(address.split('@')[0].split(':')[1]);
        if (owns) return nodes.find((n) => n.port === port)!;
      }
      throw new Error(`no master serves slot ${slot}`);
    };
    return { url: nodes[0].url, nodes, masterOf, healthy, close };
  } catch (error) {
    await close();
    throw error;
  }
}

/** A master, a replica and a Sentinel watching them (quorum 1), each its own process. */
export interface OwnedSentinelSet {
  /** `redis+sentinel://127.0.0.1:PORT/mymaster` */
  url: string;
  name: string;
  sentinel: OwnedRedis;
  /** The master and the replica, in the order started. */
  nodes: OwnedRedis[];
  /** The node Sentinel now names as master. */
  master(): Promise<OwnedRedis>;
  /** Until Sentinel names a master other than `old` and that node acts as master. */
  failedOver(old: OwnedRedis): Promise<OwnedRedis>;
  close(): Promise<void>;
}

export async function startSentinelSet(name = 'mymaster'): Promise<OwnedSentinelSet> {
  const dir = mkdtempSync(join(tmpdir(), 'npo-redis-sentinel-'));
  const started: OwnedRedis[] = [];
  const close = async () => {
    await Promise.all(started.map((node) => node.close()));
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    // Replication writes a copy: in this set's own directory, one file per node.
    const files = (port: number) => ['--dir', dir, '--dbfilename', `dump-${port}.rdb`];
    const primary = await startOwnedRedis({ args: files });
    started.push(primary);
    const replica = await startOwnedRedis({
      args: (port) => [
        ...files(port),
        '--replicaof',
        '127.0.0.1',
        String(primary.port),
        '--replica-announce-ip',
        '127.0.0.1',
      ],
    });
    started.push(replica);
    await until('the replica to be in sync', async () =>
      /master_link_status:up/.test(await redisCli(replica.port, ['info', 'replication'])),
    );
    const sentinel = await startOwnedRedis({
      argv: (port) => {
        // Sentinel rewrites its config file: one per start.
        const file = join(dir, `sentinel-${port}.conf`);
        writeFileSync(
          file,
          [
            `port ${port}`,
            'bind 127.0.0.1',
            `sentinel monitor ${name} 127.0.0.1 ${primary.port} 1`,
            `sentinel down-after-milliseconds ${name} 1000`,
            `sentinel failover-timeout ${name} 5000`,
            '',
          ].join('\n'),
        );
        return [file, '--sentinel'];
      },
    });
    started.push(sentinel);
    const nodes = [primary, replica];
    const master = async () => {
      const [, port] = (await redisCli(sentinel.port, ['sentinel', 'get-master-addr-by-name', name]))
        .trim()
        .split('\n');
      return nodes.find((n) => n.port === Number(port))!;
    };
    // Sentinel has found the replica (so it can fail over).
    await until(
      'Sentinel to know the replica',
      async () =>
        /slave|replica/.test(await redisCli(sentinel.port, ['sentinel', 'replicas', name])) &&
        (await redisCli(sentinel.port, ['sentinel', 'replicas', name])).includes(String(replica.port)),
    );
    const failedOver = async (old: OwnedRedis) => {
      let next: OwnedRedis | undefined;
      await until('Sentinel to promote the replica', async () => {
        next = await master();
        return (
          next !== undefined && next !== old && /role:master/.test(await redisCli(next.port, ['info', 'replication']))
        );
      });
      return next!;
    };
    return {
      url: `redis+sentinel://127.0.0.1:${sentinel.port}/${name}`,
      name,
      sentinel,
      nodes,
      master,
      failedOver,
      close,
    };
  } catch (error) {
    await close();
    throw error;
  }
}

/** A CA, a server certificate for 127.0.0.1 signed by it, and a client certificate signed by it, made with openssl. */
export async function makeTlsFiles(): Promise<TlsFiles> {
  const dir = mkdtempSync(join(tmpdir(), 'npo-redis-tls-'));
  const file = (name: string) => join(dir, name);
  const openssl = (args: string[]) => run('openssl', args, { timeout: 60_000 });
  await openssl([
    'req',
    '-x509',
    '-newkey',
    'rsa:2048',
    '-nodes',
    '-keyout',
    file('ca.key'),
    '-out',
    file('ca.crt'),
    '-days',
    '2',
    '-subj',
    '/CN=npo test CA',
  ]);
  writeFileSync(file('server.ext'), 'subjectAltName=IP:127.0.0.1,DNS:localhost\n');
  for (const [who, extra] of [
    ['server', ['-extfile', file('server.ext')]],
    ['client', []],
  ] as const) {
    await openssl([
      'req',
      '-newkey',
      'rsa:2048',
      '-nodes',
      '-keyout',
      file(`${who}.key`),
      '-out',
      file(`${who}.csr`),
      '-subj',
      `/CN=npo test ${who}`,
    ]);
    await openssl([
      'x509',
      '-req',
      '-in',
      file(`${who}.csr`),
      '-CA',
      file('ca.crt'),
      '-CAkey',
      file('ca.key'),
      '-CAcreateserial',
      '-out',
      file(`${who}.crt`),
      '-days',
      '2',
      ...extra,
    ]);
  }
  return {
    dir,
    ca: file('ca.crt'),
    serverCert: file('server.crt'),
    serverKey: file('server.key'),
    clientCert: file('client.crt'),
    clientKey: file('client.key'),
  };
}
