// Deciding: one call from its card, or the selected calls at once.

import { $, h, announce } from './dom.js';
import { PENDING, state, canDecide } from './state.js';
import { api } from './api.js';
import { quorumText, verdict } from './words.js';
import { costText } from './format.js';
import { showSignIn } from './session.js';
import { upsertPending, removeCard, renderInbox } from './inbox.js';
import { setBusy, showCardError } from './card.js';
import { filters, matches } from './filters.js';
import { renderHistory } from './history.js';
import { confirmDecision } from './notify.js';

// describeError turns a refused decision into what the approver needs.
function describeError(err) {
  if (err.status === 409 && err.entry) return `Already ${verdict(err.entry)}.`;
  if (err.status === 403) return `You can’t decide this call: ${err.message}`;
  if (err.status === 400) return `Not accepted: ${err.message}`;
  return err.message || 'Something went wrong.';
}

export async function decide(card, e, body) {
  const err = card.querySelector('.card-error');
  err.hidden = true;
  delete card.dataset.sticky;
  setBusy(card, true);
  card.dataset.deciding = '';
  try {
    const updated = await api('POST', `v1/tool-calls/${encodeURIComponent(e.pendingId)}/decision`, body);
    if (updated.status === PENDING) {
      // An approval its quorum still needs others for: the card stays,
      // saying how far the call is.
      announce(`${e.toolName}: your approval is recorded, ${quorumText(updated)}`);
      delete card.dataset.deciding;
      setBusy(card, false);
      upsertPending(updated, false);
      renderInbox();
      return;
    }
    confirmDecision(e, body);
    removeCard(e.pendingId);
    if (state.history) { state.history.set(updated.pendingId, updated); renderHistory(); }
  } catch (ex) {
    delete card.dataset.deciding;
    setBusy(card, false);
    if (ex.status === 401) { showSignIn('Your token is no longer accepted. Sign in again.'); return; }
    if (ex.status === 409 && ex.entry) {
      state.pending.delete(e.pendingId);
      if (state.history) { state.history.set(ex.entry.pendingId, ex.entry); renderHistory(); }
      showCardError(card, describeError(ex), ex.entry);
      renderInbox();
      return;
    }
    showCardError(card, describeError(ex));
  }
}

// The selected calls are decided in one request (POST /v1/decisions with
// their ids): each is still its own decision, and the answer says per
// call what was decided and what was skipped and why, which the page
// lists until dismissed.

function shownCards() {
  const f = filters();
  return [...state.cards.values()].filter((c) => matches(c.entry, f) && c.querySelector('input.select'));
}

// selection sums up the selected calls: how many, the high-risk ones,
// those over the cost limit, the estimated cost of all, and those under
// a quorum (where an approval is one vote).
function selection() {
  const entries = [...state.selected].map((id) => state.cards.get(id)?.entry).filter(Boolean);
  const risky = entries.filter((e) => e.risk === 'high');
  const costly = entries.filter((e) => e.overCostLimit);
  const cost = entries.reduce((sum, e) => sum + (e.estimatedCost || 0), 0);
  // One currency named for every call with a cost is the sum's.
  const currencies = new Set(entries.filter((e) => e.estimatedCost).map((e) => e.currency || ''));
  const costed = costText(cost, currencies.size === 1 ? [...currencies][0] : '');
  const quorum = entries.filter((e) => e.quorum);
  const parts = [];
  if (risky.length) parts.push(`${risky.length} high risk`);
  if (costly.length) parts.push(`${costly.length} over the cost limit`);
  if (cost) parts.push(`est. cost ${costed}`);
  if (quorum.length) parts.push(`${quorum.length} under a quorum (your approval is one vote)`);
  return { n: entries.length, risky, costly, cost: costed, text: parts.join(' · ') };
}

export function renderBatch() {
  const n = state.selected.size;
  const selectable = canDecide() && shownCards().length > 0;
  $('batch').hidden = !selectable && n === 0;
  // The bar stays in view under the top bar while the cards scroll.
  $('batch').style.top = `${document.querySelector('.topbar')?.offsetHeight || 0}px`;
  const sum = selection();
  $('batch-count').replaceChildren(n ? `${n} selected` : 'Select calls to decide them together',
    ...(sum.text ? [' · ', h('span', { class: 'batch-summary' }, sum.text)] : []));
  if (!n) $('batch-confirm').hidden = true;
  $('batch-approve').disabled = !n || state.batching;
  $('batch-reject').disabled = !n || state.batching;
  $('batch-confirm-reject').disabled = !n || state.batching;
  $('batch-clear').hidden = !n;
  $('select-all').hidden = !selectable;
  if (!n) $('batch-reject-form').hidden = true;
  for (const [id, card] of state.cards) {
    const box = card.querySelector('input.select');
    if (box) box.checked = state.selected.has(id);
    card.classList.toggle('card-selected', state.selected.has(id));
  }
}

