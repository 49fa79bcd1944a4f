import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort, processCpuMs, type ChildHandle } from './processes.js';

/** The nginx binary on the PATH, or undefined when there is none (the rows that compare with it are then skipped). */
export function nginxBinary(): string | undefined {
  try {
    return execFileSync('sh', ['-c', 'command -v nginx'], { encoding: 'utf8' }).trim() || undefined;
  } catch {
    return undefined;
  }
}

/**
 * nginx as a caching reverse proxy in front of `upstream`, the way one would put it in front of an LLM API to
 * answer repeated requests from memory: POST answers cached under the URI and the body, and `proxy_cache_lock` so
 * that a herd of identical requests makes one upstream call. One process (`master_process off`, not a daemon), so
 * that its CPU is one process's; its own prefix, config, cache and logs in a temp dir; a loopback port.
 */
function config(dir: string, port: number, upstream: URL, connections: number): string {
  return `daemon off;
master_process off;
worker_processes 1;
worker_rlimit_nofile ${connections * 4 + 1024};
error_log ${dir}/error.log warn;
pid ${dir}/nginx.pid;
events { worker_connections ${connections * 2 + 512}; }
http {
  access_log off;
  client_body_temp_path ${dir}/body;
  proxy_temp_path ${dir}/proxy;
  fastcgi_temp_path ${dir}/fastcgi;
  uwsgi_temp_path ${dir}/uwsgi;
  scgi_temp_path ${dir}/scgi;
  proxy_cache_path ${dir}/cache levels=1:2 keys_zone=answers:16m max_size=512m inactive=10m use_temp_path=off;
  upstream provider {
    server ${upstream.host};
    keepalive 256;
  }
  server {
    listen 127.0.0.1:${port} backlog=4096;
    keepalive_requests 10000000;
    keepalive_timeout 60s;
    # The body must be in memory for $request_body (the cache key).
    client_body_buffer_size 1m;
    client_max_body_size 8m;
    location / {
      proxy_pass http://provider;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_cache answers;
      proxy_cache_methods POST;
      proxy_cache_key "$request_uri|$request_body";
      proxy_cache_lock on;
      proxy_cache_lock_timeout 30s;
      proxy_cache_lock_age 30s;
      proxy_cache_valid 200 10m;
      proxy_ignore_headers Cache-Control Expires Set-Cookie;
      proxy_buffer_size 16k;
      proxy_buffers 64 16k;
    }
  }
}
`;
}

const started = new Set<ChildProcess>();
let exitHandler = false;

/** Starts nginx in front of `upstream` (room for `connections` clients at once); resolves once its port answers. */
export async function startNginx(binary: string, upstream: string, connections = 1024): Promise<ChildHandle> {
  const dir = await mkdtemp(join(tmpdir(), 'bench-nginx-'));
  const port = await freePort();
  const file = join(dir, 'nginx.conf');
  await writeFile(file, config(dir, port, new URL(upstream), connections));
  const child = spawn(binary, ['-p', dir, '-c', file, '-e', join(dir, 'error.log')], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  started.add(child);
  if (!exitHandler) {
    exitHandler = true;
    // Last resort: an nginx still running when the bench exits is killed by its own pid.
    process.on('exit', () => {
      for (const c of started) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
    });
  }
  let output = '';
  child.stdout?.setEncoding('utf8').on('data', (text: string) => (output = (output + text).slice(-4096)));
  child.stderr?.setEncoding('utf8').on('data', (text: string) => (output = (output + text).slice(-4096)));
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 5_000);
      await exited;
      clearTimeout(timer);
    }
    started.delete(child);
    await rm(dir, { recursive: true, force: true });
  };
  const until = Date.now() + 10_000;
  while (!(await listening(port))) {
    if (child.exitCode !== null || child.signalCode !== null || Date.now() > until) {
      await stop();
      throw new Error(`nginx did not start on port ${port}:\n${output}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  const pid = child.pid ?? 0;
  return {
    name: 'nginx',
    pid,
    url: `http://127.0.0.1:${port}`,
    output: () => output,
    lastLine: () => undefined,
    cpuMs: () => processCpuMs(pid),
    stop,
  };
}

function listening(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1');
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}
