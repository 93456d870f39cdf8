// The analytics view's charts, drawn in SVG.

import { $, h, svg } from './dom.js';
import { dur, durTick, num, clock } from './format.js';
import { state } from './state.js';
import { SERIES, an } from './analytics.js';

function intervalText(t, res) {
  const step = SERIES[res].stepMs;
  return res === 'minute' ? clock(t, true) : `${clock(t, true)}–${clock(t + step)}`;
}

// shownPoints drops the intervals still to come: the window runs to the
// end of the current hour.
function shownPoints(r) {
  const now = Math.max(Date.now(), r.generatedAt);
  return r.series.points.filter((p) => p.t <= now);
}

export function renderCharts() {
  const r = an.data;
  if (!r || $('an-body').hidden) return;
  const res = r.series.resolution === 'minute' ? 'minute' : 'hour';
  const points = shownPoints(r);
  an.width = $('chart-decisions-plot').clientWidth;
  drawDecisions($('chart-decisions-plot'), points, res);
  drawResponse($('chart-response-plot'), points, res);
  legend('legend-decisions', [['approved', 'Approved'], ['rejected', 'Rejected'], ['timedout', 'Timed out']]);
  legend('legend-response', res === 'hour'
    ? [['p50', 'Median (p50)'], ['p90', 'p90']]
    : [['mean', 'Mean (per minute)']]);
}

function legend(id, items) {
  $(id).replaceChildren(...items.map(([k, label]) => h('li', {}, h('span', { class: `swatch swatch-${k}`, 'aria-hidden': 'true' }), label)));
}

// frame is a chart's drawing area, sized to its container so that text
// is drawn at its real size.
function frame(el, points) {
  const W = Math.max(280, Math.floor(el.clientWidth || 600));
  const H = W < 520 ? 190 : 230;
  const m = { top: 14, right: 10, bottom: 26, left: 48 };
  const iw = W - m.left - m.right, ih = H - m.top - m.bottom;
  const band = iw / Math.max(1, points.length);
  return { W, H, m, iw, ih, band, x: (i) => m.left + i * band };
}

// niceStep is a round step that cuts max into about n parts.
function niceStep(max, n, steps) {
  const raw = max / n;
  if (steps) return steps.find((s) => s >= raw) || steps[steps.length - 1] * Math.ceil(raw / steps[steps.length - 1]);
  const mag = 10 ** Math.floor(Math.log10(raw));
  return [1, 2, 5, 10].map((k) => k * mag).find((s) => s >= raw);
}

// axes draws the value grid with its labels, and the time labels,
// spaced so that they do not collide.
function axes(f, points, res, top, step, fmt) {
  const g = svg('g', { class: 'axes' });
  for (let v = 0; v <= top + step / 2; v += step) {
    const y = f.m.top + f.ih - (v / top) * f.ih;
    g.append(svg('line', { class: v ? 'grid' : 'baseline', x1: f.m.left, x2: f.W - f.m.right, y1: y, y2: y }));
    g.append(svg('text', { class: 'tick', x: f.m.left - 6, y: y + 4, 'text-anchor': 'end' }, fmt(v)));
  }
  const every = (res === 'minute' ? [1, 2, 5, 10, 15, 30, 60] : [1, 2, 3, 4, 6, 12, 24]).find((k) => k * f.band >= 52) || 60;
  points.forEach((p, i) => {
    const d = new Date(p.t);
    const unit = res === 'minute' ? d.getHours() * 60 + d.getMinutes() : d.getHours();
    if (unit % every !== 0) return;
    const label = res === 'hour' && d.getHours() === 0
      ? d.toLocaleDateString(undefined, { month: 'short', day: 'numeric' })
      : clock(p.t);
    const x = f.x(i) + f.band / 2;
    if (x < f.m.left + 14 || x > f.W - f.m.right - 14) return;
    g.append(svg('text', { class: 'tick', x, y: f.H - 8, 'text-anchor': 'middle' }, label));
  });
  return g;
}

function emptyChart(f, text) {
  return svg('text', { class: 'chart-empty', x: f.m.left + f.iw / 2, y: f.m.top + f.ih / 2, 'text-anchor': 'middle' }, text);
}

