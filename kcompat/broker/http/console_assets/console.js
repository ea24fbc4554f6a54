// kcompat console: a single-page app over the broker's HTTP API (same origin).
//
// Layout of this file: core (DOM helpers, the API client with its auth, the
// error box, the router), shared widgets (tables, record decoding, the SVG
// line chart), then one section per page. Every page is an async function
// `(ctx, ...params)` that fills `ctx.root`; `ctx.every` runs a poller that
// stops when the user leaves the page, and `ctx.alive` turns false then, so
// answers arriving late are dropped. Pages only load what they show: the
// record browsers read one page of one partition at a time.
'use strict';

// ---------------------------------------------------------------- core: DOM

function h(tag, props, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(props || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') el.className = v;
    else if (k === 'testid') el.dataset.testid = v;
    else if (k === 'dataset') Object.assign(el.dataset, v);
    else if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (['value', 'checked', 'disabled', 'hidden', 'selected'].includes(k)) el[k] = v;
    else el.setAttribute(k, v === true ? '' : v);
  }
  append(el, children);
  return el;
}

function append(el, ...children) {
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

function clear(el, ...children) {
  el.replaceChildren();
  return append(el, children);
}

const enc = encodeURIComponent;
const link = (hash, text, testid) => h('a', { href: '#/' + hash, testid }, text);

// ---------------------------------------------------------------- core: errors

const errorBox = document.getElementById('error');

class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

function showError(err) {
  let text;
  if (err instanceof ApiError) {
    text = `${err.message}` + (err.status ? ` (HTTP ${err.status}, error ${err.code})` : '');
  } else {
    text = String(err && err.message ? err.message : err);
  }
  errorBox.textContent = text;
  errorBox.hidden = false;
}

function clearError() {
  errorBox.textContent = '';
  errorBox.hidden = true;
}

// ---------------------------------------------------------------- core: API client

const AUTH_KEY = 'kcompat.console.authorization';
const CLUSTER_KEY = 'kcompat.console.cluster';
const api = {
  clusterId: null,

  headers(extra) {
    const headers = Object.assign({}, extra);
    const auth = sessionStorage.getItem(AUTH_KEY);
    if (auth) headers.Authorization = auth;
    return headers;
  },

  // fetch with the user's credentials; a 401 shows the login form
  async raw(method, path, body) {
    const init = { method, headers: this.headers(), credentials: 'same-origin' };
    if (body !== undefined) {
      init.headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(body);
    }
    let answer;
    try {
      answer = await fetch(path, init);
    } catch (e) {
      throw new ApiError(0, 0, `cannot reach the broker: ${e.message}`);
    }
    if (answer.status === 401) showLogin();
    return answer;
  },

  async call(method, path, body) {
    const answer = await this.raw(method, path, body);
    const text = await answer.text();
    let doc = null;
    if (text) {
      try { doc = JSON.parse(text); } catch (e) { doc = { message: text.slice(0, 300) }; }
    }
    if (!answer.ok) {
      const message = (doc && doc.message) || `HTTP ${answer.status} ${answer.statusText}`;
      if (answer.status === 404 && this.clusterId && message === `Cluster ${this.clusterId} cannot be found.`) {
        // a kept id of a cluster made again at this address: ask for it, then this page again
        this.clusterId = null;
        sessionStorage.removeItem(CLUSTER_KEY);
        setTimeout(route, 0);
      }
      throw new ApiError(answer.status, (doc && doc.error_code) || answer.status, message);
    }
    return doc;
  },

  get(path) { return this.call('GET', path); },

  // the cluster id, kept in this tab: a page loaded again asks for its data at once
  async cluster() {
    if (!this.clusterId) this.clusterId = sessionStorage.getItem(CLUSTER_KEY);
    if (!this.clusterId) {
      const list = await this.get('/v3/clusters');
      this.clusterId = list.data[0].cluster_id;
      sessionStorage.setItem(CLUSTER_KEY, this.clusterId);
    }
    return this.clusterId;
  },

  // a path under this cluster: api.cl('topics', name, 'configs')
  async cl(...parts) {
    const id = await this.cluster();
    return `/v3/clusters/${enc(id)}/` + parts.map((p) => enc(String(p))).join('/');
  },

  async metrics() {
    const answer = await this.raw('GET', '/metrics');
    if (!answer.ok) throw new ApiError(answer.status, answer.status, `/metrics: HTTP ${answer.status}`);
    return answer.text();
  },
};

// the last path segment of a REST link: {related: ".../brokers/1"} -> "1"
function lastSegment(linkObj) {
  if (linkObj === null || linkObj === undefined) return '';
  if (typeof linkObj !== 'object') return String(linkObj);
  const url = linkObj.related || '';
  return url.slice(url.lastIndexOf('/') + 1);
}

// a URL the API gave (metadata.next) as a path on this origin
function sameOrigin(url) {
  const u = new URL(url, location.href);
  return u.pathname + u.search;
}

// ---------------------------------------------------------------- core: login

const loginBox = document.getElementById('login');

function showLogin() {
  loginBox.hidden = false;
}

document.getElementById('login-form').addEventListener('submit', (ev) => {
  ev.preventDefault();
  const user = document.getElementById('login-user').value;
  const password = document.getElementById('login-password').value;
  const token = document.getElementById('login-token').value.trim();
  if (token) sessionStorage.setItem(AUTH_KEY, 'Bearer ' + token);
  else if (user) {
    const bytes = new TextEncoder().encode(`${user}:${password}`);
    sessionStorage.setItem(AUTH_KEY, 'Basic ' + btoa(String.fromCharCode(...bytes)));
  } else {
    showError('Give a user and password, or the admin token.');
    return;
  }
  loginBox.hidden = true;
  document.getElementById('logout').hidden = false;
  route();
});

document.getElementById('logout').addEventListener('click', () => {
  sessionStorage.removeItem(AUTH_KEY);
  api.clusterId = null;
  document.getElementById('logout').hidden = true;
  route();
});
document.getElementById('logout').hidden = !sessionStorage.getItem(AUTH_KEY);

// ---------------------------------------------------------------- core: router

const main = document.getElementById('main');
let current = null; // the page on screen: {alive, timers}

function newContext() {
  const ctx = {
    alive: true,
    timers: [],
    root: h('div', { class: 'page' }),
    // run fn now and every ms while the page is open (one run at a time)
    every(ms, fn) {
      let busy = false;
      const tick = async () => {
        if (!ctx.alive || busy) return;
        busy = true;
        try { await fn(); } catch (e) { ctx.fail(e); } finally { busy = false; }
      };
      ctx.timers.push(setInterval(tick, ms));
      return tick();
    },
    fail(e) { if (ctx.alive) showError(e); },
  };
  return ctx;
}

const ROUTES = [
  [/^$/, pageOverview],
  [/^topics$/, pageTopics],
  [/^topics\/(.+)$/, pageTopic],
  [/^groups$/, pageGroups],
  [/^groups\/(.+)$/, pageGroup],
  [/^share-groups$/, pageShareGroups],
  [/^share-groups\/(.+)$/, pageShareGroup],
  [/^delayed$/, pageDelayed],
  [/^dlq$/, pageDeadLetters],
  [/^dlq\/(.+)$/, pageDeadLetterTopic],
  [/^dedup$/, pageDedupViews],
  [/^charts$/, pageCharts],
];

async function route() {
  if (current) {
    current.alive = false;
    current.timers.forEach(clearInterval);
  }
  clearError();
  const path = location.hash.replace(/^#\/?/, '');
  const ctx = (current = newContext());
  clear(main, ctx.root);
  for (const a of document.querySelectorAll('#nav a')) {
    const section = a.dataset.route;
    a.classList.toggle('active', section === '' ? path === '' : path.split('/')[0] === section);
  }
  for (const [pattern, page] of ROUTES) {
    const m = pattern.exec(path);
    if (m) {
      try {
        await page(ctx, ...m.slice(1).map(decodeURIComponent));
        // when this page's data is drawn (Performance API: what bench/console.py reads)
        if (ctx.alive) performance.mark('kcompat:page-drawn');
      } catch (e) {
        ctx.fail(e);
      }
      return;
    }
  }
  append(ctx.root, h('h1', {}, 'Not found'), h('p', {}, `No page ${path}.`));
}

window.addEventListener('hashchange', route);
document.getElementById('refresh').addEventListener('click', route);

// ---------------------------------------------------------------- widgets

// a table: headers ["name", {text, num: true}], rows of cells (text or nodes)
function table(testid, headers, rows, empty = 'none') {
  const numeric = headers.map((col) => typeof col === 'object' && col.num);
  const head = h('tr', {}, headers.map((col, i) =>
    h('th', { class: numeric[i] ? 'num' : null }, typeof col === 'object' ? col.text : col)));
  const body = rows.length
    ? rows.map((row) => h('tr', {}, row.map((cell, i) =>
        h('td', { class: numeric[i] ? 'num' : null }, cell))))
    : [h('tr', { class: 'empty' }, h('td', { colspan: headers.length }, empty))];
  return h('table', { id: testid, testid }, h('thead', {}, head), h('tbody', {}, body));
}

function section(title, ...children) {
  return h('section', { class: 'panel' }, title ? h('h2', {}, title) : null, children);
}

function notice(testid, text) {
  return h('div', { class: 'notice', testid, id: testid, role: 'status' }, text);
}

function fmtTime(ms) {
  if (ms === null || ms === undefined) return '';
  const d = new Date(ms);
  const pad = (n, w = 2) => String(n).padStart(w, '0');
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ` +
    `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}.${pad(d.getMilliseconds(), 3)}`;
}

function fmtBytes(n) {
  const units = ['B', 'KiB', 'MiB', 'GiB'];
  let i = 0;
  while (Math.abs(n) >= 1024 && i < units.length - 1) { n /= 1024; i += 1; }
  return `${n.toFixed(i ? 1 : 0)} ${units[i]}`;
}

// base64 -> text when the bytes are printable UTF-8, else "base64:..."
function decodeData(b64) {
  if (b64 === null || b64 === undefined) return null;
  const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
  try {
    const text = new TextDecoder('utf-8', { fatal: true }).decode(bytes);
    if (!/[\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f]/.test(text)) return text;
  } catch (e) { /* not UTF-8 */ }
  return 'base64:' + b64;
}

const shown = (part) => (part === null || part === undefined
  ? h('span', { class: 'muted' }, 'null') : decodeData(part.data));

function headerText(headers) {
  return (headers || []).map((hd) => `${hd.name}=${hd.value === null ? '(null)' : decodeData(hd.value)}`);
}

function headersCell(headers) {
  return h('div', { class: 'mono' }, headerText(headers).map((t) => h('div', {}, t)));
}

// an SVG line chart of series [{name, points: [[ms, value], ...]}]
const PALETTE = ['#2156c9', '#d1495b', '#00798c', '#edae49', '#66a182', '#8d5a97', '#30638e', '#ef8354'];

function lineChart(testid, series, { width = 640, height = 220, fmt = String } = {}) {
  const NS = 'http://www.w3.org/2000/svg';
  const s = (tag, attrs, text) => {
    const el = document.createElementNS(NS, tag);
    for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
    if (text !== undefined) el.textContent = text;
    return el;
  };
  const svg = s('svg', { viewBox: `0 0 ${width} ${height}`, width: '100%', class: 'chart',
    'data-testid': testid, id: testid });
  const left = 70, right = 10, top = 10, bottom = 22;
  const all = series.flatMap((se) => se.points);
  const tMin = Math.min(...all.map((p) => p[0]));
  const tMax = Math.max(...all.map((p) => p[0]));
  const vMax = Math.max(1, ...all.map((p) => p[1]));
  const x = (t) => left + (tMax > tMin ? (t - tMin) / (tMax - tMin) : 1) * (width - left - right);
  const y = (v) => top + (1 - v / vMax) * (height - top - bottom);
  for (const frac of [0, 0.5, 1]) {
    svg.append(s('line', { x1: left, x2: width - right, y1: y(vMax * frac), y2: y(vMax * frac), class: 'grid' }));
    svg.append(s('text', { x: left - 6, y: y(vMax * frac) + 4, 'text-anchor': 'end' }, fmt(vMax * frac)));
  }
  if (!all.length) {
    svg.append(s('text', { x: width / 2, y: height / 2, 'text-anchor': 'middle' }, 'waiting for data…'));
  } else {
    const span = Math.round((tMax - tMin) / 1000);
    svg.append(s('text', { x: left, y: height - 6 }, `${span} s ago`));
    svg.append(s('text', { x: width - right, y: height - 6, 'text-anchor': 'end' }, 'now'));
  }
  series.forEach((se, i) => {
    if (!se.points.length) return;
    const pts = se.points.map((p) => `${x(p[0]).toFixed(1)},${y(p[1]).toFixed(1)}`).join(' ');
    svg.append(s('polyline', { points: pts, fill: 'none', stroke: PALETTE[i % PALETTE.length],
      'stroke-width': 2 }));
  });
  const legend = h('div', { class: 'legend' }, series.map((se, i) =>
    h('span', {}, h('i', { style: `background:${PALETTE[i % PALETTE.length]}` }), se.name)));
  return h('div', {}, svg, legend);
}

// keep at most `max` points per series of a Map name -> points
function pushPoint(history, name, t, value, max = 60) {
  if (!history.has(name)) history.set(name, []);
  const points = history.get(name);
  points.push([t, value]);
  if (points.length > max) points.splice(0, points.length - max);
}

// run `work` on a form's submit, errors to the error box, button disabled meanwhile
function onSubmit(form, work) {
  form.noValidate = true; // our checks, with messages in the error box
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    clearError();
    const buttons = form.querySelectorAll('button');
    buttons.forEach((b) => { b.disabled = true; });
    try { await work(); } catch (e) { showError(e); } finally {
      buttons.forEach((b) => { b.disabled = false; });
    }
  });
}

// a number from an input: null when empty; throws a readable error when bad
function intInput(input, what, { min = null } = {}) {
  const text = input.value.trim();
  if (text === '') return null;
  if (!/^-?\d+$/.test(text)) throw new Error(`${what} must be a whole number, not "${text}"`);
  const n = Number(text);
  if (min !== null && n < min) throw new Error(`${what} must be at least ${min}`);
  return n;
}

// ---------------------------------------------------------------- page: overview

async function pageOverview(ctx) {
  // one request, whatever the number of topics (GET .../overview)
  const o = await api.cl('overview').then((p) => api.get(p));
  if (!ctx.alive) return;
  const controller = o.controller_id >= 0
    ? h('a', { href: '#/', testid: 'controller-link' }, `broker ${o.controller_id}`)
    : 'unknown';
  const children = [
    h('h1', {}, 'Overview'),
    section(null, h('dl', { class: 'facts' },
      h('dt', {}, 'Cluster id'), h('dd', { testid: 'cluster-id', class: 'mono' }, o.cluster_id),
      h('dt', {}, 'Controller'), h('dd', {}, controller),
      h('dt', {}, 'Brokers'), h('dd', { testid: 'broker-count' }, o.brokers.length),
      h('dt', {}, 'Topics'), h('dd', { testid: 'topic-count' }, o.topics),
      h('dt', {}, 'Partitions'), h('dd', { testid: 'partition-count' }, o.partitions),
      h('dt', {}, 'Under-replicated'), h('dd', { testid: 'under-replicated' }, o.under_replicated_partitions),
      h('dt', {}, 'Offline'), h('dd', { testid: 'offline' }, o.offline_partitions))),
    section('Brokers', table('brokers-table',
      ['Id', 'Host:port', 'Rack', { text: 'Partitions led', num: true }, { text: 'Replicas', num: true }],
      o.brokers.map((b) => [String(b.broker_id), `${b.host}:${b.port}`, b.rack || '',
        String(b.partitions_led), String(b.replicas)]))),
  ];
  if (o.quorum) {
    children.push(section('Metadata quorum', table('quorum-table',
      ['Node', 'Role', { text: 'Log end offset', num: true }, { text: 'Behind', num: true }],
      [...o.quorum.voters.map((r) => [String(r.node_id), r.node_id === o.quorum.leader_id ? 'leader' : 'voter',
        String(r.log_end_offset), String(r.lag)]),
       ...o.quorum.observers.map((r) => [String(r.node_id), 'observer', String(r.log_end_offset), String(r.lag)])])));
  } else {
    children.push(section('Metadata quorum', notice('quorum-unavailable', o.quorum_unavailable || 'not available')));
  }
  if (o.reassignments) {
    children.push(section('Reassignments in progress', table('reassignments-table',
      ['Topic', { text: 'Partition', num: true }, 'Replicas', 'Adding', 'Removing'],
      o.reassignments.map((r) => [r.topic_name, String(r.partition_id), r.replicas.join(', '),
        r.adding_replicas.join(', '), r.removing_replicas.join(', ')]), 'none')));
  }
  append(ctx.root, ...children);
}

// ---------------------------------------------------------------- page: topics

// "name=value" lines -> [{name, value}]; throws naming the bad line
function parseConfigLines(text) {
  const out = [];
  text.split('\n').forEach((line, i) => {
    const t = line.trim();
    if (!t || t.startsWith('#')) return;
    const eq = t.indexOf('=');
    if (eq <= 0) throw new Error(`config line ${i + 1} "${t}" is not name=value`);
    out.push({ name: t.slice(0, eq).trim(), value: t.slice(eq + 1).trim() });
  });
  return out;
}

const TOPIC_ROWS = 200;

async function pageTopics(ctx) {
  const listBox = h('div');
  const result = h('div');
  const name = h('input', { id: 'create-topic-name', testid: 'create-topic-name', required: true, placeholder: 'orders' });
  const parts = h('input', { id: 'create-topic-partitions', testid: 'create-topic-partitions', type: 'number', min: 1, value: '1' });
  const rf = h('input', { id: 'create-topic-rf', testid: 'create-topic-rf', type: 'number', min: 1, placeholder: 'default' });
  const configs = h('textarea', { id: 'create-topic-configs', testid: 'create-topic-configs', placeholder: 'retention.ms=86400000' });
  const form = h('form', { id: 'create-topic-form', testid: 'create-topic-form', class: 'inline' },
    h('label', {}, 'Name', name), h('label', {}, 'Partitions', parts),
    h('label', {}, 'Replication factor', rf), h('label', {}, 'Configs (name=value a line)', configs),
    h('button', { type: 'submit', class: 'primary', id: 'create-topic-submit', testid: 'create-topic-submit' }, 'Create topic'));

  // the list is fetched once; at most TOPIC_ROWS rows are drawn (a table of thousands
  // costs the browser more than the API), narrowed by the filter as it is typed
  const filter = h('input', { id: 'topics-filter', testid: 'topics-filter', placeholder: 'filter by name' });
  let all = [];
  function draw() {
    const wanted = filter.value.trim();
    const shown = all.filter((t) => !wanted || t.topic_name.includes(wanted));
    clear(listBox, table('topics-table', ['Topic', { text: 'Partitions', num: true }, { text: 'RF', num: true }, 'Internal'],
      shown.slice(0, TOPIC_ROWS).map((t) => [link('topics/' + enc(t.topic_name), t.topic_name),
        String(t.partitions_count), String(t.replication_factor), t.is_internal ? 'yes' : ''])),
      shown.length > TOPIC_ROWS
        ? notice('topics-more', `Showing ${TOPIC_ROWS} of ${shown.length} topics: filter by name to see others.`)
        : '');
  }
  filter.addEventListener('input', draw);
  async function load() {
    all = (await api.get(await api.cl('topics'))).data;
    draw();
  }

  onSubmit(form, async () => {
    clear(result);
    const topicName = name.value.trim();
    if (!topicName) throw new Error('a topic name is required');
    const body = { topic_name: topicName, configs: parseConfigLines(configs.value) };
    const count = intInput(parts, 'partitions', { min: 1 });
    const factor = intInput(rf, 'replication factor', { min: 1 });
    if (count !== null) body.partitions_count = count;
    if (factor !== null) body.replication_factor = factor;
    const made = await api.call('POST', await api.cl('topics'), body);
    append(result, notice('create-topic-result',
      `Created ${made.topic_name}: ${made.partitions_count} partitions, RF ${made.replication_factor}.`));
    await load();
  });

  append(ctx.root, h('h1', {}, 'Topics'), section('Create a topic', form, result),
    section('All topics', filter, listBox));
  await load();
}

async function pageTopic(ctx, topic) {
  append(ctx.root, h('h1', {}, 'Topic ', h('span', { class: 'mono', testid: 'topic-name' }, topic)));
  const [info, partitions, configs] = await Promise.all([
    api.cl('topics', topic).then((p) => api.get(p)),
    api.cl('topics', topic, 'partitions').then((p) => api.get(p)),
    api.cl('topics', topic, 'configs').then((p) => api.get(p))]);
  const offsets = await Promise.all(partitions.data.map((p) =>
    api.cl('topics', topic, 'partitions', p.partition_id, 'offsets').then((u) => api.get(u))
      .catch(() => ({ beginning_offset: '?', end_offset: '?' }))));
  if (!ctx.alive) return;
  append(ctx.root,
    h('p', { class: 'muted' }, `${info.partitions_count} partitions, replication factor ${info.replication_factor}`),
    section('Partitions', table('topic-partitions-table',
      [{ text: 'Partition', num: true }, 'Leader', { text: 'Beginning offset', num: true }, { text: 'End offset', num: true }],
      partitions.data.map((p, i) => [String(p.partition_id), p.leader ? `broker ${lastSegment(p.leader)}` : 'none',
        String(offsets[i].beginning_offset), String(offsets[i].end_offset)]))),
    recordBrowser(ctx, topic, partitions.data.map((p) => p.partition_id), { title: 'Records' }),
    section('Configs', table('topic-configs-table', ['Name', 'Value', 'Source'],
      configs.data.map((c) => [h('span', { class: 'mono' }, c.name),
        c.is_sensitive ? '(sensitive)' : (c.value === null ? '' : c.value), c.source]))));
}

// A record browser over one partition at a time: start at an offset or a
// time, a limit, a filter; "Next page" follows metadata.next. With
// `selectable`, each row has a checkbox (the dead-letter page).
function recordBrowser(ctx, topic, partitionIds, { title, selectable = false, prefix = 'records' } = {}) {
  const id = (s) => `${prefix}-${s}`;
  const partition = h('select', { id: id('partition'), testid: id('partition') },
    partitionIds.map((p) => h('option', { value: String(p) }, String(p))));
  const mode = h('select', { id: id('start-mode'), testid: id('start-mode') },
    h('option', { value: 'offset' }, 'at offset'), h('option', { value: 'time' }, 'at time'));
  const offset = h('input', { id: id('offset'), testid: id('offset'), type: 'number', min: 0, placeholder: 'beginning' });
  const when = h('input', { id: id('time'), testid: id('time'), type: 'datetime-local', step: 1 });
  const limit = h('input', { id: id('limit'), testid: id('limit'), type: 'number', min: 1, max: 1000, value: '20' });
  const filter = h('input', { id: id('filter'), testid: id('filter'), placeholder: "color = 'red'", size: 28 });
  const next = h('button', { type: 'button', id: id('next'), testid: id('next'), disabled: true }, 'Next page');
  const status = h('div', { class: 'muted', id: id('status'), testid: id('status') });
  const out = h('div', { id: id('results') });
  let nextUrl = null;
  let asked = 0; // only the answer to the latest request is shown
  const state = { partition: null, rows: [] };

  const form = h('form', { id: id('form'), testid: id('form'), class: 'inline' },
    h('label', {}, 'Partition', partition), h('label', {}, 'Start', mode),
    h('label', {}, 'Offset', offset), h('label', {}, 'Time', when), h('label', {}, 'Limit', limit),
    h('label', {}, 'Filter (headers)', filter),
    h('button', { type: 'submit', class: 'primary', id: id('load'), testid: id('load') }, 'Load'), next);

  function render(page) {
    state.partition = page.partition_id;
    state.rows = page.data;
    nextUrl = page.metadata && page.metadata.next;
    next.disabled = !nextUrl;
    status.textContent = `partition ${page.partition_id}: offsets ${page.beginning_offset} to ${page.end_offset}, ` +
      `${page.data.length} shown, next offset ${page.next_offset}`;
    const headers = [{ text: 'Offset', num: true }, 'Timestamp', 'Key', 'Value', 'Headers'];
    const rows = page.data.map((r) => [String(r.offset), fmtTime(r.timestamp_ms),
      h('span', { class: 'mono' }, shown(r.key)), h('span', { class: 'mono' }, shown(r.value)), headersCell(r.headers)]);
    if (selectable) {
      headers.unshift('');
      rows.forEach((row, i) => row.unshift(h('input', { type: 'checkbox', class: 'pick',
        testid: 'pick', dataset: { offset: String(page.data[i].offset), partition: String(page.partition_id) } })));
    }
    clear(out, table(id('table'), headers, rows, 'no records'));
    out.querySelectorAll(`#${id('table')} td:nth-child(${selectable ? 5 : 4})`).forEach((td) => td.classList.add('wrap'));
  }

  async function show(path) {
    const mine = ++asked;
    const page = await api.get(path);
    if (ctx.alive && mine === asked) render(page);
  }

  onSubmit(form, async () => {
    const params = new URLSearchParams();
    const lim = intInput(limit, 'limit', { min: 1 });
    params.set('limit', String(lim === null ? 20 : lim));
    if (mode.value === 'time') {
      if (!when.value) throw new Error('pick a time to start at');
      params.set('timestamp', String(new Date(when.value).getTime()));
    } else {
      const start = intInput(offset, 'offset', { min: 0 });
      if (start !== null) params.set('offset', String(start));
    }
    if (filter.value.trim()) params.set('filter', filter.value.trim());
    const base = await api.cl('topics', topic, 'partitions', partition.value, 'records');
    await show(`${base}?${params}`);
  });

  next.addEventListener('click', async () => {
    if (!nextUrl) return;
    clearError();
    try { await show(sameOrigin(nextUrl)); } catch (e) { showError(e); }
  });
  // the first page of the first partition, at once
  if (partitionIds.length) {
    api.cl('topics', topic, 'partitions', partitionIds[0], 'records')
      .then((base) => show(`${base}?limit=20`)).catch((e) => ctx.fail(e));
  }

  const box = section(title, form, status, out);
  box.browser = {
    state,
    selected: () => [...out.querySelectorAll('input.pick:checked')].map((c) => Number(c.dataset.offset)),
  };
  return box;
}