$('select-all').addEventListener('click', () => {
  for (const card of shownCards()) state.selected.add(card.dataset.id);
  renderBatch();
});
$('batch-clear').addEventListener('click', () => { state.selected.clear(); renderBatch(); });
// Approving a selection that holds a high-risk call, or one over the
// policy's cost limit, asks first, saying what it holds.
$('batch-approve').addEventListener('click', () => {
  const sum = selection();
  if (!sum.risky.length && !sum.costly.length) { decideSelected(true, ''); return; }
  const tools = (es) => [...new Set(es.map((e) => e.toolName))].join(', ');
  const what = [];
  if (sum.risky.length) what.push(`${sum.risky.length} high-risk (${tools(sum.risky)})`);
  if (sum.costly.length) what.push(`${sum.costly.length} over the cost limit (${tools(sum.costly)})`);
  if (sum.cost) what.push(`an estimated cost of ${sum.cost} in all`);
  $('batch-confirm-text').textContent = `Approve ${sum.n} ${sum.n === 1 ? 'call' : 'calls'}, with ${what.join(' and ')}?`;
  $('batch-reject-form').hidden = true;
  $('batch-confirm').hidden = false;
  $('batch-confirm-approve').focus();
});
$('batch-confirm-approve').addEventListener('click', () => { $('batch-confirm').hidden = true; decideSelected(true, ''); });
$('batch-cancel-approve').addEventListener('click', () => { $('batch-confirm').hidden = true; });
$('batch-reject').addEventListener('click', () => {
  $('batch-confirm').hidden = true;
  $('batch-reject-form').hidden = false;
  $('batch-reason').focus();
});
$('batch-cancel-reject').addEventListener('click', () => { $('batch-reject-form').hidden = true; });
$('batch-reject-form').addEventListener('submit', (ev) => {
  ev.preventDefault();
  decideSelected(false, $('batch-reason').value.trim());
});
$('batch-result-dismiss').addEventListener('click', () => { $('batch-result').hidden = true; });

async function decideSelected(approved, reason) {
  const ids = [...state.selected];
  if (!ids.length || state.batching) return;
  state.batching = true;
  renderBatch();
  const cards = ids.map((id) => state.cards.get(id)).filter(Boolean);
  for (const card of cards) { setBusy(card, true); card.dataset.deciding = ''; }
  let reply;
  try {
    const body = { ids, approved };
    if (reason) body.reason = reason;
    reply = await api('POST', 'v1/decisions', body);
  } catch (ex) {
    state.batching = false;
    for (const card of cards) { delete card.dataset.deciding; setBusy(card, false); }
    if (ex.status === 401) { showSignIn('Your token is no longer accepted. Sign in again.'); return; }
    showBatchResult(approved, null, ex.message);
    renderBatch();
    return;
  }
  state.batching = false;
  state.selected.clear();
  $('batch-reason').value = '';
  $('batch-reject-form').hidden = true;
  for (const m of reply.decided) {
    removeCard(m.pendingId);
    if (state.history && m.entry) state.history.set(m.pendingId, m.entry);
  }
  // A call under a quorum got this approver's vote and waits for the
  // others: its card stays, saying how far it is.
  for (const m of reply.voted || []) upsertPending(m.entry, false);
  for (const m of reply.skipped) {
    const card = state.cards.get(m.pendingId);
    if (!card) continue;
    delete card.dataset.deciding;
    setBusy(card, false);
    if (m.entry && m.entry.status !== PENDING) {
      state.pending.delete(m.pendingId);
      if (state.history) state.history.set(m.pendingId, m.entry);
      showCardError(card, skipText(m), m.entry);
    } else {
      showCardError(card, skipText(m));
    }
  }
  for (const card of cards) {
    if (state.cards.get(card.dataset.id) === card) { delete card.dataset.deciding; setBusy(card, false); }
  }
  if (state.history) renderHistory();
  showBatchResult(approved, reply);
  announce(batchTitle(approved, reply));
  renderInbox();
}

// skipText says why a selected call was not decided, as an approver
// needs it.
function skipText(m) {
  if (m.code === 'conflict' && m.entry && m.entry.status !== PENDING) return `Already ${verdict(m.entry)}.`;
  if (m.code === 'not_found') return 'No such call any more.';
  if (m.code === 'expired') return 'Too late: its deadline passed.';
  if (m.code === 'forbidden' || m.code === 'edit_denied') return `Not yours to decide: ${m.reason}`;
  return m.reason || m.code;
}

function showBatchResult(approved, reply, error) {
  const verb = approved ? 'Approved' : 'Rejected';
  const box = $('batch-result');
  box.hidden = false;
  box.dataset.state = error ? 'error' : 'done';
  if (error) {
    $('batch-result-title').textContent = `Nothing was decided: ${error}`;
    $('batch-items').replaceChildren();
    return;
  }
  $('batch-result-title').textContent = batchTitle(approved, reply);
  const pills = { decided: [approved ? 'pill-ok' : 'pill-bad', verb.toLowerCase()], voted: ['pill-muted', 'your vote'], skipped: ['pill-muted', 'skipped'] };
  const why = { voted: (m) => `Recorded: ${quorumText(m.entry)}`, skipped: skipText };
  const item = (m, outcome) => {
    const e = m.entry || {};
    return h('li', { class: `batch-item batch-${outcome}`, 'data-id': m.pendingId, 'data-outcome': outcome, 'data-code': m.code || null },
      h('span', { class: `pill pill-tiny ${pills[outcome][0]}` }, pills[outcome][1]),
      h('span', { class: 'tool mono' }, e.toolName || ''),
      h('span', { class: 'mono batch-id' }, m.pendingId),
      why[outcome] ? h('span', { class: 'batch-why' }, why[outcome](m)) : null);
  };
  $('batch-items').replaceChildren(...['decided', 'voted', 'skipped'].flatMap((o) => (reply[o] || []).map((m) => item(m, o))));
}

// batchTitle says what a batch decision did: votes apart from decisions.
function batchTitle(approved, reply) {
  const voted = reply.voted && reply.voted.length ? `, voted on ${reply.voted.length}` : '';
  return `${approved ? 'Approved' : 'Rejected'} ${reply.decided.length}${voted}, skipped ${reply.skipped.length}`;
}
