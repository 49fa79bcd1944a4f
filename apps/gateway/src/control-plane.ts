import type { INestApplication } from '@nestjs/common';
import type { IncomingMessage, RequestListener, ServerResponse } from 'node:http';
import type { GatewayCore } from './gateway-core.js';
import { ApiError } from './common/api-error.js';
import { answerAndClose, unroutedApi } from './http/error-reply.js';
import { nestLoggerOf } from './observability/logger.js';

/**
 * The control routes (health, metrics, the status page, unknown paths' 404s) of a gateway that listens with its core
 * alone: Nest, its platform and the routes' app are loaded when the first request the data plane leaves arrives (or
 * at `ready()`), not before. A start and its first proxied answer then wait on none of it.
 */
export class LazyControlPlane {
  private made?: Promise<{ app: INestApplication; handle: RequestListener }>;

  constructor(private readonly core: GatewayCore) {}

  /** Makes the app now (or waits for the one being made). */
  ready(): Promise<{ app: INestApplication; handle: RequestListener }> {
    this.made ??= import('./gateway.factory.js')
      .then(({ createControlPlane }) => createControlPlane(this.core, nestLoggerOf(this.core.log)))
      .catch((error: unknown) => {
        // The next request tries again.
        this.made = undefined;
        throw error;
      });
    return this.made;
  }

  /** The request listener for what the data plane leaves: queued (its body unread) until the app is made. */
  readonly handle = (request: IncomingMessage, response: ServerResponse): void => {
    this.ready().then(
      ({ handle }) => handle(request, response),
      (error: unknown) => {
        this.core.log.error(
          { context: 'Gateway' },
          `the control routes failed to start: ${(error as Error)?.message ?? String(error)}`,
        );
        if (response.headersSent) return void response.destroy();
        const unavailable = new ApiError(
          503,
          "The gateway's control routes failed to start; try again.",
          'control_routes_unavailable',
          null,
          'server_error',
        );
        unavailable.retryAfter = '1';
        answerAndClose(response, unavailable, unroutedApi(this.core.config));
      },
    );
  };

  /** Closes the app if it was made (the core is closed by whoever made it). */
  async close(): Promise<void> {
    const made = await this.made?.catch(() => undefined);
    await made?.app.close();
  }
}
