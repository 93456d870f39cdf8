// The analytics view: the numbers, tables and recommendations.

import { $, h, announce, svg } from './dom.js';
import { pct, dur, money, num, clock } from './format.js';
import { state } from './state.js';
import { api } from './api.js';
import { showSignIn } from './session.js';
import { renderCharts } from './charts.js';
import { loadShadow } from './shadow.js';

// The analytics are toolgate's aggregates, read from /v1/analytics: the
// tables are since the analytics began, the charts over a window. The
// page reads them again when the view opens, when calls change while it
// is open, and while the aggregates are catching up (lag), so what it
// shows settles on the server's numbers without a reload.
export const SERIES = {
  hour: { query: 'hours=24', text: 'the last 24 hours, per hour', stepMs: 3600000 },
  minute: { query: 'resolution=minute&hours=3', text: 'the last 2 to 3 hours, per minute', stepMs: 60000 },
};
const REFRESH_MS = 60000;

export const an = {
  res: 'hour',
  data: null,
  error: '',
  off: false,
  ticket: null,
  timer: 0,
  soon: 0,
  lagTries: 0,
  dirty: false, // calls changed while a read was under way
  width: 0,
};

export async function loadAnalytics() {
  clearTimeout(an.timer);
  clearTimeout(an.soon);
  const ticket = {};
  an.ticket = ticket;
  an.dirty = false;
  const res = an.res;
  if (!an.data) $('analytics').dataset.state = 'loading';
  $('an-refresh').disabled = true;
  let next = REFRESH_MS;
  try {
    const r = await api('GET', 'v1/analytics?' + SERIES[res].query);
    if (an.ticket !== ticket) return;
    an.data = r;
    an.res = res;
    an.error = '';
    an.off = false;
    // Counting recent events: look again soon, then less often.
    if (r.lag > 0) next = Math.min(10000, 1000 * 2 ** an.lagTries++);
    else an.lagTries = 0;
  } catch (err) {
    if (an.ticket !== ticket) return;
    if (err.status === 401) return showSignIn('Your token is no longer accepted. Sign in again.');
    if (err.status === 404) {
      an.off = true;
      next = 0;
    } else {
      an.error = 'Could not load the analytics: ' + err.message;
      next = 15000;
    }
  }
  $('an-refresh').disabled = false;
  an.ticket = null;
  renderAnalytics();
  loadShadow();
  if (an.dirty && next) next = Math.min(next, 1500);
  if (next && state.view === 'analytics') an.timer = setTimeout(loadAnalytics, next);
}

export function stopAnalytics() {
  clearTimeout(an.timer);
  clearTimeout(an.soon);
  an.ticket = null;
  $('an-refresh').disabled = false;
}

// refreshAnalyticsSoon reads the analytics again a moment after calls
// change, once for a burst of changes.
export function refreshAnalyticsSoon() {
  if (an.off) return;
  if (an.ticket) {
    an.dirty = true;
    return;
  }
  clearTimeout(an.soon);
  an.soon = setTimeout(loadAnalytics, 1500);
}

$('an-refresh').addEventListener('click', () => loadAnalytics());
for (const b of document.querySelectorAll('.seg[data-res]')) {
  b.addEventListener('click', () => {
    if (an.res === b.dataset.res && an.data) return;
    an.res = b.dataset.res;
    for (const o of document.querySelectorAll('.seg[data-res]')) o.setAttribute('aria-pressed', String(o === b));
    loadAnalytics();
  });
}

function renderAnalytics() {
  const r = an.data;
  const view = $('analytics');
  $('an-off').hidden = !an.off;
  $('an-error').hidden = !an.error || an.off;
  $('an-error').textContent = an.error;
  const empty = !an.off && r && r.totals.calls === 0 && r.tools.length === 0;
  $('an-empty').hidden = !empty;
  $('an-body').hidden = an.off || !r || empty;
  $('an-lag').hidden = an.off || !r || !r.lag;
  view.dataset.state = an.off ? 'off' : !r ? (an.error ? 'error' : 'loading') : empty ? 'empty' : 'ready';
  view.dataset.resolution = r ? r.series.resolution : '';
  if (an.off || !r) {
    $('an-sub').textContent = '';
    return;
  }
  $('an-lag').textContent = `Counting ${r.lag} recent ${r.lag === 1 ? 'event' : 'events'}: the numbers are catching up.`;
  $('an-sub').textContent = `Totals since the analytics began; charts over ${SERIES[r.series.resolution === 'minute' ? 'minute' : 'hour'].text}. Updated ${clock(r.generatedAt, true)}.`;
  if (empty) return;
  renderKPIs(r);
  renderCharts();
  renderRecommendations(r);
  $('an-tools').replaceChildren(statsTable(r.tools, 'Tool', 'tool'));
  $('an-teams').replaceChildren(statsTable(r.teams, 'Team', 'team'));
  $('an-approvers').replaceChildren(approversTable(r.approvers));
  renderReasons(r);
}

