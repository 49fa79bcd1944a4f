import { describe, expect, it } from '@jest/globals';
import type { ExecutionContext } from '@nestjs/common';
import { HttpAdapterHost, Reflector } from '@nestjs/core';
import { firstValueFrom, of } from 'rxjs';
import { Dedup, OrchestratorInterceptor, OrchestratorService } from 'nest-prompt-orchestrator';

class Handlers {
  @Dedup()
  decorated() {
    return 'answer';
  }

  plain() {
    return 'answer';
  }
}

/** A handler called by a transport of a kind the plugin does not know (a third-party context type). */
function contextOf(handler: (...args: unknown[]) => unknown): ExecutionContext {
  return {
    getType: () => 'custom-transport',
    getClass: () => Handlers,
    getHandler: () => handler,
    getArgs: () => [],
  } as unknown as ExecutionContext;
}

describe('a decorated handler in a context the plugin does not serve', () => {
  const interceptor = new OrchestratorInterceptor(new Reflector(), new OrchestratorService(), new HttpAdapterHost());
  const next = { handle: () => of('answer') };

  it('fails its call with an error naming the class, the method and the context', async () => {
    // The handler is only looked up (for its decorators), never called.
    // eslint-disable-next-line @typescript-eslint/unbound-method
    const call = firstValueFrom(interceptor.intercept(contextOf(Handlers.prototype.decorated), next));
    await expect(call).rejects.toThrow(/Handlers\.decorated .*"custom-transport"/);
  });

  it('leaves an undecorated handler alone', async () => {
    // eslint-disable-next-line @typescript-eslint/unbound-method
    expect(await firstValueFrom(interceptor.intercept(contextOf(Handlers.prototype.plain), next))).toBe('answer');
  });
});
