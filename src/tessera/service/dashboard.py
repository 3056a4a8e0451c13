"""The web dashboard the API serves at ``/``: one static page that polls the API.

Panels: the cluster map (every GPU by node and type, coloured by the job holding it), the queue (state,
pending reason, GPUs, progress), per-job loss and throughput curves, the allocation timeline (which GPUs
each job held when, rescales and migrations visible as bar changes), and estimated vs measured iteration time
per allocation. Plain JavaScript drawing SVG — nothing to fetch from the network, so it works on an
air-gapped cluster — kept in this module so it ships inside any install of the package.
"""

INDEX_HTML = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Tessera</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="stylesheet" href="/dashboard/style.css">
</head>
<body>
<header>
  <h1>Tessera</h1>
  <span id="meta" class="muted"></span>
  <span id="status" class="muted"></span>
</header>
<div id="login" hidden>
  <label>Token <input id="token" type="password" autocomplete="off"></label>
  <button id="save-token">Use token</button>
</div>
<main>
  <section id="cluster-panel">
    <h2>Cluster</h2>
    <div id="by-type" class="chips"></div>
    <div id="cluster-map" class="nodes"></div>
  </section>
  <section id="queue-panel">
    <h2>Jobs</h2>
    <table id="queue">
      <thead><tr><th>id</th><th>name</th><th>state</th><th>reason</th><th>GPUs</th><th>Cell</th>
      <th>progress</th><th>loss</th><th>rescales</th></tr></thead>
      <tbody></tbody>
    </table>
  </section>
  <section id="charts-panel">
    <h2>Training curves <span class="muted">(every job; click a row above to focus)</span></h2>
    <div class="charts">
      <figure><figcaption>loss</figcaption><svg id="loss-chart" class="chart" viewBox="0 0 560 220"></svg></figure>
      <figure><figcaption>throughput (samples/s)</figcaption>
        <svg id="throughput-chart" class="chart" viewBox="0 0 560 220"></svg></figure>
      <figure><figcaption>iteration time (s)</figcaption>
        <svg id="iter-chart" class="chart" viewBox="0 0 560 220"></svg></figure>
      <figure><figcaption>peak memory per device (MiB)</figcaption>
        <svg id="memory-chart" class="chart" viewBox="0 0 560 220"></svg></figure>
    </div>
    <div id="legend" class="chips"></div>
  </section>
  <section id="timeline-panel">
    <h2>Allocation timeline</h2>
    <svg id="timeline" class="chart" viewBox="0 0 1140 120"></svg>
  </section>
  <section id="estimates-panel">
    <h2>Estimated vs measured iteration time (a step of progress: training step + loop)</h2>
    <svg id="estimate-chart" class="chart" viewBox="0 0 1140 200"></svg>
    <table id="estimates">
      <thead><tr><th>job</th><th>attempt</th><th>kind</th><th>Cell</th><th>plan</th>
      <th>estimated ms</th><th>estimate corrected by</th><th>measured step ms</th><th>measured ÷ estimated</th></tr></thead>
      <tbody></tbody>
    </table>
  </section>
