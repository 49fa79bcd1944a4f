/**
 * The V8 flags the gateway runs with (`npm start` passes them; start
 * `dist/gateway/main.js` with them when you run it yourself): a young
 * generation fixed at 16 MiB per semi-space. V8 otherwise starts it small and
 * resizes it as it goes; under the gateway's load (every request a few dozen
 * short-lived objects, every distinct answer kept in the window) its
 * scavenges then took several times longer than with the size fixed, and
 * smaller and larger fixed sizes did worse than 16 MiB (figures:
 * docs/benchmarks/2026-12-03-figures-behind-the-code.md).
 *
 * And an old generation that grows by 300% after a full collection instead of
 * V8's own factor (about 1.6 under load): the answers the window keeps are
 * memory V8 counts as new until a full collection frees those it dropped, so
 * keeping large answers (streams of 465 KB, 800 a second) starts a full
 * collection several times a second, and with V8's factor the old generation
 * was left so little room after each that the next began at once. Streams
 * cost less with it; small requests and hits the same.
 *
 * And no pretenuring by allocation site: once most objects made at one object
 * or array literal outlive a scavenge (requests held a little longer on a busy
 * machine), V8 makes every later one there in old space, where it keeps what it
 * points to through every scavenge until a full collection. On a busy
 * machine the gateway then promoted whole requests, and V8 keeps such a
 * decision (`test/faults/young-requests.slow-spec.ts`). Without it, what the
 * window keeps is copied once more before it is promoted, at the same CPU per
 * small request on an idle machine.
 *
 * Node does not accept `--min-semi-space-size` in `NODE_OPTIONS`, and V8 reads
 * it only at start, so these are command-line flags. Workers of `--workers`
 * inherit them.
 */
export const GATEWAY_NODE_FLAGS: readonly string[] = [
  '--min-semi-space-size=16',
  '--max-semi-space-size=16',
  '--heap-growing-percent=300',
  '--no-allocation-site-pretenuring',
];
