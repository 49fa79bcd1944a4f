/**
 * The live status page and its login form: one self-contained HTML document
 * each (inline CSS and JS, no external asset: many production networks have
 * no internet). The page reads `<path>/events` (SSE) and redraws on every
 * snapshot; every value is written with textContent, never as HTML.
 */
import { readFileSync } from 'node:fs';

const STYLE = `
:root{--bg:#0f1419;--card:#1a2028;--fg:#e6e6e6;--dim:#9da7b3;--ok:#3fb950;--warn:#d29922;--bad:#ff6a61;--miss:#58a6ff;--joined:#3fb950;--cached:#a371f7;--none:#8b949e}
*{box-sizing:border-box}body{margin:0;font:14px/1.4 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;background:var(--bg);color:var(--fg)}
header{display:flex;flex-wrap:wrap;gap:4px 16px;align-items:baseline;padding:12px 20px;border-bottom:1px solid #30363d}h1{font-size:18px;margin:0}
.dim{color:var(--dim)}main{display:grid;grid-template-columns:repeat(auto-fit,minmax(min(340px,100%),1fr));gap:16px;padding:16px 20px}
section{background:var(--card);border-radius:8px;padding:12px 16px;min-width:0}h2{font-size:14px;margin:0 0 8px;color:var(--dim);text-transform:uppercase;letter-spacing:.05em}
.badge{display:inline-block;padding:2px 10px;border-radius:12px;font-weight:600}.closed{background:#23863633;color:var(--ok)}.open{background:#f8514933;color:var(--bad)}
.half_open{background:#d2992233;color:var(--warn)}.unknown{background:#8b949e33;color:var(--dim)}
.big{font-size:22px;font-weight:600}.grid{display:grid;grid-template-columns:repeat(auto-fit,minmax(96px,1fr));gap:8px}.grid div{min-width:0;overflow-wrap:anywhere}.grid div span{display:block;color:var(--dim);font-size:12px}
.scroll{overflow-x:auto;max-width:100%}.scroll:focus-visible{outline:2px solid var(--miss);outline-offset:2px}
table{width:100%;border-collapse:collapse}td,th{text-align:left;padding:3px 6px;border-bottom:1px solid #30363d;font-variant-numeric:tabular-nums;white-space:nowrap}th{color:var(--dim);font-weight:500;white-space:normal;vertical-align:bottom}td.wrap{white-space:normal;overflow-wrap:anywhere;min-width:9em}
ul{margin:0;padding-left:18px}.legend span{margin-right:12px}.legend i{display:inline-block;width:10px;height:10px;margin-right:4px;border-radius:2px}
svg{width:100%;height:90px;display:block}section.wide{grid-column:span 2}section.full{grid-column:1/-1}@media (max-width:760px){section.wide{grid-column:auto}}#draining:empty,#workers:empty,#fleet-calls:empty{display:none}
.store{margin:0 0 8px;padding:6px 10px;border-radius:6px;background:#8b949e22}.store.ok{background:#23863622}.store.unreachable{background:#f8514933;color:var(--fg);font-weight:600}
#stale{position:sticky;top:0;z-index:1;margin:0;padding:10px 20px;background:#ff6a61;color:#0f1419;font-weight:700;font-size:16px}#stale[hidden]{display:none}
body.stale main{filter:grayscale(1);opacity:.55}body.stale main .big,body.stale main td,body.stale main b{text-decoration:line-through}`;

/**
 * The pages' browser scripts, compiled from ./page/*.ts by `npm run build` (their own tsconfig: DOM types, no Node
 * types) and read once from the build: next to this module in dist/, or in dist/ when this module runs from source.
 */
const scripts = new Map<string, string>();
function pageScript(name: 'status-page' | 'login-page'): string {
  let script = scripts.get(name);
  if (script === undefined) {
    const places = [`./page/${name}.js`, `../../../../dist/apps/gateway/src/status/page/${name}.js`];
    for (const place of places) {
      try {
        script = readFileSync(new URL(place, import.meta.url), 'utf8');
        break;
      } catch {
        // Not built there: the next place.
      }
    }
    if (script === undefined) throw new Error(`The status page's script ${name}.js is not built: run npm run build.`);
    scripts.set(name, script);
  }
  return script;
}

/** A table in a region that scrolls sideways when the page is narrower than it (focusable, so a keyboard can scroll it). */
function table(label: string, headings: string[], body: string): string {
  return `<div class="scroll" tabindex="0" role="region" aria-label="${label} table"><table><thead><tr>${headings.map((h) => `<th scope="col">${h}</th>`).join('')}</tr></thead><tbody id="${body}"></tbody></table></div>`;
}