</main>
<script src="/dashboard/app.js"></script>
</body>
</html>
"""

STYLE_CSS = """
:root { --fg: #1d2330; --muted: #6b7385; --line: #d9dde6; --bg: #f7f8fb; --card: #fff; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.4 system-ui, sans-serif; color: var(--fg); background: var(--bg); }
header { display: flex; gap: 1.5em; align-items: baseline; padding: .8em 1.5em; background: #1d2330; color: #fff; }
header h1 { margin: 0; font-size: 1.3em; }
header .muted { color: #aeb6c8; }
main { display: grid; grid-template-columns: 1fr; gap: 1em; padding: 1em 1.5em; max-width: 1200px; }
section { background: var(--card); border: 1px solid var(--line); border-radius: 8px; padding: .8em 1em; }
h2 { margin: 0 0 .6em; font-size: 1.05em; }
.muted { color: var(--muted); font-weight: normal; }
.chips { display: flex; flex-wrap: wrap; gap: .5em; margin-bottom: .6em; }
.chip { border: 1px solid var(--line); border-radius: 12px; padding: .1em .7em; font-size: .9em; }
.nodes { display: flex; flex-wrap: wrap; gap: .8em; }
.node { border: 1px solid var(--line); border-radius: 6px; padding: .5em .7em; min-width: 11em; }
.node.dead { opacity: .45; border-style: dashed; }
.node-name { font-weight: 600; }
.gpus { display: flex; gap: .35em; margin-top: .4em; }
.gpu { width: 3.2em; height: 3.2em; border-radius: 5px; border: 1px solid #b8bfcc; background: #eef0f4;
       display: flex; align-items: center; justify-content: center; font-size: .75em; text-align: center; }
.gpu.held { color: #fff; border-color: transparent; }
table { border-collapse: collapse; width: 100%; }
th, td { text-align: left; padding: .3em .5em; border-bottom: 1px solid var(--line); white-space: nowrap; }
tbody tr { cursor: pointer; }
tbody tr.selected { background: #eef3ff; }
.state { font-weight: 600; }
.state-RUNNING { color: #137a3a; } .state-PENDING { color: #9a6a00; } .state-FAILED { color: #b3261e; }
.state-SUCCEEDED { color: #2f5fb3; } .state-CANCELLED { color: var(--muted); }
.state-RESIZING, .state-MIGRATING, .state-RECOVERING, .state-STARTING { color: #7b3fb3; }
.bar { width: 8em; height: .7em; background: #eef0f4; border-radius: 4px; overflow: hidden; display: inline-block; }
.bar > span { display: block; height: 100%; background: #3b7be0; }
.charts { display: grid; grid-template-columns: 1fr 1fr; gap: 1em; }
figure { margin: 0; }
figcaption { color: var(--muted); font-size: .9em; }
.chart { width: 100%; height: auto; background: #fff; }
.chart text { font-size: 11px; fill: var(--muted); }
.chart .axis { stroke: #b8bfcc; }
.chart .series { fill: none; stroke-width: 1.8; }
"""

APP_JS = r"""
'use strict';
const PALETTE = ['#3b7be0', '#e0663b', '#2e9e5b', '#9b59b6', '#d4a017', '#17a2b8', '#c0392b', '#7f8c8d',
                 '#8e44ad', '#16a085'];
const TYPE_COLORS = {};
const state = { jobs: [], selected: null, telemetry: {}, cluster: null, timeline: null };
const $ = (sel) => document.querySelector(sel);
const svgNS = 'http://www.w3.org/2000/svg';

function token() { return sessionStorage.getItem('tessera-token') || new URLSearchParams(location.search).get('token'); }

async function api(path) {
  const headers = {};
  const t = token();
  if (t) headers['Authorization'] = 'Bearer ' + t;
  const r = await fetch('/api' + path, { headers });
  if (r.status === 401) { $('#login').hidden = false; throw new Error('token required'); }
  if (!r.ok) throw new Error(path + ': ' + r.status);
  return r.json();
}

function jobColor(id) { return PALETTE[(id - 1) % PALETTE.length]; }
function typeColor(t) {
  if (!(t in TYPE_COLORS)) TYPE_COLORS[t] = ['#5b8def', '#f0a35e', '#62b57e', '#b07cd8', '#e06b6b'][Object.keys(TYPE_COLORS).length % 5];
  return TYPE_COLORS[t];
}
function el(tag, attrs = {}, text) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}
function sv(tag, attrs = {}, text) {
  const e = document.createElementNS(svgNS, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}
function fmt(x, digits = 3) { return x === null || x === undefined ? '–' : Number(x).toPrecision(digits); }
// a factor to two significant figures without an exponent: ×120, not ×1.2e+2 (a loaded box measures steps 100× slow)
function fmtFactor(x) { return String(Number(Number(x).toPrecision(2))); }

function renderCluster(c) {
  $('#meta').textContent = `${c.name} · ${c.mode} Ray · policy ${c.policy} · round ${c.round_s} s`;
  const chips = $('#by-type'); chips.replaceChildren();
  for (const [t, v] of Object.entries(c.by_type)) {
    const chip = el('span', { class: 'chip', 'data-gpu-type': t }, `${t}: ${v.used}/${v.total} used, ${v.free} free`);
    chip.style.borderColor = typeColor(t);
    chips.append(chip);
  }
  const map = $('#cluster-map'); map.replaceChildren();
  for (const n of c.nodes) {
    const box = el('div', { class: 'node' + (n.alive ? '' : ' dead'), 'data-node': n.name });
    box.append(el('div', { class: 'node-name' }, n.name), el('div', { class: 'muted' }, `${n.n_gpus}× ${n.gpu_type}`));
    const g = el('div', { class: 'gpus' });
    for (const s of n.gpus) {
      const d = el('div', { class: 'gpu' + (s.job_id ? ' held' : ''), 'data-gpu-type': n.gpu_type,
                            title: s.job_id ? `job ${s.job_id} ${s.job_name}` : 'free' },
                   s.job_id ? `#${s.job_id}` : 'free');
      if (s.job_id) d.style.background = jobColor(s.job_id);
      g.append(d);
    }
    box.append(g); map.append(box);
  }
}

function renderQueue(jobs) {
  const tb = $('#queue tbody'); tb.replaceChildren();
  for (const j of jobs) {
    const tr = el('tr', { 'data-job': j.id });
    if (state.selected === j.id) tr.classList.add('selected');
    const gpus = Object.entries(j.gpus).map(([t, n]) => `${n}×${t}`).join(' + ') || '–';
    const pct = j.total_steps ? Math.min(100, 100 * j.steps_done / j.total_steps) : 0;
    const prog = el('td'); const bar = el('span', { class: 'bar' }); const fill = el('span'); fill.style.width = pct + '%';
    bar.append(fill); prog.append(bar, document.createTextNode(` ${j.steps_done}/${j.total_steps}`));
    const idCell = el('td'); const sw = el('span', {}, '■ '); sw.style.color = jobColor(j.id); idCell.append(sw, document.createTextNode(j.id));
    tr.append(idCell, el('td', {}, j.name), el('td', { class: 'state state-' + j.state }, j.state),
              el('td', { class: 'reason' }, j.reason || ''), el('td', {}, gpus), el('td', {}, j.cell || '–'), prog,
              el('td', {}, fmt(j.last_loss, 4)), el('td', {}, j.rescales));
    tr.addEventListener('click', () => { state.selected = state.selected === j.id ? null : j.id; refresh(); });
    tb.append(tr);
  }
}

function lineChart(svg, seriesList, yKey) {
  svg.replaceChildren();
  const W = 560, H = 220, L = 50, R = 10, T = 10, B = 28;
  const pts = seriesList.flatMap(s => s.points);
  if (!pts.length) { svg.append(sv('text', { x: W / 2, y: H / 2, 'text-anchor': 'middle' }, 'no steps yet')); return; }
  const xs = pts.map(p => p.step), ys = pts.map(p => p[yKey]);
  let x0 = Math.min(...xs), x1 = Math.max(...xs), y0 = Math.min(...ys), y1 = Math.max(...ys);
  if (x1 === x0) x1 = x0 + 1; if (y1 === y0) { y1 = y0 + 1e-9 + Math.abs(y0) * 0.05; y0 -= Math.abs(y0) * 0.05; }
  const X = x => L + (x - x0) / (x1 - x0) * (W - L - R), Y = y => H - B - (y - y0) / (y1 - y0) * (H - T - B);
  svg.append(sv('line', { class: 'axis', x1: L, y1: H - B, x2: W - R, y2: H - B }),
             sv('line', { class: 'axis', x1: L, y1: T, x2: L, y2: H - B }));
  for (let i = 0; i <= 4; i++) {
    const y = y0 + (y1 - y0) * i / 4;
    svg.append(sv('text', { x: L - 4, y: Y(y) + 4, 'text-anchor': 'end' }, fmt(y, 3)));
  }
  svg.append(sv('text', { x: W - R, y: H - 8, 'text-anchor': 'end' }, 'step ' + x1),
             sv('text', { x: L, y: H - 8 }, 'step ' + x0));
  for (const s of seriesList) {
    if (!s.points.length) continue;
    const d = s.points.map((p, i) => (i ? 'L' : 'M') + X(p.step).toFixed(1) + ' ' + Y(p[yKey]).toFixed(1)).join(' ');
    const attrs = { class: s.dashed ? 'series val' : 'series', d, stroke: s.color, 'data-job': s.id, 'data-points': s.points.length };
    if (s.dashed) attrs['stroke-dasharray'] = '5 3';
    svg.append(sv('path', attrs));
  }
}

function renderCharts() {
  const ids = state.selected ? [state.selected] : state.jobs.filter(j => j.steps_done > 0).map(j => j.id);
  const series = ids.map(id => ({ id, color: jobColor(id), points: (state.telemetry[id] || {}).steps || [] }));
  // a NaN/inf loss arrives as null (its kind in loss_nonfinite): no point on the loss curve, not a drop to 0
  // the held-out validation loss (jobs with a data split): the same colour, dashed, after the training curves
  const val = series.map(s => ({ ...s, dashed: true, points: s.points.filter(p => p.val_loss != null).map(p => ({ step: p.step, loss: p.val_loss })) }));
  lineChart($('#loss-chart'), series.map(s => ({ ...s, points: s.points.filter(p => p.loss !== null) })).concat(val.filter(s => s.points.length)), 'loss');
  lineChart($('#throughput-chart'), series, 'samples_per_s');
  lineChart($('#iter-chart'), series, 'iter_time_s');
  const mem = series.map(s => ({ ...s, points: s.points.map(p => ({ step: p.step, mib: p.peak_memory_bytes / 2 ** 20 })) }));
  lineChart($('#memory-chart'), mem, 'mib');
  const lg = $('#legend'); lg.replaceChildren();
  for (const s of series) {
    const j = state.jobs.find(x => x.id === s.id);
    const c = el('span', { class: 'chip' }, `#${s.id} ${j ? j.name : ''}`); c.style.borderColor = s.color; lg.append(c);
  }
}

function renderTimeline(tl) {
  const svg = $('#timeline'); svg.replaceChildren();
  const rows = [...new Set(tl.allocations.map(a => a.job_id))].sort((a, b) => a - b);
  const W = 1140, L = 140, R = 10, rowH = 22, T = 6;
  const H = Math.max(60, T + rows.length * rowH + 24);
  svg.setAttribute('viewBox', `0 0 ${W} ${H}`);
  if (!rows.length) { svg.append(sv('text', { x: W / 2, y: 30, 'text-anchor': 'middle' }, 'no allocations yet')); return; }
  const t0 = Math.min(...tl.allocations.map(a => a.started_at)), t1 = Math.max(tl.now, ...tl.allocations.map(a => a.ended_at || tl.now));
  const X = t => L + (t - t0) / Math.max(1e-6, t1 - t0) * (W - L - R);
  rows.forEach((jid, i) => {
    const name = (tl.allocations.find(a => a.job_id === jid) || {}).job_name || '';
    svg.append(sv('text', { x: 4, y: T + i * rowH + 15 }, `#${jid} ${name}`.slice(0, 22)));
  });
  for (const a of tl.allocations) {
    const i = rows.indexOf(a.job_id);
    const x = X(a.started_at), w = Math.max(2, X(a.ended_at || tl.now) - x);
    const types = [...new Set(a.gpus.map(g => g.gpu_type))];
    const g = sv('g', { class: 'alloc', 'data-job': a.job_id, 'data-kind': a.kind });
    const rect = sv('rect', { x, y: T + i * rowH + 2, width: w, height: rowH - 6, rx: 3, fill: typeColor(types[0] || '?'),
                              stroke: jobColor(a.job_id), 'stroke-width': 2 });
    rect.append(sv('title', {}, `${a.kind}: ${a.cell} (attempt ${a.attempt}) ${a.end_reason || 'running'}`));
    g.append(rect);
    if (w > 60) g.append(sv('text', { x: x + 4, y: T + i * rowH + 14, style: 'fill: #fff' }, `${a.kind} ${a.cell}`));
    svg.append(g);
  }
  svg.append(sv('text', { x: L, y: H - 4 }, new Date(t0 * 1000).toLocaleTimeString()),
             sv('text', { x: W - R, y: H - 4, 'text-anchor': 'end' }, new Date(t1 * 1000).toLocaleTimeString()));
}

// what a calibrated estimate predicts: a step of progress (training step + what the loop adds), where timed
const measuredOf = a => a.measured_step_s || a.measured_iter_s;

function renderEstimates(tl) {
  const rows = tl.allocations.filter(a => a.estimate_iter_s);
  const tb = $('#estimates tbody'); tb.replaceChildren();
  for (const a of rows) {
    const plan = a.stages.map(s => `[${s.layers[0]},${s.layers[1]}) ${s.dp}×${s.tp} ${s.gpu_types.join('+')}`).join(' → ');
    const ratio = measuredOf(a) ? (measuredOf(a) / a.estimate_iter_s) : null;
    tb.append(Object.assign(el('tr', { 'data-job': a.job_id }), {}));
    tb.lastChild.append(el('td', {}, `#${a.job_id}`), el('td', {}, a.attempt), el('td', {}, a.kind), el('td', {}, a.cell),
      el('td', {}, plan), el('td', { class: 'est' }, fmt(a.estimate_iter_s * 1e3, 3)),
      el('td', { class: 'basis' }, a.estimate_basis && a.speed_factor
        ? `×${fmtFactor(1 / a.speed_factor)} (${a.estimate_basis.replaceAll('_', ' ')})` : '–'),
      el('td', { class: 'meas' }, measuredOf(a) ? fmt(measuredOf(a) * 1e3, 3) : '–'),
      el('td', {}, ratio ? fmt(ratio, 3) + '×' : '–'));
  }
  const svg = $('#estimate-chart'); svg.replaceChildren();
  const done = rows.filter(a => measuredOf(a));
  const W = 1140, H = 200, L = 60, B = 40, T = 10;
  if (!done.length) { svg.append(sv('text', { x: W / 2, y: H / 2, 'text-anchor': 'middle' }, 'no measured allocation yet')); return; }
  const vals = done.flatMap(a => [a.estimate_iter_s, measuredOf(a)]);
  const lo = Math.log10(Math.min(...vals)) - 0.2, hi = Math.log10(Math.max(...vals)) + 0.2;
  const Y = v => H - B - (Math.log10(v) - lo) / (hi - lo) * (H - T - B);
  const bw = Math.min(40, (W - L) / done.length / 2.5);
  svg.append(sv('line', { class: 'axis', x1: L, y1: H - B, x2: W, y2: H - B }));
  const ms = v => { const x = v * 1e3; return (x >= 1 ? x.toFixed(0) : x.toPrecision(1)) + ' ms'; };
  for (let e = Math.ceil(lo); e <= Math.floor(hi); e++) svg.append(sv('text', { x: L - 4, y: Y(10 ** e) + 4, 'text-anchor': 'end' }, ms(10 ** e)));
  done.forEach((a, i) => {
    const x = L + 10 + i * bw * 2.5;
    svg.append(sv('rect', { class: 'bar-est', x, y: Y(a.estimate_iter_s), width: bw, height: H - B - Y(a.estimate_iter_s), fill: '#b8c7ec' }),
               sv('rect', { class: 'bar-meas', x: x + bw, y: Y(measuredOf(a)), width: bw, height: H - B - Y(measuredOf(a)), fill: jobColor(a.job_id) }),
               sv('text', { x: x, y: H - B + 14 }, `#${a.job_id}.${a.attempt}`));
  });
  svg.append(sv('text', { x: W - 10, y: 20, 'text-anchor': 'end' }, 'light: estimated · dark: measured (log scale)'));
}

async function refresh() {
  try {
    const [cluster, list, tl] = await Promise.all([api('/cluster'), api('/jobs?limit=200'), api('/timeline')]);
    state.cluster = cluster; state.jobs = list.jobs; state.timeline = tl;
    renderCluster(cluster); renderQueue(list.jobs);
    const want = state.selected ? [state.selected] : list.jobs.filter(j => j.steps_done > 0).slice(-8).map(j => j.id);
    await Promise.all(want.map(async id => { state.telemetry[id] = await api(`/jobs/${id}/telemetry?max_points=300`); }));
    renderCharts(); renderTimeline(tl); renderEstimates(tl);
    $('#status').textContent = 'updated ' + new Date().toLocaleTimeString();
    document.body.dataset.ready = '1';
  } catch (e) {
    $('#status').textContent = String(e);
  }
}

$('#save-token').addEventListener('click', () => {
  sessionStorage.setItem('tessera-token', $('#token').value); $('#login').hidden = true; refresh();
});
refresh();
setInterval(refresh, 2000);
"""