// ---------------------------------------------------------------- page: consumer groups

async function pageGroups(ctx) {
  // one request, whatever the number of groups: members are on a group's own page
  const groups = await api.get(await api.cl('consumer-groups'));
  if (!ctx.alive) return;
  append(ctx.root, h('h1', {}, 'Consumer groups'), section(null, table('groups-table',
    ['Group', 'State', 'Assignor', 'Coordinator'],
    groups.data.map((g) => [link('groups/' + enc(g.consumer_group_id), g.consumer_group_id),
      g.state, g.is_simple ? '(simple: offsets only)' : g.partition_assignor,
      `broker ${lastSegment(g.coordinator)}`]), 'no consumer groups')));
}

async function pageGroup(ctx, group) {
  const [info, consumers] = await Promise.all([
    api.cl('consumer-groups', group).then((p) => api.get(p)),
    api.cl('consumer-groups', group, 'consumers').then((p) => api.get(p))]);
  const lagBox = h('div');
  const chartBox = h('div');
  const history = new Map();
  append(ctx.root,
    h('h1', {}, 'Consumer group ', h('span', { class: 'mono' }, group)),
    h('p', { class: 'muted', testid: 'group-state' }, `${info.state}, assignor ${info.partition_assignor || '-'}, ` +
      `coordinator broker ${lastSegment(info.coordinator)}`),
    section('Members', table('group-members-table', ['Consumer id', 'Client id', 'Instance id'],
      consumers.data.map((m) => [h('span', { class: 'mono' }, m.consumer_id), m.client_id, m.instance_id || '']),
      'no members')),
    section('Lag per partition', lagBox),
    section('Lag over time (every 5 s, last 60 points)', chartBox));

  await ctx.every(5000, async () => {
    const lags = await api.get(await api.cl('consumer-groups', group, 'lags'));
    if (!ctx.alive) return;
    const now = Date.now();
    pushPoint(history, 'total', now, lags.data.reduce((sum, l) => sum + l.lag, 0));
    for (const l of lags.data.slice(0, 7)) pushPoint(history, `${l.topic_name}-${l.partition_id}`, now, l.lag);
    clear(lagBox, table('group-lags-table',
      ['Topic', { text: 'Partition', num: true }, { text: 'Committed', num: true }, { text: 'Log end', num: true },
        { text: 'Lag', num: true }, 'Consumer'],
      lags.data.map((l) => [l.topic_name, String(l.partition_id), String(l.current_offset),
        String(l.log_end_offset), String(l.lag), h('span', { class: 'mono' }, l.consumer_id)]),
      'no committed offsets'));
    clear(chartBox, lineChart('lag-chart', [...history].map(([name, points]) => ({ name, points }))));
  });
}

