import { Body, Controller, Get, HttpException, Module, Post, Query, Res } from '@nestjs/common';
import { CallTimeout, CircuitBreaker, Dedup, OrchestratorModule, Retry } from 'nest-prompt-orchestrator';

/** What the handlers were called with, and a gate that holds calls until the test opens it. */
export class Calls {
  static counts: Record<string, number> = {};
  static release: () => void = () => undefined;
  static gate: Promise<void> = Promise.resolve();
  static reset(): void {
    Calls.counts = {};
    Calls.gate = new Promise<void>((resolve) => (Calls.release = resolve));
  }
  static count(name: string): number {
    return (Calls.counts[name] = (Calls.counts[name] ?? 0) + 1);
  }
}

/** Express's response and Fastify's reply both have `header()`. */
interface Reply {
  header(name: string, value: string): unknown;
}

@Controller('c')
export class ConventionsController {
  @Get('retried')
  @Retry({ retries: 1, baseDelayMs: 1 })
  retried() {
    Calls.count('retried');
    throw new HttpException('upstream down', 503);
  }

  @Get('a')
  @CircuitBreaker({ failureThreshold: 2 })
  a(@Query('fail') fail?: string) {
    Calls.count('a');
    if (fail) throw new HttpException('a down', 503);
    return { route: 'a' };
  }

  @Get('b')
  @CircuitBreaker()
  b() {
    Calls.count('b');
    return { route: 'b' };
  }

  /** "Create order": identical concurrent POSTs share one call, a later one is a new order. */
  @Post('orders')
  @Dedup()
  async order(@Body() body: { item: string }) {
    const orderId = Calls.count('orders');
    await Calls.gate;
    return { orderId, item: body.item };
  }

  @Get('stamped')
  @Dedup()
  async stamped(@Res({ passthrough: true }) res: Reply) {
    const call = Calls.count('stamped');
    res.header('x-computed-at', `call-${call}`);
    await Calls.gate;
    return { call };
  }

  @Get('slow')
  @CallTimeout(50)
  async slow() {
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    return {};
  }
}

/** A feature module that imports the orchestrator too, as apps often do. */
@Module({ imports: [OrchestratorModule.forRoot()], controllers: [ConventionsController] })
export class FeatureModule {}

/** Root module importing the orchestrator, and the feature module that imports it again. */
@Module({ imports: [OrchestratorModule.forRoot(), FeatureModule] })
export class TwiceModule {}