// drawDecisions is a stacked bar per interval: approved at the bottom,
// then rejected, then timed out.
function drawDecisions(el, points, res) {
  const f = frame(el, points);
  const total = (p) => p.approved + p.rejected + p.timedOut;
  const max = Math.max(0, ...points.map(total));
  const step = Math.max(1, niceStep(Math.max(max, 1), 4));
  const top = Math.max(step, Math.ceil(max / step) * step);
  const decided = points.reduce((n, p) => n + total(p), 0);
  const root = svg('svg', { class: 'plot', viewBox: `0 0 ${f.W} ${f.H}`, width: f.W, height: f.H, role: 'img',
    'aria-label': `Decisions over ${SERIES[res].text}: ${decided} in all, ${points.filter((p) => total(p) > 0).length} ${res === 'hour' ? 'hours' : 'minutes'} with any.` });
  root.append(axes(f, points, res, top, step, (v) => num(v)));
  const w = Math.max(1, Math.min(f.band * 0.72, 42));
  const bars = svg('g', { class: 'bars' });
  points.forEach((p, i) => {
    const n = total(p);
    const col = svg('g', { class: 'col', 'data-t': p.t, 'data-decisions': n },
      svg('title', {}, `${intervalText(p.t, res)}: ${p.approved} approved, ${p.rejected} rejected, ${p.timedOut} timed out`),
      svg('rect', { class: 'hit', x: f.x(i), y: f.m.top, width: f.band, height: f.ih }));
    let y = f.m.top + f.ih;
    for (const [k, v] of [['approved', p.approved], ['rejected', p.rejected], ['timedout', p.timedOut]]) {
      if (!v) continue;
      const hgt = (v / top) * f.ih;
      y -= hgt;
      col.append(svg('rect', { class: `seg seg-${k}`, 'data-count': v, x: (f.x(i) + (f.band - w) / 2).toFixed(2), y: y.toFixed(2), width: w.toFixed(2), height: Math.max(0.5, hgt).toFixed(2) }));
    }
    bars.append(col);
  });
  root.append(bars);
  if (!decided) root.append(emptyChart(f, `No decisions in ${SERIES[res].text.split(',')[0]}`));
  el.replaceChildren(root);
}

// Steps for a time axis, in milliseconds: whole seconds, minutes, hours.
const TIME_STEPS = [100, 200, 500, 1e3, 2e3, 5e3, 1e4, 15e3, 3e4, 6e4, 12e4, 3e5, 6e5, 9e5, 18e5, 36e5, 72e5, 108e5, 216e5, 432e5, 864e5];

// drawResponse is the time to decide per interval: the median and p90
// of the hour, or the mean of the minute (the only figure kept per
// minute). Intervals without decisions have no point.
function drawResponse(el, points, res) {
  const f = frame(el, points);
  const lines = res === 'hour'
    ? [['p50', (p) => p.p50ResponseMs], ['p90', (p) => p.p90ResponseMs]]
    : [['mean', (p) => p.meanResponseMs]];
  const has = (p) => p.decisions > 0;
  const max = Math.max(0, ...points.filter(has).flatMap((p) => lines.map(([, v]) => v(p) || 0)));
  const step = niceStep(Math.max(max, 1000), 4, TIME_STEPS);
  const top = Math.max(step, Math.ceil(max / step) * step);
  const y = (v) => f.m.top + f.ih - (v / top) * f.ih;
  const cx = (i) => f.x(i) + f.band / 2;
  const root = svg('svg', { class: 'plot', viewBox: `0 0 ${f.W} ${f.H}`, width: f.W, height: f.H, role: 'img',
    'aria-label': `Time to decide over ${SERIES[res].text}.` });
  root.append(axes(f, points, res, top, step, durTick));
  for (const [k, v] of lines) {
    // A line joins neighbouring intervals only: a gap is a time nobody
    // decided anything, not a time decisions were quick.
    let d = '';
    points.forEach((p, i) => {
      if (!has(p) || !(v(p) >= 0)) return;
      const joined = i > 0 && has(points[i - 1]);
      d += `${joined ? 'L' : 'M'}${cx(i).toFixed(2)},${y(v(p)).toFixed(2)}`;
    });
    if (d) root.append(svg('path', { class: `line line-${k}`, d }));
  }
  const dots = svg('g', { class: 'points' });
  points.forEach((p, i) => {
    if (!has(p)) return;
    const what = res === 'hour'
      ? `median ${dur(p.p50ResponseMs)}, p90 ${dur(p.p90ResponseMs)}`
      : `mean ${dur(p.meanResponseMs)}`;
    const g = svg('g', { class: 'pt', 'data-t': p.t },
      svg('title', {}, `${intervalText(p.t, res)}: ${what} over ${p.decisions} ${p.decisions === 1 ? 'decision' : 'decisions'}`),
      svg('rect', { class: 'hit', x: f.x(i), y: f.m.top, width: f.band, height: f.ih }));
    for (const [k, v] of lines) g.append(svg('circle', { class: `dot dot-${k}`, cx: cx(i).toFixed(2), cy: y(v(p) || 0).toFixed(2), r: f.band < 6 ? 2 : 3.5 }));
    dots.append(g);
  });
  root.append(dots);
  if (!points.some(has)) root.append(emptyChart(f, `No decisions in ${SERIES[res].text.split(',')[0]}`));
  el.replaceChildren(root);
}

// The charts are drawn at their container's width: again when it changes.
new ResizeObserver(() => {
  if (state.view !== 'analytics' || !an.data) return;
  const w = $('chart-decisions-plot').clientWidth;
  if (w && Math.abs(w - an.width) > 2) renderCharts();
}).observe($('an-body'));