// ---------------------------------------------------------------- page: share groups

async function pageShareGroups(ctx) {
  const groups = await api.get(await api.cl('share-groups'));
  if (!ctx.alive) return;
  append(ctx.root, h('h1', {}, 'Share groups'), section(null, table('share-groups-table',
    ['Group', 'State', { text: 'Members', num: true }, 'Coordinator'],
    groups.data.map((g) => [link('share-groups/' + enc(g.group_id), g.group_id), g.state,
      String(Array.isArray(g.members) ? g.members.length : g.members), `broker ${lastSegment(g.coordinator)}`]),
    'no share groups')));
}

async function pageShareGroup(ctx, group) {
  const g = await api.get(await api.cl('share-groups', group));
  if (!ctx.alive) return;
  const now = Date.now();
  const inFlight = g.partitions.flatMap((p) => (p.in_flight || []).map((run) => [
    p.topic_name, String(p.partition_id), String(run.first_offset), String(run.last_offset), run.state,
    String(run.delivery_count), h('span', { class: 'mono' }, run.member_id || ''),
    run.lock_deadline_ms ? `${fmtTime(run.lock_deadline_ms)} (${Math.round((run.lock_deadline_ms - now) / 1000)} s)` : '']));
  const counts = (p, k) => String((p.counts || {})[k] ?? 0);
  append(ctx.root,
    h('h1', {}, 'Share group ', h('span', { class: 'mono' }, group)),
    h('p', { class: 'muted', testid: 'share-group-state' }, `${g.state}, coordinator broker ${lastSegment(g.coordinator)}`),
    section('Members', table('share-members-table', ['Member id', 'Client id', 'Assignments'],
      g.members.map((m) => [h('span', { class: 'mono' }, m.member_id), m.client_id,
        (m.assignments || []).map((a) => `${a.topic_name}-${a.partition_id}`).join(', ')]), 'no members')),
    section('Partitions', table('share-partitions-table',
      ['Topic', { text: 'Partition', num: true }, 'Broker', { text: 'Start offset', num: true },
        { text: 'Available', num: true }, { text: 'Acquired', num: true },
        { text: 'Acknowledged', num: true }, { text: 'Archived', num: true }],
      g.partitions.map((p) => [p.topic_name, String(p.partition_id), String(p.broker_id), String(p.start_offset),
        counts(p, 'available'), counts(p, 'acquired'), counts(p, 'acknowledged'), counts(p, 'archived')]),
      'no partitions')),
    section('In flight', table('share-inflight-table',
      ['Topic', { text: 'Partition', num: true }, { text: 'First offset', num: true }, { text: 'Last offset', num: true },
        'State', { text: 'Delivery count', num: true }, 'Member', 'Lock until'], inFlight, 'nothing in flight')));
}

