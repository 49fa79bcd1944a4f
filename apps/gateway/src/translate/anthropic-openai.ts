/**
 * Translation between the Anthropic Messages API and OpenAI chat completions:
 * an Anthropic client in front of an OpenAI-compatible provider, and an OpenAI
 * client in front of Anthropic. Text, images, tools (definitions, tool choice,
 * tool calls and their results, streamed argument deltas), stop reasons and
 * token counts are mapped. A field or block that has no counterpart is a 400
 * naming it, never dropped, with two documented exceptions that change no
 * answer: `cache_control` (a caching hint; OpenAI-compatible providers cache
 * prompts on their own) and the thinking blocks of earlier assistant turns
 * (Anthropic itself leaves them out of the context).
 */

export { toAnthropicStop, toOpenAIStop } from './anthropic-openai-common.js';
export { anthropicRequestToOpenAI, openAIRequestToAnthropic } from './anthropic-openai-request.js';
export { anthropicResponseToOpenAI, openAIResponseToAnthropic } from './anthropic-openai-response.js';
export { anthropicStreamToOpenAI, openAIStreamToAnthropic } from './anthropic-openai-stream.js';
