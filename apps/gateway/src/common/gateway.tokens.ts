/** DI token of the gateway's `GatewayConfig`. */
export const GATEWAY_CONFIG = Symbol('GATEWAY_CONFIG');

/** DI token of the gateway's pino logger. */
export const GATEWAY_LOGGER = Symbol('GATEWAY_LOGGER');
