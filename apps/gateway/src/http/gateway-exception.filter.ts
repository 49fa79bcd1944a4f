import { Catch, Logger, type ArgumentsHost, type ExceptionFilter } from '@nestjs/common';
import { HttpAdapterHost } from '@nestjs/core';
import { isOrchestratorError } from 'nest-prompt-orchestrator/core';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { ROUTES, routeAt, type ClientApi } from '../providers/provider.js';
import type { GatewayConfig } from '../config/gateway-config.js';
import { clientKey } from '../common/credentials.js';
import { drainBound, drainRequest, errorReply } from './error-reply.js';
import { findContext } from '../observability/request-context.js';

/** The error a Nest route (health, metrics, status page) or a request no route serves is answered with. */
@Catch()
export class GatewayExceptionFilter implements ExceptionFilter {
  private readonly logger = new Logger('Gateway');

  constructor(
    private readonly adapterHost: HttpAdapterHost,
    private readonly config: Pick<GatewayConfig, 'maxBodyBytes'>,
    /** The API of a path no route serves: llama.cpp's in front of a llama.cpp server, else OpenAI's. */
    private readonly defaultApi: ClientApi = 'openai',
  ) {}

  catch(exception: unknown, host: ArgumentsHost): void {
    const http = host.switchToHttp();
    const request = http.getRequest<IncomingMessage & { raw?: IncomingMessage }>();
    const response = http.getResponse<ServerResponse | { raw: ServerResponse }>();
    const raw = 'raw' in response ? response.raw : response;
    if (isOrchestratorError(exception) && exception.code === 'client_closed_request') return;
    if (raw.headersSent) {
      if (!raw.writableEnded) raw.destroy();
      return;
    }
    const context = findContext(request);
    // Express's body parser fails before any middleware ran: the path still says which API the client speaks.
    const route = context ? undefined : routeAt(request.url ?? '');
    const api: ClientApi = context?.api ?? (route ? ROUTES[route].api : this.defaultApi);
    const reply = errorReply(
      exception,
      {
        api,
        requestId: context?.id,
        presented: clientKey(request.headers),
        method: request.method,
        url: request.url,
        context,
      },
      this.logger,
    );
    const adapter = this.adapterHost.httpAdapter;
    const send = () => {
      for (const [name, value] of Object.entries(reply.headers)) adapter.setHeader(response, name, value);
      // Fastify sends a Buffer as it is; Express's adapter would serialise it as JSON, so it is written directly.
      if (adapter.getType() === 'fastify') adapter.reply(response, reply.body, reply.status);
      else {
        raw.statusCode = reply.status;
        raw.end(reply.body);
      }
    };
    const rawRequest = (request as { raw?: IncomingMessage }).raw ?? request;
    // A client still sending a body that is too large would read a reset instead of this 413 (and its SDK would
    // retry): the rest of the body is read and dropped first, up to a bound.
    if (reply.status === 413 && !rawRequest.complete)
      drainRequest(rawRequest, drainBound(this.config.maxBodyBytes)).then(send, send);
    else send();
  }
}