function renderKPIs(r) {
  const t = r.totals;
  const kpi = (key, label, value, sub, title) => h('div', { class: 'kpi', 'data-kpi': key, title },
    h('div', { class: 'kpi-label' }, label),
    h('div', { class: 'kpi-value' }, value),
    h('div', { class: 'kpi-sub' }, sub));
  const late = t.timedOut + t.overdue;
  $('an-kpis').replaceChildren(
    kpi('calls', 'Calls', num(t.calls), [[t.asked, 'asked'], [t.ranUnasked, 'ran unasked'], [t.policyDenied, 'denied by policy']]
      .filter(([n], i) => n || i === 0).map(([n, what]) => `${num(n)} ${what}`).join(' · ')),
    kpi('approval', 'Approved', pct(t.approvalRate, t.decided), `${num(t.approved)} of ${num(t.decided)} decided`),
    kpi('decide', 'Time to decide', dur(t.timeToDecide.p50Ms), `median · p90 ${dur(t.timeToDecide.p90Ms)}`),
    kpi('timeout', 'Timed out', pct(t.timeoutRate, t.asked), `${num(late)} of ${num(t.asked)} asked`, 'Rejected by the timeout, or left overdue'),
    kpi('cost', 'Cost', money(t.cost), `reported by the runs; ${money(t.estimatedCost)} estimated for every call asked, run or not`, 'What the calls that ran reported, and what the agents estimated when asking, for every call, approved or not'));
}

// ---- tables ----

// table builds a table of rows; each column reads a row. Cells carry
// their column's key, and their raw value where the text rounds it.
export function table(cols, rows, caption) {
  return h('table', { class: 'data' },
    h('caption', { class: 'visually-hidden' }, caption),
    h('thead', {}, h('tr', {}, cols.map((c) => h('th', { scope: 'col', class: c.num ? 'num' : '', title: c.title }, c.label)))),
    h('tbody', {}, rows.map((row) => h('tr', { 'data-name': row.name },
      cols.map((c, i) => {
        const v = c.value(row);
        const attrs = { class: (c.num ? 'num' : '') + (c.mono ? ' mono' : ''), 'data-col': c.key, title: c.cellTitle && c.cellTitle(row) };
        if (c.raw) attrs['data-raw'] = c.raw(row);
        return i === 0 ? h('th', { scope: 'row', ...attrs }, v) : h('td', attrs, v);
      })))));
}

const byCalls = (a, b) => b.calls - a.calls || (a.name < b.name ? -1 : 1);

