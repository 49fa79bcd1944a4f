import type { INestApplication, ModuleMetadata } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import { ExpressAdapter } from '@nestjs/platform-express';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import type { AddressInfo } from 'node:net';

export type PlatformName = 'express' | 'fastify';
export const PLATFORMS: PlatformName[] = ['express', 'fastify'];

export interface RunningApp {
  app: INestApplication;
  url: string;
  close(): Promise<void>;
}

/** Starts a Nest app on the given platform, listening on an ephemeral loopback port. */
export async function startApp(platform: PlatformName, metadata: ModuleMetadata): Promise<RunningApp> {
  const moduleRef = await Test.createTestingModule(metadata).compile();
  const app =
    platform === 'express'
      ? moduleRef.createNestApplication(new ExpressAdapter(), { logger: false })
      : moduleRef.createNestApplication(new FastifyAdapter(), { logger: false });
  await app.listen(0, '127.0.0.1');
  if (platform === 'fastify') await (app.getHttpAdapter().getInstance() as { ready(): Promise<unknown> }).ready();
  const address = app.getHttpServer().address() as AddressInfo;
  return { app, url: `http://127.0.0.1:${address.port}`, close: () => app.close() };
}

/** A promise with its resolve/reject exposed: holds a fake upstream call until the test lets it go. */
export class Gate<T = void> {
  readonly promise: Promise<T>;
  resolve!: (value: T) => void;
  reject!: (error: unknown) => void;
  constructor() {
    this.promise = new Promise<T>((resolve, reject) => {
      this.resolve = resolve;
      this.reject = reject;
    });
  }
}

/** Polls `condition` (no fixed sleeps) until it holds, failing after `timeoutMs`. */
export async function waitFor(condition: () => boolean, timeoutMs = 60_000, what = 'condition'): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

export interface RawResponse {
  status: number;
  headers: Headers;
  text: string;
  // Tests read into the body freely; a failed read fails the test anyway.

  json: any;
}

/** A request with plain fetch, its body read as text and (when it is JSON) parsed. */
export async function send(
  url: string,
  init: { method?: string; headers?: Record<string, string>; body?: string; signal?: AbortSignal } = {},
): Promise<RawResponse> {
  const response = await fetch(url, {
    method: init.method ?? 'GET',
    headers: init.headers,
    body: init.body,
    signal: init.signal,
  });
  const text = await response.text();
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  return { status: response.status, headers: response.headers, text, json };
}

/** POST a JSON body (already a string, or serialised here). */
export function postJson(
  url: string,
  body: unknown,
  headers: Record<string, string> = {},
  signal?: AbortSignal,
): Promise<RawResponse> {
  return send(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
    signal,
  });
}
