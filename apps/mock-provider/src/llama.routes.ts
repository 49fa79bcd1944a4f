import { nowMs } from './call-recorder.js';
import {
  CHATML_TEMPLATE,
  countWords,
  detokenize,
  echoReply,
  isRecord,
  isTokenId,
  promptToText,
  renderChatML,
  tokenize,
} from './content.js';
import type { Exchange } from './exchange.js';
import { sse, type RouteDefinition } from './route-definition.js';

const N_CTX = 4096;
const TOTAL_SLOTS = 4;

const DEFAULT_PARAMS = {
  n_predict: -1,
  seed: -1,
  temperature: 0.8,
  dynatemp_range: 0,
  dynatemp_exponent: 1,
  top_k: 40,
  top_p: 0.95,
  min_p: 0.05,
  typical_p: 1,
  repeat_last_n: 64,
  repeat_penalty: 1,
  presence_penalty: 0,
  frequency_penalty: 0,
  stop: [] as string[],
  n_keep: 0,
  n_probs: 0,
  stream: false,
  cache_prompt: true,
  samplers: ['penalties', 'dry', 'top_k', 'typ_p', 'top_p', 'min_p', 'xtc', 'temperature'],
};

function round3(value: number): number {
  return Math.round(value * 1000) / 1000;
}

function timings(promptN: number, promptMs: number, predictedN: number, predictedMs: number): object {
  return {
    cache_n: 0,
    prompt_n: promptN,
    prompt_ms: round3(promptMs),
    prompt_per_token_ms: promptN > 0 ? round3(promptMs / promptN) : 0,
    prompt_per_second: promptMs > 0 ? round3((promptN * 1000) / promptMs) : 0,
    predicted_n: predictedN,
    predicted_ms: round3(predictedMs),
    predicted_per_token_ms: predictedN > 0 ? round3(predictedMs / predictedN) : 0,
    predicted_per_second: predictedMs > 0 ? round3((predictedN * 1000) / predictedMs) : 0,
  };
}

function validateCompletion(body: Record<string, unknown>): string | undefined {
  if (body.prompt === undefined || body.prompt === null) return '"prompt" must be provided';
  return undefined;
}

/** Native /completion: no [DONE] and no `event:` lines; the stream simply ends after the stop:true chunk. */
async function completion(exchange: Exchange, body: Record<string, unknown>): Promise<void> {
  const prompt = promptToText(body.prompt);
  const reply = echoReply(prompt, body.n_predict);
  const model = exchange.config.model;
  const requestedSlot = body.id_slot;
  const validSlot = typeof requestedSlot === 'number' && Number.isInteger(requestedSlot) && requestedSlot >= 0;
  const idSlot = validSlot && requestedSlot < TOTAL_SLOTS ? requestedSlot : (exchange.seq - 1) % TOTAL_SLOTS;
  const tokensEvaluated = countWords(prompt);
  const nPredict = typeof body.n_predict === 'number' ? body.n_predict : -1;

  const final = (content: string, tokens: number[] | undefined): object => {
    const now = nowMs();
    const firstByteAt = exchange.firstByteAt ?? now;
    return {
      index: 0,
      content,
      ...(tokens === undefined ? {} : { tokens }),
      id_slot: idSlot,
      stop: true,
      model,
      tokens_predicted: reply.pieces.length,
      tokens_evaluated: tokensEvaluated,
      tokens_cached: 0,
      prompt,
      has_new_line: reply.text.includes('\n'),
      truncated: false,
      stop_type: reply.truncated ? 'limit' : 'eos',
      stopping_word: '',
      generation_settings: {
        n_ctx: N_CTX,
        model,
        ...DEFAULT_PARAMS,
        n_predict: nPredict,
        stream: exchange.call.stream,
      },
      timings: timings(tokensEvaluated, firstByteAt - exchange.call.receivedAt, reply.pieces.length, now - firstByteAt),
    };
  };

  if (!exchange.call.stream) {
    exchange.sendJson(200, final(reply.text, body.return_tokens === true ? tokenize(reply.text) : undefined));
    return;
  }

  function* events(): Generator<string> {
    let predicted = 0;
    for (const piece of reply.pieces) {
      predicted++;
      yield sse({
        index: 0,
        content: piece,
        tokens: [],
        stop: false,
        id_slot: idSlot,
        tokens_predicted: predicted,
        tokens_evaluated: tokensEvaluated,
      });
    }
    // The final chunk repeats none of the text: clients rebuild it from the partial chunks.
    yield sse(final('', []));
  }
  await exchange.sendStream(events());
}

function validateTokenize(body: Record<string, unknown>): string | undefined {
  if (typeof body.content !== 'string') return '"content" must be a string';
  return undefined;
}

function tokenizeRoute(exchange: Exchange, body: Record<string, unknown>): void {
  const content = body.content as string;
  const ids = tokenize(content);
  if (body.with_pieces === true) {
    exchange.sendJson(200, { tokens: ids.map((id) => ({ id, piece: String.fromCodePoint(id) })) });
  } else {
    exchange.sendJson(200, { tokens: ids });
  }
}

function validateDetokenize(body: Record<string, unknown>): string | undefined {
  if (!Array.isArray(body.tokens) || !body.tokens.every(isTokenId)) {
    return '"tokens" must be an array of token ids (integers 0..1114111)';
  }
  return undefined;
}

function detokenizeRoute(exchange: Exchange, body: Record<string, unknown>): void {
  exchange.sendJson(200, { content: detokenize(body.tokens as number[]) });
}

function validateApplyTemplate(body: Record<string, unknown>): string | undefined {
  if (!Array.isArray(body.messages) || body.messages.length === 0) return '"messages" must be a non-empty array';
  if (!body.messages.every(isRecord)) return 'every entry of "messages" must be an object';
  return undefined;
}

function applyTemplate(exchange: Exchange, body: Record<string, unknown>): void {
  exchange.sendJson(200, { prompt: renderChatML(body.messages as unknown[]) });
}

function props(exchange: Exchange): void {
  exchange.sendJson(200, {
    default_generation_settings: {
      id: 0,
      id_task: -1,
      n_ctx: N_CTX,
      speculative: false,
      is_processing: false,
      params: DEFAULT_PARAMS,
    },
    total_slots: TOTAL_SLOTS,
    model_path: `${exchange.config.model}.gguf`,
    chat_template: CHATML_TEMPLATE,
    chat_template_caps: {},
    modalities: { vision: false, audio: false },
    build_info: 'mock',
    is_sleeping: false,
  });
}

export const LLAMA_ROUTES: readonly RouteDefinition[] = [
  {
    method: 'POST',
    paths: ['/completion', '/completions'],
    family: 'llama',
    streams: true,
    validate: validateCompletion,
    handle: completion,
  },
  {
    method: 'POST',
    paths: ['/tokenize'],
    family: 'llama',
    streams: false,
    validate: validateTokenize,
    handle: tokenizeRoute,
  },
  {
    method: 'POST',
    paths: ['/detokenize'],
    family: 'llama',
    streams: false,
    validate: validateDetokenize,
    handle: detokenizeRoute,
  },
  {
    method: 'POST',
    paths: ['/apply-template'],
    family: 'llama',
    streams: false,
    validate: validateApplyTemplate,
    handle: applyTemplate,
  },
  { method: 'GET', paths: ['/props'], family: 'llama', streams: false, handle: props },
];
