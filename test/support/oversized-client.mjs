// A client in its own process (as real clients are: in one process with the server, the race that turns an
// early 413 into a reset does not happen) posting bodies over the gateway's limit, with plain fetch or the
// official openai SDK (defaults untouched). Prints one JSON line: statuses and errors seen, and the SDK's attempts.
import OpenAI from 'openai';

const [url, megabytes, count, client] = process.argv.slice(2);
const content = 'y'.repeat(Number(megabytes) * 1024 * 1024);
const outcome = { statuses: {}, errors: {}, attempts: 0 };
const note = (table, key) => (table[key] = (table[key] ?? 0) + 1);
const countingFetch = (input, init) => {
  outcome.attempts++;
  return fetch(input, init);
};
for (let i = 0; i < Number(count); i++) {
  const body = { model: 'mock-model', messages: [{ role: 'user', content: `${i} ${content}` }] };
  try {
    if (client === 'sdk') {
      const openai = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'sk-oversized', fetch: countingFetch });
      await openai.chat.completions.create(body);
      note(outcome.statuses, 200);
    } else {
      outcome.attempts++;
      const response = await fetch(`${url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
      await response.text();
      note(outcome.statuses, response.status);
    }
  } catch (error) {
    if (typeof error?.status === 'number') note(outcome.statuses, error.status);
    else note(outcome.errors, error?.cause?.code ?? error?.constructor?.name ?? 'error');
  }
}
console.log(JSON.stringify(outcome));