// ---------------------------------------------------------------- page: delayed records

async function pageDelayed(ctx) {
  const topicFilter = h('input', { id: 'scheduled-topic', testid: 'scheduled-topic', placeholder: 'all topics' });
  const filterForm = h('form', { id: 'scheduled-filter-form', testid: 'scheduled-filter-form', class: 'inline' },
    h('label', {}, 'Topic', topicFilter),
    h('button', { type: 'submit', id: 'scheduled-apply', testid: 'scheduled-apply' }, 'Show'));
  const listBox = h('div');
  const cTopic = h('input', { id: 'cancel-topic', testid: 'cancel-topic', placeholder: 'topic' });
  const cId = h('input', { id: 'cancel-schedule-id', testid: 'cancel-schedule-id', placeholder: 'kc-schedule-id' });
  const cPart = h('input', { id: 'cancel-partition', testid: 'cancel-partition', type: 'number', min: 0, placeholder: 'all' });
  const cResult = h('div');
  const cancelForm = h('form', { id: 'cancel-form', testid: 'cancel-form', class: 'inline' },
    h('label', {}, 'Topic', cTopic), h('label', {}, 'Schedule id', cId), h('label', {}, 'Partition (optional)', cPart),
    h('button', { type: 'submit', class: 'danger', id: 'cancel-submit', testid: 'cancel-submit' }, 'Cancel delivery'));

  async function load() {
    const topic = topicFilter.value.trim();
    const base = await api.cl('scheduled');
    const list = await api.get(topic ? `${base}?topic=${enc(topic)}` : base);
    if (!ctx.alive) return;
    const busy = list.schedule_partitions.filter((s) => s.pending || s.overdue_s);
    const idle = list.schedule_partitions.length - busy.length;
    clear(listBox,
      h('p', {}, 'Pending: ', h('strong', { id: 'scheduled-total', testid: 'scheduled-total' }, String(list.pending))),
      h('h2', {}, 'Per topic-partition'),
      table('scheduled-table', ['Topic', { text: 'Partition', num: true }, { text: 'Pending', num: true },
        { text: 'Schedule partition', num: true }, 'Broker'],
      list.data.map((t) => [t.topic_name, String(t.partition_id), String(t.pending),
        String(t.schedule_partition), String(t.broker_id)]), 'nothing pending'),
      h('h2', {}, 'Per schedule partition'),
      table('schedule-partitions-table', [{ text: 'Schedule partition', num: true }, 'Broker',
        { text: 'Pending', num: true }, 'Earliest due', { text: 'Overdue (s)', num: true }],
      busy.map((s) => [String(s.schedule_partition), String(s.broker_id), String(s.pending),
        s.earliest_due_ms === null ? '' : fmtTime(s.earliest_due_ms), s.overdue_s ? String(s.overdue_s) : '']),
      'nothing pending'),
      h('p', { class: 'muted' }, idle ? `${idle} schedule partition(s) with nothing pending not shown.` : ''));
  }

  onSubmit(filterForm, load);
  onSubmit(cancelForm, async () => {
    clear(cResult);
    const topic = cTopic.value.trim();
    if (!topic) throw new Error('name the topic of the delayed record');
    const body = { schedule_id: cId.value.trim() };
    const partition = intInput(cPart, 'partition', { min: 0 });
    if (partition !== null) body.partition_id = partition;
    const done = await api.call('POST', await api.cl('topics', topic, 'scheduled:cancel'), body);
    append(cResult, notice('cancel-result',
      `Cancelled schedule id ${done.schedule_id} of ${done.topic_name} (partitions ${done.partitions.join(', ')}).`));
    await load();
  });

  append(ctx.root, h('h1', {}, 'Delayed records'), section(null, filterForm, listBox),
    section('Cancel a delayed record', cancelForm, cResult));
  await load();
}