function statsTable(rows, label, kind) {
  if (!rows.length) return h('p', { class: 'muted' }, 'Nothing yet.');
  const cols = [
    { key: 'name', label, mono: kind === 'tool', value: (t) => t.name || '(no team)' },
    { key: 'calls', label: 'Calls', num: true, value: (t) => num(t.calls), raw: (t) => t.calls, cellTitle: (t) => `${t.asked} asked, ${t.ranUnasked} ran unasked, ${t.policyDenied} denied by policy` },
    { key: 'approved', label: 'Approved', num: true, value: (t) => num(t.approved), raw: (t) => t.approved },
    { key: 'rejected', label: 'Rejected', num: true, value: (t) => num(t.rejected), raw: (t) => t.rejected },
    { key: 'approvalRate', label: 'Approval rate', num: true, value: (t) => pct(t.approvalRate, t.decided), raw: (t) => t.approvalRate, cellTitle: (t) => `${t.approved} approved of ${t.decided} decided` },
    { key: 'p50', label: 'Decide p50', num: true, title: 'Median time from the request to a decision', value: (t) => dur(t.timeToDecide.p50Ms), raw: (t) => t.timeToDecide.p50Ms },
    { key: 'p90', label: 'Decide p90', num: true, title: '90th percentile of the time to decide', value: (t) => dur(t.timeToDecide.p90Ms), raw: (t) => t.timeToDecide.p90Ms },
    { key: 'timeoutRate', label: 'Timeout rate', num: true, value: (t) => pct(t.timeoutRate, t.asked), raw: (t) => t.timeoutRate, cellTitle: (t) => `${t.timedOut} timed out, ${t.overdue} overdue, of ${t.asked} asked` },
    { key: 'cost', label: 'Cost', num: true, title: 'Reported by the runs', value: (t) => money(t.cost), raw: (t) => t.cost },
    { key: 'estimatedCost', label: 'Est. cost (asked)', num: true, title: 'Estimated by the agents when asking, for every call, approved or not', value: (t) => money(t.estimatedCost), raw: (t) => t.estimatedCost },
  ];
  return table(cols, [...rows].sort(byCalls), `Per ${kind}`);
}

function approversTable(rows) {
  if (!rows.length) return h('p', { class: 'muted' }, 'Nobody has decided anything yet.');
  const cols = [
    { key: 'name', label: 'Approver', value: (a) => a.name },
    { key: 'decisions', label: 'Decisions', num: true, value: (a) => num(a.decisions), raw: (a) => a.decisions,
      cellTitle: (a) => `${a.approved} approved, ${a.rejected} rejected` + ((a.mostRejectedTools || []).length ? `; rejects ${a.mostRejectedTools.map((n) => `${n.name} (${n.count})`).join(', ')} most` : '') },
    { key: 'approvalRate', label: 'Approved', num: true, value: (a) => pct(a.approvalRate, a.decisions), raw: (a) => a.approvalRate },
    { key: 'p50', label: 'Response p50', num: true, value: (a) => dur(a.responseTime.p50Ms), raw: (a) => a.responseTime.p50Ms },
    { key: 'p90', label: 'Response p90', num: true, value: (a) => dur(a.responseTime.p90Ms), raw: (a) => a.responseTime.p90Ms },
  ];
  return table(cols, [...rows].sort((a, b) => b.decisions - a.decisions || (a.name < b.name ? -1 : 1)), 'Per approver');
}

// renderReasons lists the reasons approvers gave most, with their tool.
function renderReasons(r) {
  const all = r.tools.flatMap((t) => (t.topRejectionReasons || []).map((x) => ({ tool: t.name, reason: x.name, count: x.count })))
    .sort((a, b) => b.count - a.count || (a.reason < b.reason ? -1 : 1))
    .slice(0, 8);
  if (!all.length) {
    $('an-reasons').replaceChildren(h('p', { class: 'muted' }, 'No rejections yet.'));
    return;
  }
  const most = all[0].count;
  $('an-reasons').replaceChildren(h('ol', { class: 'reasons' }, all.map((x) => h('li', { class: 'reason', 'data-tool': x.tool },
    h('div', { class: 'reason-line' },
      h('span', { class: 'reason-text' + (x.reason.startsWith('(') ? ' muted' : '') }, x.reason.startsWith('(') ? x.reason : `“${x.reason}”`),
      h('span', { class: 'reason-count' }, num(x.count))),
    h('div', { class: 'reason-line' },
      h('span', { class: 'mono reason-tool' }, x.tool),
      meter(x.count / most))))));
}

// meter is a small bar, drawn in SVG: the page may not set a width in
// a style attribute.
function meter(frac) {
  return svg('svg', { class: 'meter', viewBox: '0 0 100 6', preserveAspectRatio: 'none', 'aria-hidden': 'true' },
    svg('rect', { class: 'meter-bg', x: 0, y: 0, width: 100, height: 6, rx: 3 }),
    svg('rect', { class: 'meter-fg', x: 0, y: 0, width: Math.max(3, 100 * frac).toFixed(1), height: 6, rx: 3 }));
}

const KINDS = {
  allow_rule: ['Allow rule', 'ok'],
  approval_timeout: ['Approval timeout', 'wait'],
  review_rejections: ['Review rejections', 'bad'],
};

