import { describe, expect, it } from '@jest/globals';
import { bearerToken, clientKey, identityOf } from './credentials.js';

describe('caller identity', () => {
  const spellings = ['Bearer sk-1', 'bearer sk-1', 'BEARER sk-1', 'Bearer  sk-1', 'Bearer\tsk-1', ' Bearer sk-1  '];

  it.each(['openai', 'anthropic'] as const)(
    '%s: every spelling of one Bearer key is one caller, whatever x-api-key says',
    (provider) => {
      const identities = new Set(
        spellings.flatMap((authorization) => [
          identityOf({ authorization }, provider, false),
          identityOf({ authorization, 'x-api-key': `junk-${Math.random()}` }, provider, false),
        ]),
      );
      expect([...identities]).toEqual(['credential=sk-1']);
    },
  );

  it('openai and anthropic read x-api-key when there is no Bearer token: that key is the caller', () => {
    for (const provider of ['openai', 'anthropic'] as const) {
      expect(identityOf({ 'x-api-key': 'sk-2' }, provider, false)).toBe('credential=sk-2');
      // A Basic authorization is not what the gateway passes on: the x-api-key is.
      expect(identityOf({ authorization: 'Basic aW5ncmVzcw==', 'x-api-key': 'sk-2' }, provider, false)).toBe(
        'credential=sk-2',
      );
    }
  });

  it('llama.cpp reads Authorization first (with or without a scheme), x-api-key only without it', () => {
    expect(identityOf({ authorization: 'sk-3', 'x-api-key': 'junk' }, 'llama', false)).toBe('credential=sk-3');
    expect(identityOf({ authorization: 'Bearer sk-3', 'x-api-key': `junk-${Math.random()}` }, 'llama', false)).toBe(
      'credential=sk-3',
    );
    expect(identityOf({ 'x-api-key': 'sk-3' }, 'llama', false)).toBe('credential=sk-3');
  });

  it('llama.cpp judges the key exactly as sent (only "Bearer " with one space is a scheme): other spellings are other callers', () => {
    // llama-server refuses `bearer sk-3` under --api-key sk-3: it must never get the answer `Bearer sk-3` got.
    expect(identityOf({ authorization: 'bearer sk-3' }, 'llama', false)).toBe('credential=bearer sk-3');
    expect(identityOf({ authorization: 'Bearer  sk-3' }, 'llama', false)).toBe('credential= sk-3');
  });

  it('with gateway keys, the key the caller was let in with is the caller, on every provider', () => {
    for (const provider of ['openai', 'anthropic', 'llama'] as const) {
      expect(identityOf({ authorization: 'bearer gk-1', 'x-api-key': 'junk' }, provider, true)).toBe('credential=gk-1');
    }
  });

  it('no credential, no identity', () => {
    expect(identityOf({}, 'openai', false)).toBeUndefined();
    expect(identityOf({ authorization: 'Bearer ' }, 'openai', false)).toBeUndefined();
  });

  it('the key passed upstream is the same token as the identity', () => {
    expect(clientKey({ authorization: 'BEARER \t sk-4 ' })).toBe('sk-4');
    expect(bearerToken('Basic abc')).toBeUndefined();
    expect(bearerToken('Bearerx sk')).toBeUndefined();
  });
});
