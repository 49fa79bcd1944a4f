import type { IncomingMessage, ServerResponse } from 'node:http';

export type BodyResult = { kind: 'ok'; text: string } | { kind: 'too_large'; bytes: number };

/** Past this much extra data an oversized upload is cut off instead of drained. */
const DRAIN_ALLOWANCE_BYTES = 64 * 1024 * 1024;

/**
 * Reads the whole body, keeping at most `maxBytes`. An oversized body is still drained to its end before the caller
 * answers 413: answering while the client is still uploading makes many clients report a write error (EPIPE/reset)
 * instead of the 413.
 */
export function readBody(req: IncomingMessage, maxBytes: number): Promise<BodyResult> {
  return new Promise<BodyResult>((resolve, reject) => {
    const declared = Number(req.headers['content-length']);
    let tooLarge = Number.isFinite(declared) && declared > maxBytes;
    let size = 0;
    let settled = false;
    const chunks: Buffer[] = [];

    req.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (tooLarge) {
        if (size > maxBytes + DRAIN_ALLOWANCE_BYTES) req.socket.destroy();
        return;
      }
      if (size > maxBytes) {
        tooLarge = true;
        chunks.length = 0;
        return;
      }
      chunks.push(chunk);
    });
    req.on('end', () => {
      settled = true;
      if (tooLarge) resolve({ kind: 'too_large', bytes: size });
      else resolve({ kind: 'ok', text: Buffer.concat(chunks).toString('utf8') });
    });
    req.on('error', (error) => {
      if (settled) return;
      settled = true;
      reject(error);
    });
    req.on('close', () => {
      if (settled) return;
      settled = true;
      reject(new Error('request aborted while reading the body'));
    });
  });
}

export type JsonParse = { ok: true; value: unknown } | { ok: false; message: string };

export function parseJson(text: string): JsonParse {
  if (text.trim() === '') return { ok: false, message: 'Request body is empty; expected a JSON object.' };
  try {
    return { ok: true, value: JSON.parse(text) as unknown };
  } catch (error) {
    const detail = error instanceof Error ? error.message : String(error);
    return { ok: false, message: `Request body is not valid JSON: ${detail}` };
  }
}

/** For answers outside a counted exchange (control API, 404). */
export function writeJson(
  res: ServerResponse,
  status: number,
  payload: unknown,
  headers: Record<string, string> = {},
): void {
  if (res.headersSent || res.destroyed) return;
  const body = JSON.stringify(payload);
  res.writeHead(status, {
    ...headers,
    'content-type': 'application/json; charset=utf-8',
    'content-length': String(Buffer.byteLength(body)),
  });
  res.end(body);
}

/** Lets the request finish arriving without keeping it, so a keep-alive connection stays usable. */
export function discardBody(req: IncomingMessage): void {
  req.resume();
}
