/** DI token of the gateway's `GatewayConfig`. */
export const GATEWAY_CONFIG = Symbol('GATEWAY_CONFIG');
