// The provider kinds and client APIs, named here so that the layers below the providers and the config can say them.

/** The kind of provider the gateway fronts. */
export type ProviderKind = 'openai' | 'llama' | 'anthropic';

/** The API a client speaks on a route. */
export type ClientApi = 'openai' | 'anthropic' | 'llama';
