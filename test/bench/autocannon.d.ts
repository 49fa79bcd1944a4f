/** The part of autocannon 8's programmatic API the overhead benchmark uses (the package ships no types). */
declare module 'autocannon' {
  import type { EventEmitter } from 'node:events';

  namespace autocannon {
    interface RequestSpec {
      method?: string;
      path?: string;
      headers?: Record<string, string>;
      body?: string;
      /** Called before each request is sent; returns the request to send. */
      setupRequest?: (request: RequestSpec, context: Record<string, unknown>) => RequestSpec;
    }

    interface Options {
      url: string;
      connections?: number;
      /** Seconds. */
      duration?: number;
      amount?: number;
      pipelining?: number;
      /** Seconds before a request counts as timed out. */
      timeout?: number;
      method?: string;
      headers?: Record<string, string>;
      body?: string;
      requests?: RequestSpec[];
    }

    interface Stats {
      average: number;
      mean: number;
      stddev: number;
      min: number;
      max: number;
      total: number;
      p50: number;
      p90: number;
      p99: number;
    }

    interface Result {
      duration: number;
      errors: number;
      timeouts: number;
      non2xx: number;
      '2xx': number;
      latency: Stats;
      requests: Stats & { sent: number };
      throughput: Stats;
    }

    type Instance = EventEmitter & PromiseLike<Result>;
  }

  function autocannon(options: autocannon.Options): autocannon.Instance;
  export = autocannon;
}
