/** Tokens an answer used, as the provider reported them. */
export interface Usage {
  input: number;
  output: number;
}

// OpenAI (`prompt_tokens` / `completion_tokens`, Responses `input_tokens` / `output_tokens`), Anthropic
// (`input_tokens` / `output_tokens`), llama.cpp's own routes (`tokens_evaluated` / `tokens_predicted`).
const INPUT = /"(?:prompt_tokens|input_tokens|tokens_evaluated)"\s*:\s*(\d+)/;
const OUTPUT = /"(?:completion_tokens|output_tokens|tokens_predicted)"\s*:\s*(\d+)/;
const MARKERS = ['"usage"', '"tokens_predicted"', '"tokens_evaluated"'];

/**
 * The usage a JSON answer reports, read without parsing the whole body: the
 * usage object sits near the end of every format, so only what follows its
 * last marker is searched. `undefined` when the answer reports none.
 */
export function usageOfBytes(bytes: Buffer): Usage | undefined {
  let at = -1;
  for (const marker of MARKERS) at = Math.max(at, bytes.lastIndexOf(marker));
  if (at < 0) return undefined;
  // The fields of llama.cpp's /completion sit side by side; a little before the marker covers the other one.
  return usageOfText(bytes.toString('utf8', Math.max(0, at - 200), Math.min(bytes.length, at + 600)));
}

/** The usage reported in a piece of text (a stream chunk, or a slice of a body). */
export function usageOfText(text: string): Usage | undefined {
  const input = INPUT.exec(text);
  const output = OUTPUT.exec(text);
  if (!input && !output) return undefined;
  return { input: input ? Number(input[1]) : 0, output: output ? Number(output[1]) : 0 };
}

/**
 * Streams report usage in their last events (OpenAI with `stream_options.include_usage`, Anthropic in
 * `message_start` and `message_delta`, llama.cpp in its final chunk): the numbers seen last win, per field.
 */
export function mergeUsage(seen: Usage | undefined, next: Usage): Usage {
  if (!seen) return next;
  return { input: next.input || seen.input, output: next.output || seen.output };
}

/** Whether a stream chunk may carry usage (cheap test before any regular expression runs). */
export function mayCarryUsage(chunk: string): boolean {
  return chunk.includes('_tokens"') || chunk.includes('"tokens_');
}
