import { connect, type Socket } from 'node:net';

/** A raw TCP connection to a server under test, and what it has seen so far. */
export interface RawConnection {
  socket: Socket;
  connected: boolean;
  closed: boolean;
  /** `performance.now()` when the server closed it (0 while open). */
  closedAt: number;
  /** What the server sent, byte for byte (latin1). */
  received: string;
}

/** A raw connection to `url`'s port on loopback, from `localAddress` (another 127/8 address is another client). */
export function rawConnection(url: string, localAddress = '127.0.0.1'): RawConnection {
  const socket = connect({ port: Number(new URL(url).port), host: '127.0.0.1', localAddress });
  const state: RawConnection = { socket, connected: false, closed: false, closedAt: 0, received: '' };
  socket.setNoDelay(true);
  socket.on('connect', () => (state.connected = true));
  socket.on('data', (chunk: Buffer) => (state.received += chunk.toString('latin1')));
  socket.on('close', () => {
    state.closed = true;
    state.closedAt = performance.now();
  });
  socket.on('error', () => undefined);
  return state;
}

/** Writes `text` one byte every `gapMs`, for as long as the socket is open; returns what stops it. */
export function drip(socket: Socket, text: string, gapMs: number): () => void {
  let i = 0;
  const timer = setInterval(() => {
    if (socket.destroyed || i >= text.length) return clearInterval(timer);
    socket.write(text[i++]);
  }, gapMs);
  return () => clearInterval(timer);
}
