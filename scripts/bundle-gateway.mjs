// The gateway as `npm start` runs it: dist/gateway/main.js, bundled by esbuild from tsc's output (which already holds
// the decorators' metadata Nest reads). Node 20 spends most of a start resolving and reading modules one by one; in one
// bundle the data plane answers its first request in about half the time. Nest and its platforms stay outside (a
// chunk loaded on the first control route; see control-plane.ts), as do the packages also loaded by name at run time
// (one copy each) and the optional ones.
import { build } from 'esbuild';
import { cpSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const out = join(root, 'dist/gateway');

const EXTERNAL = [
  /^@nestjs\//,
  /^fastify$/,
  /^@fastify\//,
  /^express$/,
  /^reflect-metadata$/,
  /^class-(validator|transformer)$/,
  // Loaded by name (the plugin's optional peers, Redis, tracing): bundled, they would load twice.
  /^prom-client$/,
  /^pino-pretty$/,
  /^@opentelemetry\//,
  /^redis$/,
  /^@redis\//,
  /^keyv$/,
  /^@keyv\//,
  /^cache-manager$/,
  /^cacheable$/,
  /^@cacheable\//,
];

rmSync(out, { recursive: true, force: true });
await build({
  entryPoints: [join(root, 'dist/apps/gateway/src/main.js')],
  outdir: out,
  bundle: true,
  splitting: true,
  format: 'esm',
  platform: 'node',
  target: 'node20',
  chunkNames: '[name]-[hash]',
  sourcemap: true,
  logLevel: 'warning',
  plugins: [
    {
      name: 'external-packages',
      setup(bundler) {
        bundler.onResolve({ filter: /^[^./]/ }, (args) =>
          EXTERNAL.some((pattern) => pattern.test(args.path)) ? { path: args.path, external: true } : undefined,
        );
      },
    },
  ],
  // CommonJS packages in an ES module bundle call `require` for Node's modules and the packages left outside.
  banner: {
    js: "import { createRequire as __createRequire } from 'node:module'; const require = __createRequire(import.meta.url);",
  },
});
// The status page's browser scripts, read next to the module that serves them.
cpSync(join(root, 'dist/apps/gateway/src/status/page'), join(out, 'page'), {
  recursive: true,
  filter: (path) => !path.endsWith('.map') && !path.endsWith('.d.ts'),
});