export function statusPageHtml(): string {
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">
<title>Gateway status</title><style>${STYLE}</style></head>
<body><p id="stale" role="alert" hidden>Connection lost: figures as of <span id="stale-at">-</span>, not live.</p>
<header><h1>Gateway status</h1><span class="dim">provider <b id="provider">-</b></span><span class="dim">up <b id="uptime">-</b></span>
<span class="dim" id="workers"></span><span class="dim" id="conn">connecting…</span><span class="badge open" id="draining"></span></header>
<main>
<section class="full" aria-labelledby="h-fleet"><h2 id="h-fleet">Fleet</h2><p class="dim" id="fleet-size">-</p><p class="store" id="store">-</p><p class="dim" id="fleet-calls"></p>
${table('Fleet', ['process', 'state', 'breaker', 'calls here (callers)', 'upstream calls / concurrency limit', 'queued', 'req/s', 'saved', 'heard'], 'fleet')}</section>
<section aria-labelledby="h-upstreams"><h2 id="h-upstreams">Upstreams</h2><div id="upstreams"></div></section>
<section class="wide" aria-labelledby="h-flights"><h2 id="h-flights">Calls in flight</h2><p class="dim"><b id="callers-waiting">0</b> callers waiting on the busiest calls (each call made once)</p>
${table('Calls in flight', ['call (hashed)', 'route', 'callers', 'running for', 'on'], 'flights')}</section>
<section aria-labelledby="h-rate"><h2 id="h-rate">Requests per second</h2>
<div class="grid"><div><span>miss</span><b class="big" id="rate-miss">0</b></div><div><span>joined</span><b class="big" id="rate-joined">0</b></div><div><span>cached</span><b class="big" id="rate-cached">0</b></div></div>
<svg id="chart" viewBox="0 0 600 90" preserveAspectRatio="none" aria-hidden="true"></svg>
<div class="legend dim"><span><i style="background:var(--miss)"></i>miss</span><span><i style="background:var(--joined)"></i>joined</span><span><i style="background:var(--cached)"></i>cached</span><span><i style="background:var(--none)"></i>not deduplicated <b id="rate-none">0</b>/s</span></div>
<div class="scroll" tabindex="0" role="region" aria-label="Requests since start table"><table><thead><tr><th scope="col">since start</th><th scope="col">miss</th><th scope="col">joined</th><th scope="col">cached</th><th scope="col">not dedup.</th></tr></thead>
<tbody><tr><td></td><td id="total-miss">0</td><td id="total-joined">0</td><td id="total-cached">0</td><td id="total-none">0</td></tr></tbody></table></div></section>
<section aria-labelledby="h-saved"><h2 id="h-saved">Saved</h2><div class="grid">
<div><span>upstream calls made</span><b class="big" id="upstream-calls">0</b></div><div><span>calls saved</span><b class="big" id="calls-saved">0</b></div><div><span>tokens saved</span><b class="big" id="tokens-saved">0</b></div>
<div><span>money saved (list price)</span><b id="money-saved">-</b></div><div><span>money spent (list price)</span><b id="money-spent">-</b></div><div><span>upstream calls failed</span><b id="upstream-failed">0</b></div></div>
<p class="dim">Answer window: <span id="window">-</span></p></section>
<section aria-labelledby="h-refusals"><h2 id="h-refusals">Refusals</h2>${table('Refusals', ['reason', 'calls'], 'refusals')}</section>
<section aria-labelledby="h-tenants"><h2 id="h-tenants">Top tenants (hashed)</h2>${table('Top tenants', ['tenant', 'requests'], 'tenants')}</section>
<section class="wide" aria-labelledby="h-causes"><h2 id="h-causes">Error causes</h2>${table('Error causes', ['cause', 'status', 'route', 'times', 'last', 'first', 'last request'], 'causes')}</section>
<section aria-labelledby="h-hour"><h2 id="h-hour">Last hour (model API requests)</h2><div class="grid"><div><span>requests</span><b class="big" id="hour-requests">0</b></div><div><span>errors</span><b class="big" id="hour-errors">0</b></div><div><span>p50 / p95 / p99</span><b id="hour-p50">-</b> / <b id="hour-p95">-</b> / <b id="hour-p99">-</b></div></div>
<svg id="hour-chart" viewBox="0 0 600 60" preserveAspectRatio="none" aria-hidden="true"></svg><p class="dim" id="hour-outcomes">-</p></section>
<section class="wide" aria-labelledby="h-by-model"><h2 id="h-by-model">Spend and savings by model</h2>${table('Spend and savings by model', ['model', 'requests', 'spent', 'answered by dedup', 'saved'], 'by-model')}</section>
<section class="wide" aria-labelledby="h-by-key"><h2 id="h-by-key">Spend and savings by key (hashed)</h2>${table('Spend and savings by key', ['key', 'requests', 'spent', 'answered by dedup', 'saved'], 'by-key')}</section>
<section class="wide" aria-labelledby="h-errors"><h2 id="h-errors">Recent errors</h2>${table('Recent errors', ['time', 'route', 'status', 'code', 'request id'], 'errors')}</section>
</main><script>${pageScript('status-page')}</script></body></html>`;
}

export function loginPageHtml(): string {
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">
<title>Gateway status: sign in</title><style>${STYLE} form{max-width:360px;margin:80px auto;display:grid;gap:10px} input,button{font:inherit;padding:8px;border-radius:6px;border:1px solid #30363d;background:#0d1117;color:var(--fg)} button{background:#238636;border:0;cursor:pointer}</style></head>
<body><form id="login"><h1>Gateway status</h1><label for="key" class="dim">A gateway key</label>
<input id="key" type="password" autocomplete="current-password" required autofocus><button type="submit">Sign in</button><p id="message" class="dim"></p></form>
<script>${pageScript('login-page')}</script></body></html>`;
}

/** What a locked page says (beyond loopback, nobody may sign in): how to open it, nothing about the gateway. */
export function lockedPageHtml(): string {
  return `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Gateway status</title></head>
<body><h1>Gateway status</h1><p>This gateway listens beyond loopback and nobody may sign in to its status page.
Start it with <code>--gateway-keys</code>, or give a key of its keys file <code>"admin": true</code>, to sign in
with that key; or pass <code>--status-public</code> to show the page to anyone who can reach it.</p></body></html>`;
}
