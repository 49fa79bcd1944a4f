import 'reflect-metadata';
import { startHybridApp } from './hybrid-app.js';

async function main(): Promise<void> {
  const host = process.env.HOST ?? '127.0.0.1';
  const rpcPort = Number(process.env.RPC_PORT ?? 3001);
  const app = await startHybridApp({ host, port: Number(process.env.PORT ?? 3000), rpcPort });
  app.enableShutdownHooks();
  const url = await app.getUrl();
  console.log(`exchange-rates example listening on ${url} (the feed answers in ${process.env.FEED_LATENCY_MS ?? 500} ms)

  curl ${url}/rates/EUR                                  run it twice: the second is answered from the window
  curl ${url}/graphql -H 'content-type: application/json' -d '{"query":"{ rates(base: \\"EUR\\") { asOf rates { currency rate } } }"}'
  curl '${url}/convert?from=EUR&to=USD&amount=100'
  curl ${url}/feed                                       how many calls the feed received
  curl -X PUT ${url}/feed/mode -H 'content-type: application/json' -d '{"mode":"down"}'    or "hang", then "ok"

  TCP (Nest microservice): ${host}:${rpcPort}, message pattern 'rates', data { "base": "EUR" }
  The HTTP route, the GraphQL query and the TCP handler share one breaker: open it through one, the others refuse too.`);
}

main().catch((error: unknown) => {
  console.error(`example: failed to start: ${(error as Error)?.message ?? error}`);
  process.exit(1);
});
