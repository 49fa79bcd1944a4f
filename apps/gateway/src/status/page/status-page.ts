// The live status page's script: reads `<path>/events` (SSE) and redraws on every snapshot. Every value is written
// with textContent, never as HTML. The types below are the parts of the gateway's snapshot (StatusBoard) it reads.

type Outcome = 'miss' | 'joined' | 'cached' | 'none';
type Outcomes = Record<Outcome, number>;
interface Transition {
  at: number;
  from: string;
  to: string;
}
interface Upstream {
  name: string;
  breaker?: { state: string; consecutiveFailures: number };
  limiter?: { inFlight: number; limit: number; queued: number; queueSize: number };
  queueWait?: { count: number; avgMs: number; maxMs: number };
  member?: {
    health: string;
    draining: boolean;
    available: boolean;
    detail?: string;
    limitMode?: string;
    slots?: number;
  };
  timeline: Transition[];
}
interface Flight {
  key: string;
  route?: string;
  callers: number;
  ageMs: number;
}
interface Member {
  host: string;
  pid: number;
  port?: number;
  self?: boolean;
  state: string;
  breaker: string;
  inFlight: number;
  callersWaiting: number;
  upstreamInFlight: number;
  limit: number;
  queued: number;
  board?: { requestsPerSecond: number; savedDollars: number };
  at: number;
  flights?: Flight[];
}
interface StoreState {
  state: string;
  since?: number;
  error?: string;
}
interface Store {
  fleet: StoreState;
  coordination?: StoreState;
  window?: StoreState;
}
interface Minute extends Outcomes {
  at: number;
  requests: number;
  p95?: number;
}
interface Hour {
  hour: { requests: number; errors: number; latencyMs?: { p50: number; p95: number; p99: number }; outcomes: Outcomes };
  minutes: Minute[];
}
interface SpendRow {
  name: string;
  requests: number;
  spentDollars: number;
  spentTokens: number;
  savedCalls: number;
  savedDollars: number;
  savedTokens: number;
}
interface Snapshot {
  now: number;
  startedAt: number;
  provider: string;
  draining: boolean;
  workers?: Array<{ state: string }>;
  upstreams: Upstream[];
  history: Outcomes[];
  totals: Outcomes;
  upstreamCalls: { ok: number; error: number; timeout: number };
  saved: { calls: number; tokens: number; priced: boolean; dollars: number };
  spent: { dollars: number };
  refusals: Record<string, number>;
  tenants: Array<{ tenant: string; requests: number }>;
  errors: Array<{ at: number; route: string; status: number; code?: string; requestId: string }>;
  causes: Array<{
    cause: string;
    fromUpstream: boolean;
    status: number;
    route: string;
    count: number;
    lastAt: number;
    firstAt: number;
    lastRequestId: string;
  }>;
  spendByModel: SpendRow[];
  spendByKey: SpendRow[];
  store?: Store;
  fleet?: Member[];
  fleetShared?: boolean;
  flights: Flight[];
  hour: Hour;
  window: { entries: number; bytes: number };
}
type Cell = string | number;

