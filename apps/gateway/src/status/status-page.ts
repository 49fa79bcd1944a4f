/**
 * The live status page and its login form: one self-contained HTML document
 * each (inline CSS and JS, no external asset: many production networks have
 * no internet). The page reads `<path>/events` (SSE) and redraws on every
 * snapshot; every value is written with textContent, never as HTML.
 */

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
svg{width:100%;height:90px;display:block}section.wide{grid-column:span 2}@media (max-width:760px){section.wide{grid-column:auto}}#draining:empty,#workers:empty,#fleet-calls:empty{display:none}
.store{margin:0 0 8px;padding:6px 10px;border-radius:6px;background:#8b949e22}.store.ok{background:#23863622}.store.unreachable{background:#f8514933;color:var(--fg);font-weight:600}
#stale{position:sticky;top:0;z-index:1;margin:0;padding:10px 20px;background:#ff6a61;color:#0f1419;font-weight:700;font-size:16px}#stale[hidden]{display:none}
body.stale main{filter:grayscale(1);opacity:.55}body.stale main .big,body.stale main td,body.stale main b{text-decoration:line-through}`;

const SCRIPT = `
const $ = (id) => document.getElementById(id);
const fmt = (n) => Number(n).toLocaleString('en-US');
const time = (ms) => new Date(ms).toLocaleTimeString('en-GB');
const money = (x) => '$' + (x >= 1 ? x.toFixed(2) : x.toPrecision(3));
const ms = (x) => x >= 1000 ? (x / 1000).toFixed(2) + ' s' : Math.round(x) + ' ms';
const ago = (now, at) => Math.max(0, Math.round((now - at) / 1000)) + ' s ago';
function text(el, value) { if (el.textContent !== String(value)) el.textContent = String(value); }
function rows(tbody, items, cells) {
  tbody.replaceChildren(...items.map((item) => { const tr = document.createElement('tr'); for (const c of cells(item)) { const td = document.createElement('td'); td.textContent = String(c); tr.append(td); } return tr; }));
}
function renderUpstreams(upstreams) {
  const box = $('upstreams');
  if (upstreams.length === 0) { const p = document.createElement('p'); p.className = 'dim'; p.textContent = 'no upstream called yet'; return box.replaceChildren(p); }
  box.replaceChildren(...upstreams.map((u) => {
    const div = document.createElement('div'); div.dataset.upstream = u.name;
    const state = u.breaker ? u.breaker.state : 'none';
    const title = document.createElement('p');
    const name = document.createElement('strong'); name.textContent = u.name + ' ';
    const badge = document.createElement('span'); badge.className = 'badge breaker-state ' + state; badge.textContent = state.replace('_', '-');
    title.append(name, badge);
    const facts = document.createElement('div'); facts.className = 'grid';
    const fact = (label, value, cls) => { const d = document.createElement('div'); const s = document.createElement('span'); s.textContent = label; const b = document.createElement('b'); b.className = cls; b.textContent = value; d.append(s, b); return d; };
    facts.append(fact('in flight / concurrency limit', u.limiter ? u.limiter.inFlight + ' / ' + u.limiter.limit : '-', 'in-flight'), fact('queued / queue limit', u.limiter ? u.limiter.queued + ' / ' + u.limiter.queueSize : '-', 'queued'), fact('failures in a row', u.breaker ? u.breaker.consecutiveFailures : '-', 'failures'));
    const w = u.queueWait || { count: 0, avgMs: 0, maxMs: 0 };
    facts.append(fact('queue wait, last minute', w.count ? ms(w.avgMs) + ' avg, ' + ms(w.maxMs) + ' max' : '-', 'queue-wait'));
    if (u.member) {
      const m = u.member;
      facts.append(fact('health', m.health + (m.draining ? ', draining' : m.available ? ', in rotation' : ', out of rotation') + (m.detail ? ' (' + m.detail + ')' : ''), 'member-health'));
      facts.append(fact('limit', m.limitMode === 'capacity' ? m.slots + ' slots' : (m.limitMode || 'fixed'), 'limit-mode'));
    }
    const list = document.createElement('ul'); list.className = 'timeline';
    const items = u.timeline.slice().reverse().map((t) => { const li = document.createElement('li'); li.textContent = time(t.at) + '  ' + t.from.replace('_', '-') + ' \\u2192 ' + t.to.replace('_', '-'); return li; });
    if (items.length === 0) { const li = document.createElement('li'); li.className = 'dim'; li.textContent = 'no transition yet'; items.push(li); }
    list.append(...items);
    div.append(title, facts, list);
    return div;
  }));
}
function renderChart(history) {
  const svg = $('chart'); const w = 600, h = 90, n = 60, bw = w / n;
  const max = Math.max(1, ...history.map((s) => s.miss + s.joined + s.cached + s.none));
  const bars = [];
  history.slice(-n).forEach((s, i) => {
    let y = h; const x = (n - Math.min(n, history.length) + i) * bw;
    for (const k of ['miss', 'joined', 'cached', 'none']) { const bh = s[k] / max * (h - 4); if (!bh) continue; y -= bh; const r = document.createElementNS('http://www.w3.org/2000/svg', 'rect'); r.setAttribute('x', x + 1); r.setAttribute('y', y); r.setAttribute('width', bw - 2); r.setAttribute('height', bh); r.setAttribute('fill', 'var(--' + k + ')'); bars.push(r); }
  });
  svg.replaceChildren(...bars);
}
const since = (now, at) => { const s = Math.max(0, Math.round((now - at) / 1000)); return s < 120 ? s + ' s' : Math.round(s / 60) + ' min'; };
function renderStore(s) {
  const store = s.store || { fleet: { state: 'off' } }; const el = $('store'); const f = store.fleet;
  const parts = [];
  if (f.state === 'off') parts.push('No Redis (--redis): this process alone; nothing is shared with other processes.');
  else if (f.state === 'ok') parts.push('Redis: reachable.');
  else parts.push('Redis: unreachable for ' + since(s.now, f.since) + (f.error ? ' (' + f.error + ')' : '') + '. The other processes\u2019 state is unknown.');
  if (store.coordination && store.coordination.state === 'degraded') parts.push('Calls are deduplicated within each process only (no fleet-wide coordination).');
  if (store.window && store.window.state === 'degraded') parts.push('Answers are not shared through Redis (each process keeps its own).');
  el.className = 'store ' + (f.state === 'unreachable' || (store.coordination && store.coordination.state === 'degraded') ? 'unreachable' : f.state);
  el.dataset.state = f.state;
  text(el, parts.join(' '));
}
function memberState(m) { return m.state === 'unknown' ? 'unknown (store unreachable)' : m.state; }
function renderFleet(s) {
  const fleet = s.fleet && s.fleet.length ? s.fleet : [];
  text($('fleet-size'), fleet.length > 1 || (fleet.length === 1 && s.fleetShared) ? fleet.length + ' processes sharing Redis' : 'this process only (no --redis)');
  renderStore(s);
  rows($('fleet'), fleet, (m) => [m.host + ' pid ' + m.pid + (m.port ? ' :' + m.port : '') + (m.self ? ' (this page)' : ''), memberState(m), m.breaker.replace('_', '-'), m.inFlight + ' (' + m.callersWaiting + ' callers)', m.upstreamInFlight + ' / ' + m.limit, fmt(m.queued), m.board ? fmt(m.board.requestsPerSecond) : '-', m.board ? money(m.board.savedDollars) : '-', ago(s.now, m.at)]);
  for (const tr of $('fleet').children) { tr.dataset.state = fleet[[...$('fleet').children].indexOf(tr)].state; tr.children[0].className = 'wrap'; }
  // The same call (the same key) on several replicas: one call, every replica's callers.
  const calls = new Map();
  const add = (f, where) => { const seen = calls.get(f.key) || { key: f.key, route: f.route || '', callers: 0, ageMs: 0, where: [] }; seen.callers += f.callers; seen.ageMs = Math.max(seen.ageMs, f.ageMs); seen.where.push(where); calls.set(f.key, seen); };
  for (const f of s.flights) add(f, 'here');
  for (const m of fleet) if (!m.self) for (const f of m.flights || []) add(f, m.host + ' pid ' + m.pid + (m.port ? ' :' + m.port : ''));
  const list = [...calls.values()].sort((a, b) => b.callers - a.callers).slice(0, 10);
  rows($('flights'), list, (f) => [f.key, f.route, fmt(f.callers), ms(f.ageMs), f.where.join(', ')]);
  text($('callers-waiting'), fmt(list.reduce((n, f) => n + f.callers, 0)));
  // A call several processes joined is one call: the fleet's count is of distinct calls, not the rows' sum.
  text($('fleet-calls'), fleet.length > 1 ? fmt(calls.size) + ' distinct calls in flight across the fleet (a call joined from several processes counts once)' : '');
}
function renderHour(h) {
  const l = h.hour.latencyMs;
  text($('hour-requests'), fmt(h.hour.requests)); text($('hour-errors'), fmt(h.hour.errors));
  text($('hour-p50'), l ? ms(l.p50) : '-'); text($('hour-p95'), l ? ms(l.p95) : '-'); text($('hour-p99'), l ? ms(l.p99) : '-');
  const o = h.hour.outcomes; text($('hour-outcomes'), 'miss ' + fmt(o.miss) + ', joined ' + fmt(o.joined) + ', cached ' + fmt(o.cached) + ', not dedup. ' + fmt(o.none));
  const svg = $('hour-chart'); const w = 600, height = 60, n = 60, bw = w / n;
  const max = Math.max(1, ...h.minutes.map((m) => m.requests)); const bars = [];
  const end = Math.floor(Date.now() / 60000) * 60000;
  for (const m of h.minutes) { const i = n - 1 - Math.round((end - m.at) / 60000); if (i < 0) continue; let y = height;
    for (const k of ['miss', 'joined', 'cached', 'none']) { const bh = m[k] / max * (height - 4); if (!bh) continue; y -= bh; const r = document.createElementNS('http://www.w3.org/2000/svg', 'rect'); r.setAttribute('x', i * bw + 1); r.setAttribute('y', y); r.setAttribute('width', bw - 2); r.setAttribute('height', bh); r.setAttribute('fill', 'var(--' + k + ')'); const t = document.createElementNS('http://www.w3.org/2000/svg', 'title'); t.textContent = time(m.at) + ': ' + m.requests + ' requests, p95 ' + (m.p95 ? ms(m.p95) : '-'); r.append(t); bars.push(r); } }
  svg.replaceChildren(...bars);
}
function render(s) {
  text($('provider'), s.provider); text($('uptime'), Math.round((s.now - s.startedAt) / 1000) + ' s');
  text($('draining'), s.draining ? 'draining' : '');
  text($('workers'), s.workers ? s.workers.length + ' workers' + (s.workers.some((w) => w.state !== 'ok') ? ' (' + s.workers.filter((w) => w.state !== 'ok').length + ' silent)' : '') : '');
  renderUpstreams(s.upstreams);
  const last = s.history[s.history.length - 1] || { miss: 0, joined: 0, cached: 0, none: 0 };
  for (const k of ['miss', 'joined', 'cached', 'none']) { text($('rate-' + k), fmt(last[k])); text($('total-' + k), fmt(s.totals[k])); }
  renderChart(s.history);
  text($('upstream-calls'), fmt(s.upstreamCalls.ok + s.upstreamCalls.error + s.upstreamCalls.timeout));
  text($('upstream-failed'), fmt(s.upstreamCalls.error + s.upstreamCalls.timeout));
  text($('calls-saved'), fmt(s.saved.calls));
  text($('tokens-saved'), fmt(s.saved.tokens));
  text($('money-saved'), s.saved.priced ? money(s.saved.dollars) : 'no price known for these models');
  text($('money-spent'), s.spent.dollars ? money(s.spent.dollars) : '-');
  rows($('refusals'), Object.entries(s.refusals), ([reason, n]) => [reason.replace(/_/g, ' '), fmt(n)]);
  rows($('tenants'), s.tenants, (t) => [t.tenant, fmt(t.requests)]);
  rows($('errors'), s.errors, (e) => [time(e.at), e.route, e.status, e.code || '', e.requestId.slice(0, 8)]);
  rows($('causes'), s.causes, (c) => [c.cause + (c.fromUpstream ? ' (provider)' : ''), c.status, c.route, fmt(c.count), time(c.lastAt), time(c.firstAt), c.lastRequestId.slice(0, 8)]);
  const spend = (r) => [r.name, fmt(r.requests), r.spentDollars ? money(r.spentDollars) : fmt(r.spentTokens) + ' tok', fmt(r.savedCalls), r.savedDollars ? money(r.savedDollars) : fmt(r.savedTokens) + ' tok'];
  rows($('by-model'), s.spendByModel, spend);
  rows($('by-key'), s.spendByKey, spend);
  renderFleet(s);
  renderHour(s.hour);
  text($('window'), fmt(s.window.entries) + ' answers, ' + fmt(Math.round(s.window.bytes / 1024)) + ' KiB');
}
// Figures older than this without a new snapshot (one comes every second) are no longer the gateway's.
const STALE_MS = 4000;
let lastSnapshot = 0, lastNow = 0;
function stale(lost) {
  document.body.classList.toggle('stale', lost);
  $('stale').hidden = !lost;
  if (lost) { text($('stale-at'), lastNow ? time(lastNow) : 'never'); text($('conn'), 'reconnecting\\u2026'); }
}
function connect() {
  const events = new EventSource(location.pathname.replace(/\\/$/, '') + '/events');
  events.addEventListener('snapshot', (e) => { const s = JSON.parse(e.data); lastSnapshot = Date.now(); lastNow = s.now; stale(false); text($('conn'), 'live'); render(s); });
  // A stream the server ends on schedule reconnects at once: only a gap with no snapshot is a lost connection.
  events.onerror = () => { text($('conn'), 'reconnecting\\u2026'); setTimeout(() => { if (Date.now() - lastSnapshot > 1000) stale(true); }, 1000); };
  setInterval(() => { if (lastSnapshot && Date.now() - lastSnapshot > STALE_MS) stale(true); }, 1000);
}
connect();`;

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
<section class="wide" aria-labelledby="h-fleet"><h2 id="h-fleet">Fleet</h2><p class="dim" id="fleet-size">-</p><p class="store" id="store">-</p><p class="dim" id="fleet-calls"></p>
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
</main><script>${SCRIPT}</script></body></html>`;
}

