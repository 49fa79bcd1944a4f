import { describe, expect, it } from '@jest/globals';
import { OrchestratorConfigError } from '../options.js';
import { RouteNames } from './route.js';

describe('RouteNames', () => {
  it('names a route after its handler, numbering handlers that are only called the same', () => {
    const names = new RouteNames();
    const first = () => undefined;
    const second = () => undefined;
    expect(names.implicitName('handler', first)).toBe('handler');
    expect(names.implicitName('handler', second)).toBe('handler#2');
    expect(names.implicitName('handler', first)).toBe('handler');
    expect(names.implicitName('other', second)).toBe('other');
  });

  it('lets implicitly named routes have settings of their own, but not two routes giving one name', () => {
    const names = new RouteNames();
    const a = names.implicitName('Items.list', {});
    const b = names.implicitName('Items.list', {});
    names.check(a, { breaker: { failureThreshold: 2 } });
    expect(() => names.check(b, { breaker: { failureThreshold: 5 } })).not.toThrow();
    names.check('x', { breaker: { name: 'payments', failureThreshold: 2 } });
    expect(() => names.check('y', { breaker: { name: 'payments', failureThreshold: 5 } })).toThrow(
      OrchestratorConfigError,
    );
  });
});
