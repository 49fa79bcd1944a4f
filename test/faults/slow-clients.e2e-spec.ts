import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { PLATFORMS, waitFor } from '../support/platforms.js';
import { postJson, startGateway, type GatewayUnderTest } from '../support/gateway-harness.js';
import { drip, rawConnection, type RawConnection } from '../support/raw-connection.js';

/**
 * Slow clients and the connection table (docs/security.md): one address may
 * not take the whole table, a body that does not arrive within --body-timeout
 * gets a 408 and frees its slot long before --request-timeout, and a declared
 * body over --max-body is refused before it is sent. The attacker connects
 * from 127.0.0.2 (Linux routes all of 127/8 to loopback), the victim from
 * 127.0.0.1, so that the two are different addresses to the gateway.
 */

const ATTACKER = '127.0.0.2';

const BODY = JSON.stringify({ model: 'mock-model', messages: [{ role: 'user', content: 'x'.repeat(500) }] });
const head = (length: number, extra = '') =>
  `POST /v1/chat/completions HTTP/1.1\r\nhost: localhost\r\nauthorization: Bearer gk-1\r\ncontent-type: application/json\r\ncontent-length: ${length}\r\n${extra}\r\n`;

/** Headers and the first bytes of a body, then nothing more: a slot held with almost no traffic. */
function slowBody(g: GatewayUnderTest, localAddress?: string): RawConnection {
  const c = rawConnection(g.gatewayUrl, localAddress);
  c.socket.write(head(BODY.length) + BODY.slice(0, 10));
  return c;
}

async function liveProbe(g: GatewayUnderTest): Promise<number> {
  return (await fetch(`${g.gatewayUrl}/health/live`)).status;
}

describe.each(PLATFORMS)('slow clients and the connection table (%s)', (platform) => {
  describe('--max-connections-per-address', () => {
    let g: GatewayUnderTest;
    const held: RawConnection[] = [];
    beforeAll(async () => {
      // No body deadline here: the attacker's connections stay open for the whole test, only the address cap acts.
      g = await startGateway({
        flags: [
          '--platform',
          platform,
          '--max-connections',
          '200',
          '--max-connections-per-address',
          '100',
          '--body-timeout',
          '0',
          '--gateway-keys',
          'gk-1',
        ],
      });
    });
    afterAll(async () => {
      for (const c of held) c.socket.destroy();
      await g?.close();
    });

    it('300 slow bodies from one address: 100 are held, the rest refused; other addresses are served meanwhile', async () => {
      for (let i = 0; i < 300; i++) held.push(slowBody(g, ATTACKER));
      await waitFor(
        () => held.every((c) => c.connected || c.closed),
        10_000,
        'every attacker connection to be accepted or refused',
      );
      await waitFor(
        () => held.filter((c) => c.closed).length >= 200,
        10_000,
        'the connections over the address cap to be closed',
      );
      const open = held.filter((c) => !c.closed);
      expect(open).toHaveLength(100);
      // Refused at once: not one byte of an answer, the connection simply closed.
      expect(held.filter((c) => c.closed).every((c) => c.received === '')).toBe(true);

      // While the attacker holds its 100, the victim's probe and a real request are answered.
      expect(await liveProbe(g)).toBe(200);
      const real = await postJson(`${g.gatewayUrl}/v1/chat/completions`, JSON.parse(BODY), {
        authorization: 'Bearer gk-1',
      });
      expect(real.status).toBe(200);

      // One more from the attacker is refused; one from a third address is not.
      const more = slowBody(g, ATTACKER);
      const other = rawConnection(g.gatewayUrl, '127.0.0.3');
      other.socket.write('GET /health/live HTTP/1.1\r\nhost: localhost\r\n\r\n');
      held.push(more, other);
      await waitFor(() => more.closed, 5_000, 'the attacker connection over its cap to be closed');
      await waitFor(() => other.received.includes('\r\n\r\n'), 5_000, 'the third address to be answered');
      expect(other.received).toMatch(/^HTTP\/1\.1 200/);
      expect(open.every((c) => !c.closed)).toBe(true);
    }, 60_000);
  });

  describe('--body-timeout', () => {
    let g: GatewayUnderTest;
    beforeAll(async () => {
      g = await startGateway({
        flags: [
          '--platform',
          platform,
          '--max-connections',
          '4',
          '--body-timeout',
          '2',
          '--request-timeout',
          '30',
          '--gateway-keys',
          'gk-1',
        ],
      });
    });
    afterAll(() => g?.close());

    it('a body still trickling after --body-timeout gets 408 and its connection is closed, freeing the slot', async () => {
      // The whole table taken by bodies that trickle (a byte every 200 ms: 100 s for this body, never a long stall).
      const slow = Array.from({ length: 4 }, () => slowBody(g));
      const stops = slow.map((c) => drip(c.socket, BODY.slice(10), 200));
      try {
        await waitFor(() => slow.every((c) => c.connected || c.closed), 5_000, 'the slow connections to be accepted');
        // Before the deadline the table is full: the probe is refused (its connection closed at once).
        await expect(liveProbe(g)).rejects.toThrow();
        await waitFor(() => slow.every((c) => c.closed), 20_000, 'the slow bodies to be cut');
        for (const c of slow) {
          expect(c.received).toMatch(/^HTTP\/1\.1 408/);
          expect(c.received.toLowerCase()).toContain('connection: close');
          // The gateway's own answer (Node's --request-timeout one has no body): the 30 s limit did not do this.
          expect(c.received).toContain('"body_timeout"');
        }
        // Their slots are free: the probe is answered, and a body sent whole is not affected by the deadline.
        expect(await liveProbe(g)).toBe(200);
        const real = await postJson(`${g.gatewayUrl}/v1/chat/completions`, JSON.parse(BODY), {
          authorization: 'Bearer gk-1',
        });
        expect(real.status).toBe(200);
      } finally {
        for (const stop of stops) stop();
        for (const c of slow) c.socket.destroy();
      }
    }, 60_000);
  });

  describe('Expect: 100-continue', () => {
    let g: GatewayUnderTest;
    beforeAll(async () => {
      g = await startGateway({ flags: ['--platform', platform, '--max-body', '65536', '--gateway-keys', 'gk-1'] });
    });
    afterAll(() => g?.close());

    it('a declared body over --max-body is answered 413 at once, without 100 Continue; an acceptable one gets 100, then its answer', async () => {
      const over = rawConnection(g.gatewayUrl);
      over.socket.write(head(20_000_000, 'expect: 100-continue\r\n'));
      try {
        await waitFor(() => over.closed, 10_000, 'the server to answer and close');
        expect(over.received).toMatch(/^HTTP\/1\.1 413/);
        expect(over.received).not.toContain('100 Continue');
        expect(over.received).toContain('"request_too_large"');
      } finally {
        over.socket.destroy();
      }

      const under = rawConnection(g.gatewayUrl);
      try {
        under.socket.write(head(BODY.length, 'expect: 100-continue\r\n'));
        await waitFor(() => under.received.includes('\r\n\r\n'), 10_000, 'an interim answer');
        expect(under.received).toMatch(/^HTTP\/1\.1 100 Continue\r\n\r\n$/);
        under.socket.write(BODY);
        await waitFor(() => /HTTP\/1\.1 (?!100)\d{3}/.test(under.received), 10_000, 'the final answer');
        expect(under.received).toMatch(/^HTTP\/1\.1 100 Continue\r\n\r\nHTTP\/1\.1 200/);
      } finally {
        under.socket.destroy();
      }
    });
  });
});
