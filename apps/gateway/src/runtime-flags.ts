/**
 * The V8 flags the gateway runs with (`npm start` passes them; start
 * `dist/apps/gateway/src/main.js` with them when you run it yourself): a young
 * generation fixed at 16 MiB per semi-space. V8 otherwise starts it small and
 * resizes it as it goes; under the gateway's load (every request a few dozen
 * short-lived objects, every distinct answer kept in the window) its
 * scavenges then took 15-40 ms each (about 270 ms per 8,000 requests), and 5
 * ms each with the size fixed (about 75 ms): about a quarter of the
 * gateway's CPU per request. 8 and 32 MiB both did worse than 16 on the same
 * load (`docs/benchmarks.md`, "The gateway's own cost"). Node does not accept
 * `--min-semi-space-size` in `NODE_OPTIONS`, and V8 reads it only at start, so
 * it is a command-line flag. Workers of `--workers` inherit it.
 */
export const GATEWAY_NODE_FLAGS: readonly string[] = ['--min-semi-space-size=16', '--max-semi-space-size=16'];
