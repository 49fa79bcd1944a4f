import { buildIfStale } from '../../scripts/build-if-stale.mjs';

/** Builds once before any suite, when a source is newer than the build: no test builds inside its own time. */
export default function globalSetup() {
  buildIfStale();
}
