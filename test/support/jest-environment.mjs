import { TestEnvironment } from 'jest-environment-node';
import { CHILDREN_DIR_VARIABLE, ChildRegistry, REGISTRY_GLOBAL } from './child-registry.mjs';

/**
 * Node's environment, plus a registry of the processes the suite starts (test/support/children.ts): at the end of
 * the suite, whether its tests passed, failed or timed out, every one still running is killed.
 */
export default class OwnChildrenEnvironment extends TestEnvironment {
  constructor(config, context) {
    super(config, context);
    this.children = new ChildRegistry(process.env[CHILDREN_DIR_VARIABLE]);
    this.global[REGISTRY_GLOBAL] = this.children;
  }

  async teardown() {
    this.children.close();
    await super.teardown();
  }
}
