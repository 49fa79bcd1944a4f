/**
 * The upstreams file is read and checked by the configuration (config/upstreams-file.ts); these are the parts of it
 * the upstreams work with while the gateway runs.
 */
export {
  PRIMARY_POOL,
  UpstreamKey,
  type FallbackStep,
  type UpstreamEntry,
  type UpstreamsFile,
} from '../config/upstreams-file.js';
