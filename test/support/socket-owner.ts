import { readFileSync, readdirSync, readlinkSync } from 'node:fs';

/**
 * Which process holds the client end of a loopback TCP connection (Linux /proc): tells apart requests that several
 * processes send to one server, e.g. which replica or worker sent a health probe, by counting, not by timing.
 */

/** The inode of the socket whose local port is `clientPort` and remote port `serverPort`, or undefined. */
function socketInode(clientPort: number, serverPort: number): string | undefined {
  const port = (address: string) => Number.parseInt(address.slice(address.lastIndexOf(':') + 1), 16);
  for (const table of ['/proc/net/tcp', '/proc/net/tcp6']) {
    let text: string;
    try {
      text = readFileSync(table, 'utf8');
    } catch {
      continue;
    }
    for (const line of text.split('\n').slice(1)) {
      const fields = line.trim().split(/\s+/);
      if (fields.length > 9 && port(fields[1]) === clientPort && port(fields[2]) === serverPort) return fields[9];
    }
  }
  return undefined;
}

/** Which of `pids` has that connection's client socket open, or undefined (none of them, or it closed already). */
export function socketOwner(clientPort: number, serverPort: number, pids: readonly number[]): number | undefined {
  const inode = socketInode(clientPort, serverPort);
  if (inode === undefined) return undefined;
  const link = `socket:[${inode}]`;
  for (const pid of pids) {
    let fds: string[];
    try {
      fds = readdirSync(`/proc/${pid}/fd`);
    } catch {
      continue;
    }
    for (const fd of fds) {
      try {
        if (readlinkSync(`/proc/${pid}/fd/${fd}`) === link) return pid;
      } catch {
        // closed meanwhile
      }
    }
  }
  return undefined;
}
