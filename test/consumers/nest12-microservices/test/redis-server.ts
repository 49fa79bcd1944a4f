import { spawn, type ChildProcess } from 'node:child_process';
import { connect, createServer } from 'node:net';

export async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as { port: number }).port;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

/** A redis-server of the test's own (on the PATH), on a free loopback port, answering PING before this resolves. */
export async function startRedis(): Promise<{ port: number; stop(): void }> {
  const port = await freePort();
  const child: ChildProcess = spawn(
    'redis-server',
    ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'],
    { stdio: 'ignore' },
  );
  const stop = () => {
    if (child.exitCode === null) child.kill('SIGKILL');
  };
  const deadline = Date.now() + 10_000;
  for (;;) {
    const answered = await new Promise<boolean>((resolve) => {
      const socket = connect(port, '127.0.0.1');
      socket.once('connect', () => socket.end('PING\r\n'));
      socket.once('data', (data) => resolve(data.toString().startsWith('+PONG')));
      socket.once('error', () => resolve(false));
    });
    if (answered) return { port, stop };
    if (Date.now() > deadline || child.exitCode !== null) {
      stop();
      throw new Error('redis-server did not start (is it on the PATH?)');
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}