export function loginPageHtml(): string {
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">
<title>Gateway status: sign in</title><style>${STYLE} form{max-width:360px;margin:80px auto;display:grid;gap:10px} input,button{font:inherit;padding:8px;border-radius:6px;border:1px solid #30363d;background:#0d1117;color:var(--fg)} button{background:#238636;border:0;cursor:pointer}</style></head>
<body><form id="login"><h1>Gateway status</h1><label for="key" class="dim">A gateway key</label>
<input id="key" type="password" autocomplete="current-password" required autofocus><button type="submit">Sign in</button><p id="message" class="dim"></p></form>
<script>
document.getElementById('login').addEventListener('submit', async (event) => {
  event.preventDefault();
  const response = await fetch(location.pathname.replace(/\\/$/, '') + '/login', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ key: document.getElementById('key').value }) });
  if (response.ok) location.reload(); else document.getElementById('message').textContent = 'That key is not one of this gateway\\'s keys.';
});
</script></body></html>`;
}

/** What a locked page says (beyond loopback, nobody may sign in): how to open it, nothing about the gateway. */
export function lockedPageHtml(): string {
  return `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Gateway status</title></head>
<body><h1>Gateway status</h1><p>This gateway listens beyond loopback and nobody may sign in to its status page.
Start it with <code>--gateway-keys</code>, or give a key of its keys file <code>"admin": true</code>, to sign in
with that key; or pass <code>--status-public</code> to show the page to anyone who can reach it.</p></body></html>`;
}
