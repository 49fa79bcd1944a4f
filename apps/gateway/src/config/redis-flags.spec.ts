import { describe, expect, it } from '@jest/globals';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseGatewayConfig } from './gateway-config.js';
import { parseSentinelUrl } from './redis-flags.js';

const config = (...flags: string[]) => parseGatewayConfig(flags, {});

describe('the Redis connection settings', () => {
  it("a Sentinel URL lists its sentinels, the master name, the data nodes' credentials and database", () => {
    expect(parseSentinelUrl('redis+sentinel://:s3cret@10.0.0.1:26379,[::1]:26380,sentinel-c/mymaster/2')).toEqual({
      name: 'mymaster',
      sentinels: [
        { host: '10.0.0.1', port: 26379 },
        { host: '::1', port: 26380 },
        { host: 'sentinel-c', port: 26379 },
      ],
      username: undefined,
      password: 's3cret',
      database: 2,
      tls: false,
    });
    expect(parseSentinelUrl('rediss+sentinel://app:pw@h:1/m')).toMatchObject({
      username: 'app',
      password: 'pw',
      tls: true,
      name: 'm',
    });
    expect(parseSentinelUrl('redis://h:6379')).toBeUndefined();
  });

  it('a malformed --redis is refused naming the flag, never repeating a password', () => {
    expect(() => config('--redis', 'redis+sentinel://:hunter2@h:1')).toThrow(
      /^--redis: a Sentinel URL is redis\+sentinel:\/\//,
    );
    expect(() => config('--redis', 'redis+sentinel://:hunter2@h:99999/m')).toThrow(
      /--redis: "h:99999" is not a sentinel's host:port/,
    );
    expect(() => config('--redis', 'http://:hunter2@h:1')).toThrow(
      '--redis must use redis:, rediss: or redis+sentinel:, got "http:"',
    );
    for (const url of ['redis+sentinel://:hunter2@h:1', 'http://:hunter2@h:1', 'redis://:hunter2@h:1:2:3']) {
      try {
        config('--redis', url);
      } catch (error) {
        expect((error as Error).message).not.toContain('hunter2');
      }
    }
    expect(config('--redis', 'redis+sentinel://h1:26379,h2:26379/mymaster')?.redisUrl).toBe(
      'redis+sentinel://h1:26379,h2:26379/mymaster',
    );
  });

  it('--redis-ca, --redis-cert and --redis-key are read at start; a missing file stops it naming the flag', () => {
    const dir = mkdtempSync(join(tmpdir(), 'npo-redis-tls-flags-'));
    writeFileSync(join(dir, 'ca.pem'), 'CA');
    writeFileSync(join(dir, 'cert.pem'), 'CERT');
    writeFileSync(join(dir, 'key.pem'), 'KEY');
    const tls = config(
      '--redis',
      'rediss://h:6380',
      '--redis-ca',
      join(dir, 'ca.pem'),
      '--redis-cert',
      join(dir, 'cert.pem'),
      '--redis-key',
      join(dir, 'key.pem'),
    )?.redisTls;
    expect([tls?.ca?.toString(), tls?.cert?.toString(), tls?.key?.toString()]).toEqual(['CA', 'CERT', 'KEY']);
    expect(() => config('--redis', 'rediss://h:6380', '--redis-ca', join(dir, 'missing.pem'))).toThrow(
      `--redis-ca ${join(dir, 'missing.pem')}: cannot be read (ENOENT)`,
    );
    expect(() =>
      config('--redis', 'rediss://h:6380', '--redis-key', dir, '--redis-cert', join(dir, 'cert.pem')),
    ).toThrow(/^--redis-key .*: cannot be read \(EISDIR\)/);
    expect(() => config('--redis', 'rediss://h:6380', '--redis-cert', join(dir, 'cert.pem'))).toThrow(
      '--redis-cert and --redis-key go together',
    );
    expect(() => config('--redis-ca', join(dir, 'ca.pem'))).toThrow('--redis-ca needs --redis');
    expect(config('--redis', 'redis://h:6379')?.redisTls).toBeUndefined();
  });

  it('--redis-prefix may not hold braces (they would choose the cluster slot)', () => {
    expect(() => config('--redis', 'redis://h:6379', '--redis-prefix', 'a{b}')).toThrow(
      /--redis-prefix must not hold \{ or \}/,
    );
  });
});
