import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Controller, Get, Module, type INestApplication } from '@nestjs/common';
import { ConfigModule, ConfigService } from '@nestjs/config';
import { Test } from '@nestjs/testing';
import KeyvRedis from '@keyv/redis';
import { Keyv } from 'keyv';
import { spawn, type ChildProcess } from 'node:child_process';
import { createServer } from 'node:net';
import { Dedup, OrchestratorModule } from 'nest-prompt-orchestrator';

/**
 * The versions docs/configuration.md and docs/dedup.md give a Nest 12 app
 * (`npm install @nestjs/config`, keyv 5 with @keyv/redis 5), set up as they
 * show: the window shared through Redis, its keys under the namespace once.
 */
let calls = 0;

@Controller('rates')
class RatesController {
  @Get()
  @Dedup()
  rates() {
    return { call: ++calls };
  }
}

const freePort = () =>
  new Promise<number>((resolve) => {
    const server = createServer().listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });

async function redisAnswers(port: number): Promise<void> {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const up = await new Promise<boolean>((resolve) => {
      const socket = createServer().listen(port, '127.0.0.1', () => socket.close(() => resolve(false)));
      socket.on('error', () => resolve(true));
    });
    if (up) return;
    if (Date.now() > deadline) throw new Error('redis-server did not start');
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

describe('install advice for Nest 12: @nestjs/config, keyv 5 + @keyv/redis 5', () => {
  let redis: ChildProcess;
  let app: INestApplication;
  let store: KeyvRedis<unknown>;

  beforeAll(async () => {
    const port = await freePort();
    redis = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], {
      stdio: 'ignore',
    });
    process.env.REDIS_URL = `redis://127.0.0.1:${port}`;
    await redisAnswers(port);

    @Module({
      imports: [
        ConfigModule.forRoot(),
        OrchestratorModule.forRootAsync({
          imports: [ConfigModule],
          inject: [ConfigService],
          useFactory: (config: ConfigService) => {
            store = new KeyvRedis(config.getOrThrow<string>('REDIS_URL'));
            return {
              windowStores: [new Keyv({ store, namespace: 'my-app', useKeyPrefix: false })],
              dedup: { storeTimeoutMs: 1_000 },
            };
          },
        }),
      ],
      controllers: [RatesController],
    })
    class AppModule {}

    const moduleRef = await Test.createTestingModule({ imports: [AppModule] }).compile();
    app = moduleRef.createNestApplication({ logger: false });
    await app.listen(0, '127.0.0.1');
  });

  afterAll(async () => {
    await app?.close();
    redis?.kill();
  });

  it('shares the window through Redis, each key prefixed by the namespace once', async () => {
    const url = await app.getUrl();
    const rates = async () => {
      const response = await fetch(`${url}/rates`);
      return { dedup: response.headers.get('x-orchestrator-dedup'), body: await response.json() };
    };
    expect(await rates()).toEqual({ dedup: 'miss', body: { call: 1 } });
    // The call stays joinable until Redis has taken its answer (so that no request slips in between and calls again):
    // a request sent before that joins it, one sent after reads the window. Neither makes a second call.
    const deadline = Date.now() + 5_000;
    let again = await rates();
    while (again.dedup === 'joined' && Date.now() < deadline) {
      expect(again.body).toEqual({ call: 1 });
      again = await rates();
    }
    expect(again).toEqual({ dedup: 'cached', body: { call: 1 } });
    const keys = await (store.client as unknown as { keys(pattern: string): Promise<string[]> }).keys('*');
    expect(keys.length).toBeGreaterThan(0);
    for (const key of keys) {
      // `my-app::<key>` (@keyv/redis's separator), not `my-app::my-app:<key>`.
      expect(key.startsWith('my-app:')).toBe(true);
      expect(key.indexOf('my-app', 1)).toBe(-1);
    }
  });
});
