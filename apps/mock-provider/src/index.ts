export { DEFAULT_CALL_LOG_LIMIT, DEFAULT_MAX_BODY_BYTES, startMockProvider } from './mock-provider.js';
export { DEFAULT_MODE_OPTIONS, DEFAULT_TUNING } from './mock-config.js';
export { CHATML_TEMPLATE, detokenize, embeddingFor, hashCredential, renderChatML, tokenize } from './content.js';
export { isMockMode, MOCK_MODES } from './mock-provider.types.js';
export type {
  MockCall,
  MockConfig,
  MockMode,
  MockModeOptions,
  MockOutcome,
  MockProvider,
  MockProviderOptions,
  MockStats,
  MockTuning,
  ResolvedModeOptions,
} from './mock-provider.types.js';