function renderRecommendations(r) {
  const recs = r.recommendations || [];
  if (!recs.length) {
    $('an-recs').replaceChildren(h('p', { class: 'muted' }, 'Nothing to change yet: a recommendation needs a tool approved every time, rejected mostly, or often timing out, over enough calls.'));
    return;
  }
  // A rule to paste first, then a timeout to raise, then what needs a look.
  const order = Object.keys(KINDS);
  const rank = (k) => (order.includes(k) ? order.indexOf(k) : order.length);
  const sorted = [...recs].sort((a, b) => rank(a.kind) - rank(b.kind));
  $('an-recs').replaceChildren(h('div', { class: 'recs' }, sorted.map(buildRecommendation)));
}

function buildRecommendation(rec) {
  const [label, tone] = KINDS[rec.kind] || [rec.kind, 'muted'];
  const ev = rec.evidence || {};
  const fact = (k, v) => (v === '' || v === undefined || v === null ? null : h('div', { class: 'fact' }, h('dt', {}, k), h('dd', {}, v)));
  const reasons = (ev.topRejectionReasons || []).map((x) => `“${x.name}” (${x.count})`).join(', ');
  return h('article', { class: 'rec', 'data-kind': rec.kind, 'data-tool': rec.tool },
    h('header', { class: 'rec-head' },
      h('span', { class: `pill pill-${tone}` }, label),
      h('h3', { class: 'tool' }, rec.tool),
      h('span', { class: 'muted rec-scope' }, 'in ', h('span', { class: 'mono' }, rec.scope))),
    h('p', { class: 'rec-summary' }, rec.summary),
    h('dl', { class: 'facts' },
      fact('Asked', num(ev.asked)),
      fact('Approved', num(ev.approved)),
      fact('Rejected', num(ev.rejected)),
      fact('Timed out', num(ev.timedOut + (ev.overdue || 0))),
      fact('Approval rate', pct(ev.approvalRate, ev.decided)),
      fact('Decide p50 / p90', ev.timeToDecide && ev.timeToDecide.count ? `${dur(ev.timeToDecide.p50Ms)} / ${dur(ev.timeToDecide.p90Ms)}` : ''),
      fact('Approval timeout', ev.approvalTimeoutMs ? dur(ev.approvalTimeoutMs) : ''),
      fact('Top reasons', reasons),
      fact('Fastest approvers', (ev.fastestApprovers || []).join(', ')),
      fact('Last asked', ev.lastAskedAt ? clock(ev.lastAskedAt, true) : '')),
    rec.rule ? snippet('rule', `Rule to add to rules.allow in ${rec.scope}`, rec.rule) : null,
    rec.policy ? snippet('policy', 'Policy to merge into the one in force', rec.policy) : null);
}

// snippet is text to paste into a policy, with a button that copies it.
function snippet(kind, label, text) {
  const id = `s-${Math.random().toString(36).slice(2)}`;
  const pre = h('pre', { class: 'snippet mono', id }, text.replace(/\n$/, ''));
  const btn = h('button', { type: 'button', class: 'btn btn-secondary btn-small', 'data-action': 'copy', 'aria-controls': id }, 'Copy');
  btn.addEventListener('click', () => copyText(text, pre, btn));
  return h('div', { class: `snippet-box snippet-${kind}` },
    h('div', { class: 'snippet-head' }, h('span', { class: 'snippet-label' }, label), btn),
    pre);
}

async function copyText(text, pre, btn) {
  let ok = false;
  try {
    await navigator.clipboard.writeText(text);
    ok = true;
  } catch {
    // No clipboard API (a page not served over https, say): select the
    // text, and copy as the browser still allows.
    const range = document.createRange();
    range.selectNodeContents(pre);
    const sel = getSelection();
    sel.removeAllRanges();
    sel.addRange(range);
    try { ok = document.execCommand('copy'); } catch { ok = false; }
  }
  btn.textContent = ok ? 'Copied' : 'Press Ctrl+C';
  btn.dataset.copied = ok ? '1' : '';
  announce(ok ? 'Copied to the clipboard' : 'Selected: press Ctrl+C to copy');
  setTimeout(() => { btn.textContent = 'Copy'; delete btn.dataset.copied; }, 2500);
}
