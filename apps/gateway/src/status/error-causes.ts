/** What one failed request tells about its cause. */
export interface FailedRequest {
  at: number;
  route: string;
  status: number;
  code?: string;
  requestId: string;
  /** The upstream's own failure (its status relayed), rather than the gateway's refusal. */
  fromUpstream: boolean;
}

export interface ErrorCause {
  /** The error code, else `http_<status>`. */
  cause: string;
  status: number;
  route: string;
  count: number;
  firstAt: number;
  lastAt: number;
  lastRequestId: string;
  fromUpstream: boolean;
}

const MAX_CAUSES = 20;

/**
 * The last distinct error causes, each with its count and when it was last
 * seen. During an outage a flood of `circuit_open` refusals is one line that
 * counts up, and the provider's own 503 (the cause) stays on the page beside
 * it instead of scrolling away. At most 20 causes; the least recent goes.
 */
export class ErrorCauses {
  private readonly causes = new Map<string, ErrorCause>();

  record(failure: FailedRequest): void {
    const cause = failure.code ?? `http_${failure.status}`;
    const id = `${cause}\n${failure.status}\n${failure.route}`;
    const seen = this.causes.get(id);
    if (seen) {
      seen.count++;
      seen.lastAt = failure.at;
      seen.lastRequestId = failure.requestId;
      // Most recent last: the map's order is the eviction order.
      this.causes.delete(id);
      this.causes.set(id, seen);
      return;
    }
    this.causes.set(id, {
      cause,
      status: failure.status,
      route: failure.route,
      count: 1,
      firstAt: failure.at,
      lastAt: failure.at,
      lastRequestId: failure.requestId,
      fromUpstream: failure.fromUpstream,
    });
    if (this.causes.size > MAX_CAUSES) this.causes.delete(this.causes.keys().next().value!);
  }

  /** Most recently seen first. */
  list(): ErrorCause[] {
    return [...this.causes.values()].reverse().map((c) => ({ ...c }));
  }
}