// ---------------------------------------------------------------- page: dead letters

async function pageDeadLetters(ctx) {
  const list = await api.get(await api.cl('dead-letters'));
  if (!ctx.alive) return;
  append(ctx.root, h('h1', {}, 'Dead letters'), section(null, table('dlq-table',
    ['Dead-letter topic', 'Original topic', { text: 'Records', num: true }, { text: 'Partitions', num: true }],
    list.data.map((t) => [link('dlq/' + enc(t.topic_name), t.topic_name), t.original_topic,
      String(t.records), String(t.partitions.length)]), 'no dead-letter topics')));
}

// the rows of a replay or purge answer
function planTable(kind, answer) {
  if (kind === 'purge') {
    return table('dlq-plan-table', [{ text: 'Partition', num: true }, { text: 'Records', num: true },
      { text: 'Deleted before offset', num: true }],
    answer.data.map((r) => [String(r.partition_id), String(r.records), String(r.deleted_before)]));
  }
  return table('dlq-plan-table', [{ text: 'Partition', num: true }, { text: 'Offset', num: true }, 'To topic',
    { text: 'To partition', num: true }, { text: 'Replayed offset', num: true }, 'Result'],
  answer.data.map((r) => [String(r.partition_id), String(r.offset), r.to_topic,
    r.to_partition === null || r.to_partition === undefined ? 'by key' : String(r.to_partition),
    r.replayed_offset === undefined ? '' : String(r.replayed_offset),
    r.error_code === undefined ? (answer.executed ? '' : 'dry run') : (r.error_code === 200 ? 'ok' : `${r.error_code} ${r.message || ''}`)]),
  'nothing to replay');
}

