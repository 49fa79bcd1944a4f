// Moved to common/ (the upstream exchange keeps content types with it too).
export { Interned } from '../common/interned.js';
