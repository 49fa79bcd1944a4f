import { relative } from 'node:path';
import { TestEnvironment } from 'jest-environment-node';
import { CHILDREN_DIR_VARIABLE, ChildRegistry, REGISTRY_GLOBAL } from './child-registry.mjs';

/**
 * Node's environment, plus a registry of the processes the suite starts (test/support/children.ts): at the end of
 * the suite, whether its tests passed, failed or timed out, every one still running is killed.
 */
export default class OwnChildrenEnvironment extends TestEnvironment {
  constructor(config, context) {
    super(config, context);
    this.testPath = relative(process.cwd(), context.testPath);
    this.children = new ChildRegistry(process.env[CHILDREN_DIR_VARIABLE], context.testPath);
    this.global[REGISTRY_GLOBAL] = this.children;
  }

  async teardown() {
    // Reported, so that a suite that leaves a process behind (for the next suites to run beside) is found and fixed.
    const { running, unawaited } = await this.children.close();
    for (const { pid, command } of running)
      process.stderr.write(`${this.testPath}: killed pid ${pid}, left running by the suite: ${command}\n`);
    for (const { pid, command } of unawaited)
      process.stderr.write(`${this.testPath}: pid ${pid} was signalled but not waited for by the suite: ${command}\n`);
    await super.teardown();
  }
}