async function pageDeadLetterTopic(ctx, topic) {
  const parts = await api.get(await api.cl('topics', topic, 'partitions'));
  if (!ctx.alive) return;
  const browser = recordBrowser(ctx, topic, parts.data.map((p) => p.partition_id),
    { title: 'Records', selectable: true, prefix: 'dlq-records' });
  const to = h('input', { id: 'dlq-replay-to', testid: 'dlq-replay-to', placeholder: 'original topic' });
  const planBox = h('div', { id: 'dlq-plan', testid: 'dlq-plan' });
  const actions = h('div', { class: 'inline' },
    h('label', {}, 'Replay into (optional) ', to), ' ',
    h('button', { type: 'button', class: 'primary', id: 'dlq-replay', testid: 'dlq-replay', onclick: () => dryRun('replay') },
      'Replay selected…'), ' ',
    h('button', { type: 'button', class: 'danger', id: 'dlq-purge', testid: 'dlq-purge', onclick: () => dryRun('purge') },
      'Purge all…'));

  // the request body of a replay of the selected rows, or of a purge
  function body(kind) {
    if (kind === 'purge') return {};
    const offsets = browser.browser.selected();
    if (!offsets.length) throw new Error('Select the records to replay (load a page of records, tick their boxes).');
    const doc = { partition_id: browser.browser.state.partition, offsets };
    if (to.value.trim()) doc.to = to.value.trim();
    return doc;
  }

  async function dryRun(kind) {
    clearError();
    clear(planBox);
    try {
      const doc = body(kind);
      const path = await api.cl('dead-letters', `${topic}:${kind}`);
      const plan = await api.call('POST', path, Object.assign({}, doc, { execute: false }));
      if (!ctx.alive) return;
      const verb = kind === 'purge' ? 'Purge' : 'Replay';
      const confirm = h('button', { type: 'button', class: 'danger', id: 'dlq-confirm', testid: 'dlq-confirm',
        disabled: plan.records === 0 }, `${verb} ${plan.records} record(s) now`);
      const cancel = h('button', { type: 'button', id: 'dlq-plan-cancel', testid: 'dlq-plan-cancel',
        onclick: () => clear(planBox) }, 'Cancel');
      confirm.addEventListener('click', async () => {
        clearError();
        confirm.disabled = true;
        try {
          const done = await api.call('POST', path, Object.assign({}, doc, { execute: true }));
          const failed = (done.data || []).filter((r) => r.error_code !== undefined && r.error_code !== 200);
          clear(planBox, notice('dlq-done', failed.length
            ? `${verb} done with ${failed.length} error(s) of ${done.records}.`
            : `${verb} done: ${done.records} record(s).`), planTable(kind, done));
          if (failed.length) showError(`${failed[0].error_code}: ${failed[0].message || 'replay failed'}`);
        } catch (e) { showError(e); confirm.disabled = false; }
      });
      clear(planBox, h('p', { testid: 'dlq-dry-run', id: 'dlq-dry-run' },
        `Dry run: ${plan.records} record(s) would be ${kind === 'purge' ? 'deleted' : 'replayed as below'}. Nothing has changed yet.`),
      planTable(kind, plan), confirm, ' ', cancel);
    } catch (e) { showError(e); }
  }

  append(ctx.root, h('h1', {}, 'Dead letters of ', h('span', { class: 'mono' }, topic)),
    browser, section('Replay or purge', actions, planBox));
}