const OUTCOMES: Outcome[] = ['miss', 'joined', 'cached', 'none'];
const $ = (id: string) => document.getElementById(id) as HTMLElement;
const fmt = (n: number) => Number(n).toLocaleString('en-US');
const time = (ms: number) => new Date(ms).toLocaleTimeString('en-GB');
const money = (x: number) => '$' + (x >= 1 ? x.toFixed(2) : x.toPrecision(3));
const ms = (x: number) => (x >= 1000 ? (x / 1000).toFixed(2) + ' s' : Math.round(x) + ' ms');
const ago = (now: number, at: number) => Math.max(0, Math.round((now - at) / 1000)) + ' s ago';
function text(el: HTMLElement, value: Cell) {
  if (el.textContent !== String(value)) el.textContent = String(value);
}
function rows<T>(tbody: HTMLElement, items: T[], cells: (item: T) => Cell[]) {
  tbody.replaceChildren(
    ...items.map((item) => {
      const tr = document.createElement('tr');
      for (const c of cells(item)) {
        const td = document.createElement('td');
        td.textContent = String(c);
        tr.append(td);
      }
      return tr;
    }),
  );
}
function renderUpstreams(upstreams: Upstream[]) {
  const box = $('upstreams');
  if (upstreams.length === 0) {
    const p = document.createElement('p');
    p.className = 'dim';
    p.textContent = 'no upstream called yet';
    return box.replaceChildren(p);
  }
  box.replaceChildren(
    ...upstreams.map((u) => {
      const div = document.createElement('div');
      div.dataset.upstream = u.name;
      const state = u.breaker ? u.breaker.state : 'none';
      const title = document.createElement('p');
      const name = document.createElement('strong');
      name.textContent = u.name + ' ';
      const badge = document.createElement('span');
      badge.className = 'badge breaker-state ' + state;
      badge.textContent = state.replace('_', '-');
      title.append(name, badge);
      const facts = document.createElement('div');
      facts.className = 'grid';
      const fact = (label: string, value: Cell, cls: string) => {
        const d = document.createElement('div');
        const s = document.createElement('span');
        s.textContent = label;
        const b = document.createElement('b');
        b.className = cls;
        b.textContent = String(value);
        d.append(s, b);
        return d;
      };
      facts.append(
        fact(
          'in flight / concurrency limit',
          u.limiter ? u.limiter.inFlight + ' / ' + u.limiter.limit : '-',
          'in-flight',
        ),
        fact('queued / queue limit', u.limiter ? u.limiter.queued + ' / ' + u.limiter.queueSize : '-', 'queued'),
        fact('failures in a row', u.breaker ? u.breaker.consecutiveFailures : '-', 'failures'),
      );
      const w = u.queueWait || { count: 0, avgMs: 0, maxMs: 0 };
      facts.append(
        fact('queue wait, last minute', w.count ? ms(w.avgMs) + ' avg, ' + ms(w.maxMs) + ' max' : '-', 'queue-wait'),
      );
      if (u.member) {
        const m = u.member;
        facts.append(
          fact(
            'health',
            m.health +
              (m.draining ? ', draining' : m.available ? ', in rotation' : ', out of rotation') +
              (m.detail ? ' (' + m.detail + ')' : ''),
            'member-health',
          ),
        );
        facts.append(
          fact('limit', m.limitMode === 'capacity' ? m.slots + ' slots' : m.limitMode || 'fixed', 'limit-mode'),
        );
      }
      const list = document.createElement('ul');
      list.className = 'timeline';
      const items = u.timeline
        .slice()
        .reverse()
        .map((t) => {
          const li = document.createElement('li');
          li.textContent = time(t.at) + '  ' + t.from.replace('_', '-') + ' \u2192 ' + t.to.replace('_', '-');
          return li;
        });
      if (items.length === 0) {
        const li = document.createElement('li');
        li.className = 'dim';
        li.textContent = 'no transition yet';
        items.push(li);
      }
      list.append(...items);
      div.append(title, facts, list);
      return div;
    }),
  );
}
function renderChart(history: Outcomes[]) {
  const svg = $('chart');
  const w = 600,
    h = 90,
    n = 60,
    bw = w / n;
  const max = Math.max(1, ...history.map((s) => s.miss + s.joined + s.cached + s.none));
  const bars: SVGRectElement[] = [];
  history.slice(-n).forEach((s, i) => {
    let y = h;
    const x = (n - Math.min(n, history.length) + i) * bw;
    for (const k of OUTCOMES) {
      const bh = (s[k] / max) * (h - 4);
      if (!bh) continue;
      y -= bh;
      const r = document.createElementNS('http://www.w3.org/2000/svg', 'rect');
      r.setAttribute('x', String(x + 1));
      r.setAttribute('y', String(y));
      r.setAttribute('width', String(bw - 2));
      r.setAttribute('height', String(bh));
      r.setAttribute('fill', 'var(--' + k + ')');
      bars.push(r);
    }
  });
  svg.replaceChildren(...bars);
}
const since = (now: number, at: number) => {
  const s = Math.max(0, Math.round((now - at) / 1000));
  return s < 120 ? s + ' s' : Math.round(s / 60) + ' min';
};
function renderStore(s: Snapshot) {
  const store: Store = s.store || { fleet: { state: 'off' } };
  const el = $('store');
  const f = store.fleet;
  const parts: string[] = [];
  if (f.state === 'off') parts.push('No Redis (--redis): this process alone; nothing is shared with other processes.');
  else if (f.state === 'ok') parts.push('Redis: reachable.');
  else
    parts.push(
      'Redis: unreachable for ' +
        since(s.now, f.since as number) +
        (f.error ? ' (' + f.error + ')' : '') +
        '. The other processes\u2019 state is unknown.',
    );
  if (store.coordination && store.coordination.state === 'degraded')
    parts.push('Calls are deduplicated within each process only (no fleet-wide coordination).');
  if (store.window && store.window.state === 'degraded')
    parts.push('Answers are not shared through Redis (each process keeps its own).');
  el.className =
    'store ' +
    (f.state === 'unreachable' || (store.coordination && store.coordination.state === 'degraded')
      ? 'unreachable'
      : f.state);
  el.dataset.state = f.state;
  text(el, parts.join(' '));
}
function memberState(m: Member) {
  return m.state === 'unknown' ? 'unknown (store unreachable)' : m.state;
}
function renderFleet(s: Snapshot) {
  const fleet = s.fleet && s.fleet.length ? s.fleet : [];
  text(
    $('fleet-size'),
    fleet.length > 1 || (fleet.length === 1 && s.fleetShared)
      ? fleet.length + ' processes sharing Redis'
      : 'this process only (no --redis)',
  );
  renderStore(s);
  rows($('fleet'), fleet, (m) => [
    m.host + ' pid ' + m.pid + (m.port ? ' :' + m.port : '') + (m.self ? ' (this page)' : ''),
    memberState(m),
    m.breaker.replace('_', '-'),
    m.inFlight + ' (' + m.callersWaiting + ' callers)',
    m.upstreamInFlight + ' / ' + m.limit,
    fmt(m.queued),
    m.board ? fmt(m.board.requestsPerSecond) : '-',
    m.board ? money(m.board.savedDollars) : '-',
    ago(s.now, m.at),
  ]);
  for (const tr of $('fleet').children) {
    (tr as HTMLElement).dataset.state = fleet[[...$('fleet').children].indexOf(tr)].state;
    tr.children[0].className = 'wrap';
  }
  // The same call (the same key) on several replicas: one call, every replica's callers.
  const calls = new Map<string, { key: string; route: string; callers: number; ageMs: number; where: string[] }>();
  const add = (f: Flight, where: string) => {
    const seen = calls.get(f.key) || { key: f.key, route: f.route || '', callers: 0, ageMs: 0, where: [] };
    seen.callers += f.callers;
    seen.ageMs = Math.max(seen.ageMs, f.ageMs);
    seen.where.push(where);
    calls.set(f.key, seen);
  };
  for (const f of s.flights) add(f, 'here');
  for (const m of fleet)
    if (!m.self) for (const f of m.flights || []) add(f, m.host + ' pid ' + m.pid + (m.port ? ' :' + m.port : ''));
  const list = [...calls.values()].sort((a, b) => b.callers - a.callers).slice(0, 10);
  rows($('flights'), list, (f) => [f.key, f.route, fmt(f.callers), ms(f.ageMs), f.where.join(', ')]);
  text($('callers-waiting'), fmt(list.reduce((n, f) => n + f.callers, 0)));
  // A call several processes joined is one call: the fleet's count is of distinct calls, not the rows' sum.
  text(
    $('fleet-calls'),
    fleet.length > 1
      ? fmt(calls.size) +
          ' distinct calls in flight across the fleet (a call joined from several processes counts once)'
      : '',
  );
}
function renderHour(h: Hour) {
  const l = h.hour.latencyMs;
  text($('hour-requests'), fmt(h.hour.requests));
  text($('hour-errors'), fmt(h.hour.errors));
  text($('hour-p50'), l ? ms(l.p50) : '-');
  text($('hour-p95'), l ? ms(l.p95) : '-');
  text($('hour-p99'), l ? ms(l.p99) : '-');
  const o = h.hour.outcomes;
  text(
    $('hour-outcomes'),
    'miss ' + fmt(o.miss) + ', joined ' + fmt(o.joined) + ', cached ' + fmt(o.cached) + ', not dedup. ' + fmt(o.none),
  );
  const svg = $('hour-chart');
  const w = 600,
    height = 60,
    n = 60,
    bw = w / n;
  const max = Math.max(1, ...h.minutes.map((m) => m.requests));
  const bars: SVGRectElement[] = [];
  const end = Math.floor(Date.now() / 60000) * 60000;
  for (const m of h.minutes) {
    const i = n - 1 - Math.round((end - m.at) / 60000);
    if (i < 0) continue;
    let y = height;
    for (const k of OUTCOMES) {
      const bh = (m[k] / max) * (height - 4);
      if (!bh) continue;
      y -= bh;
      const r = document.createElementNS('http://www.w3.org/2000/svg', 'rect');
      r.setAttribute('x', String(i * bw + 1));
      r.setAttribute('y', String(y));
      r.setAttribute('width', String(bw - 2));
      r.setAttribute('height', String(bh));
      r.setAttribute('fill', 'var(--' + k + ')');
      const t = document.createElementNS('http://www.w3.org/2000/svg', 'title');
      t.textContent = time(m.at) + ': ' + m.requests + ' requests, p95 ' + (m.p95 ? ms(m.p95) : '-');
      r.append(t);
      bars.push(r);
    }
  }
  svg.replaceChildren(...bars);
}
function render(s: Snapshot) {
  text($('provider'), s.provider);
  text($('uptime'), Math.round((s.now - s.startedAt) / 1000) + ' s');
  text($('draining'), s.draining ? 'draining' : '');
  text(
    $('workers'),
    s.workers
      ? s.workers.length +
          ' workers' +
          (s.workers.some((w) => w.state !== 'ok')
            ? ' (' + s.workers.filter((w) => w.state !== 'ok').length + ' silent)'
            : '')
      : '',
  );
  renderUpstreams(s.upstreams);
  const last = s.history[s.history.length - 1] || { miss: 0, joined: 0, cached: 0, none: 0 };
  for (const k of OUTCOMES) {
    text($('rate-' + k), fmt(last[k]));
    text($('total-' + k), fmt(s.totals[k]));
  }
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
  rows($('causes'), s.causes, (c) => [
    c.cause + (c.fromUpstream ? ' (provider)' : ''),
    c.status,
    c.route,
    fmt(c.count),
    time(c.lastAt),
    time(c.firstAt),
    c.lastRequestId.slice(0, 8),
  ]);
  const spend = (r: SpendRow) => [
    r.name,
    fmt(r.requests),
    r.spentDollars ? money(r.spentDollars) : fmt(r.spentTokens) + ' tok',
    fmt(r.savedCalls),
    r.savedDollars ? money(r.savedDollars) : fmt(r.savedTokens) + ' tok',
  ];
  rows($('by-model'), s.spendByModel, spend);
  rows($('by-key'), s.spendByKey, spend);
  renderFleet(s);
  renderHour(s.hour);
  text($('window'), fmt(s.window.entries) + ' answers, ' + fmt(Math.round(s.window.bytes / 1024)) + ' KiB');
}
// Figures older than this without a new snapshot (one comes every second) are no longer the gateway's.
const STALE_MS = 4000;
let lastSnapshot = 0,
  lastNow = 0;
function stale(lost: boolean) {
  document.body.classList.toggle('stale', lost);
  $('stale').hidden = !lost;
  if (lost) {
    text($('stale-at'), lastNow ? time(lastNow) : 'never');
    text($('conn'), 'reconnecting\u2026');
  }
}
function connect() {
  const events = new EventSource(location.pathname.replace(/\/$/, '') + '/events');
  events.addEventListener('snapshot', (e) => {
    const s = JSON.parse(e.data as string) as Snapshot;
    lastSnapshot = Date.now();
    lastNow = s.now;
    stale(false);
    text($('conn'), 'live');
    render(s);
  });
  // A stream the server ends on schedule reconnects at once: only a gap with no snapshot is a lost connection.
  events.onerror = () => {
    text($('conn'), 'reconnecting\u2026');
    setTimeout(() => {
      if (Date.now() - lastSnapshot > 1000) stale(true);
    }, 1000);
  };
  setInterval(() => {
    if (lastSnapshot && Date.now() - lastSnapshot > STALE_MS) stale(true);
  }, 1000);
}
connect();
