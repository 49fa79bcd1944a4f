import 'reflect-metadata';
import { NestFactory } from '@nestjs/core';
import { ExampleModule } from './example.module.js';

async function main(): Promise<void> {
  const app = await NestFactory.create(ExampleModule, { logger: ['error', 'warn'] });
  app.enableShutdownHooks();
  await app.listen(Number(process.env.PORT ?? 3000), process.env.HOST ?? '127.0.0.1');
  const url = await app.getUrl();
  console.log(`exchange-rates example listening on ${url} (the feed answers in ${process.env.FEED_LATENCY_MS ?? 500} ms)

  curl ${url}/rates/EUR                                  run it twice: the second is answered from the window
  curl '${url}/convert?from=EUR&to=USD&amount=100'
  curl ${url}/feed                                       how many calls the feed received
  curl -X PUT ${url}/feed/mode -H 'content-type: application/json' -d '{"mode":"down"}'    or "hang", then "ok"`);
}

main().catch((error: unknown) => {
  console.error(`example: failed to start: ${(error as Error)?.message ?? error}`);
  process.exit(1);
});