// ---------------------------------------------------------------- page: dedup & views

async function pageDedupViews(ctx) {
  const dedupBox = h('div');
  const viewsBox = h('div');
  append(ctx.root, h('h1', {}, 'Dedup & views'), section('Deduplication windows', dedupBox),
    section('Filtered views', viewsBox));
  const errors = [];
  const [dedup, views] = await Promise.all([
    api.cl('dedup').then((p) => api.get(p)).catch((e) => { errors.push(e); return null; }),
    api.cl('views').then((p) => api.get(p)).catch((e) => { errors.push(e); return null; })]);
  if (!ctx.alive) return;
  if (dedup) {
    append(dedupBox, table('dedup-table', ['Topic', { text: 'Window (ms)', num: true },
      { text: 'Ids in window', num: true }, { text: 'Duplicates dropped', num: true }],
    dedup.data.map((d) => [d.topic_name, String(d.window_ms), String(d.window_ids), String(d.duplicates_dropped)]),
    'no topic deduplicates'));
  }
  if (views) {
    append(viewsBox, table('views-table', ['View', 'Source topic', 'Filter',
      { text: 'Matched', num: true }, { text: 'Filtered out', num: true }],
    views.data.map((v) => [v.view_name, v.source_topic, h('code', {}, v.filter), String(v.matched), String(v.filtered)]),
    'no views'));
  }
  if (errors.length) showError(errors.map((e) => e.message + (e.status ? ` (HTTP ${e.status})` : '')).join('\n'));
}

// ---------------------------------------------------------------- page: charts

// Prometheus text -> [{name, labels, value}] of the metric names wanted
function parseMetrics(text, wanted) {
  const out = [];
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})?\s+(\S+)/.exec(line);
    if (!m || !wanted.includes(m[1])) continue;
    const labels = {};
    for (const l of (m[2] || '').matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) labels[l[1]] = l[2].replace(/\\(.)/g, '$1');
    out.push({ name: m[1], labels, value: Number(m[3]) });
  }
  return out;
}

async function pageCharts(ctx) {
  const IN = 'kcompat_topic_bytes_in_total';
  const OUT = 'kcompat_topic_bytes_out_total';
  const boxes = { [IN]: h('div'), [OUT]: h('div') };
  const tableBox = h('div');
  const history = { [IN]: new Map(), [OUT]: new Map() };
  let previous = null; // {t, values: Map "name|topic" -> bytes}
  append(ctx.root, h('h1', {}, 'Throughput'),
    h('p', { class: 'muted' }, 'Bytes per second per topic on this broker, from /metrics every 5 s (last 60 points).'),
    h('div', { class: 'row' }, section('In', boxes[IN]), section('Out', boxes[OUT])), section('Now', tableBox));

  await ctx.every(5000, async () => {
    const samples = parseMetrics(await api.metrics(), [IN, OUT]);
    if (!ctx.alive) return;
    const t = Date.now();
    const values = new Map(samples.map((s) => [`${s.name}|${s.labels.topic}`, s.value]));
    const rates = [];
    if (previous) {
      const dt = (t - previous.t) / 1000;
      for (const [key, v] of values) {
        const [name, topic] = key.split('|');
        const before = previous.values.get(key);
        const rate = before === undefined || v < before ? 0 : (v - before) / dt;
        pushPoint(history[name], topic, t, rate);
        rates.push([name, topic, rate]);
      }
    }
    previous = { t, values };
    for (const name of [IN, OUT]) {
      // the 8 busiest topics of the window
      const busiest = [...history[name]].map(([topic, points]) => ({ name: topic, points }))
        .sort((a, b) => Math.max(...b.points.map((p) => p[1])) - Math.max(...a.points.map((p) => p[1])))
        .slice(0, 8);
      clear(boxes[name], lineChart(name === IN ? 'chart-in' : 'chart-out', busiest, { fmt: (v) => fmtBytes(v) + '/s' }));
    }
    const byTopic = new Map();
    for (const [name, topic, rate] of rates) {
      if (!byTopic.has(topic)) byTopic.set(topic, [0, 0]);
      byTopic.get(topic)[name === IN ? 0 : 1] = rate;
    }
    clear(tableBox, table('charts-table', ['Topic', { text: 'In', num: true }, { text: 'Out', num: true }],
      [...byTopic].sort((a, b) => a[0].localeCompare(b[0]))
        .map(([topic, [i, o]]) => [topic, fmtBytes(i) + '/s', fmtBytes(o) + '/s']),
      previous && rates.length ? 'no topics' : 'measuring… (two scrapes needed)'));
  });
}

// ---------------------------------------------------------------- start

route();
