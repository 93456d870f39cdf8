// The inbox: the calls waiting for a decision, one card each, kept in
// step with the list and the event stream.

import { $, h, announce } from './dom.js';
import { PENDING, state } from './state.js';
import { whyNot, decidedBy } from './words.js';
import { markResolved, buildCard, updateCard } from './card.js';
import { renderBatch } from './decisions.js';
import { filters, matches, riskRank } from './filters.js';
import { renderHistory } from './history.js';
import { loadGrantsSoon } from './grants.js';
import { refreshAnalyticsSoon } from './analytics.js';
import { markCurrent } from './keys.js';
import { markNew, isNew, renderNew, showCount, notifyNew } from './notify.js';

// How long a card that someone else decided stays, saying so, before it
// goes; a card showing an error stays until dismissed.
const RESOLVED_LINGER_MS = 4000;

export function remember(e) {
  let changed = false;
  if (e.conversationId && !state.seenConversations.has(e.conversationId)) {
    state.seenConversations.add(e.conversationId);
    changed = true;
  }
  if (e.toolName && !state.seenTools.has(e.toolName)) {
    state.seenTools.add(e.toolName);
    changed = true;
  }
  for (const [v, seen] of [[e.callerBotId, state.seenCallers], [e.team, state.seenTeams]]) {
    if (v && !seen.has(v)) {
      seen.add(v);
      changed = true;
    }
  }
  if (changed) renderDatalists();
}

// replacePending shows the calls a list found; with announceNew (a list
// after the first), those not shown before are new.
export function replacePending(items, announceNew) {
  const fresh = new Map(items.map((e) => [e.pendingId, e]));
  for (const [id, card] of [...state.cards]) {
    if (fresh.has(id)) continue;
    state.pending.delete(id);
    // A card showing an error keeps it until dismissed.
    if (card.dataset.sticky === undefined) removeCard(id);
  }
  for (const e of items) upsertPending(e, announceNew);
  renderInbox();
}

export function apply(e) {
  remember(e);
  if (state.view === 'analytics') refreshAnalyticsSoon();
  // An approval beyond once records a grant; a call a grant let run
  // may have used up a single-use one.
  if (state.view === 'grants' || (e.decisionScope && e.decisionScope !== 'once') || /^grant /.test(e.statusReason || '')) loadGrantsSoon();
  if (e.status === PENDING) {
    upsertPending(e, true);
  } else if (state.pending.has(e.pendingId)) {
    resolveCard(e);
  }
  if (state.history && e.status !== PENDING) {
    state.history.set(e.pendingId, e);
    renderHistory();
  }
  renderInbox();
}

export function upsertPending(e, announceIt) {
  remember(e);
  const known = state.pending.has(e.pendingId);
  state.pending.set(e.pendingId, e);
  const card = state.cards.get(e.pendingId);
  if (card && card.dataset.note === whyNot(e)) {
    card.entry = e;
    updateCard(card, e);
    return;
  }
  // New, or who may decide it changed for this user (a vote of theirs,
  // an escalation reaching them): built anew.
  const fresh = buildCard(e);
  if (card) {
    if (isNew(card)) markNew(fresh);
    card.replaceWith(fresh);
    fresh.entry = e;
    state.cards.set(e.pendingId, fresh);
    return;
  }
  fresh.entry = e;
  state.cards.set(e.pendingId, fresh);
  if (!known && announceIt) {
    markNew(fresh);
    notifyNew(e);
    announce(`New request: ${e.toolName} from ${e.callerBotId}`);
  }
}

export function removeCard(id) {
  const card = state.cards.get(id);
  state.pending.delete(id);
  state.cards.delete(id);
  state.selected.delete(id);
  if (!card) return;
  // Keep keyboard users in the queue: focus moves to the next card, and
  // so does the keys' current card. (A decision's busy card may have lost
  // the focus already: the field that had it was disabled.)
  const current = state.current === id;
  const hadFocus = card.contains(document.activeElement) || (current && document.activeElement === document.body);
  const cards = [...$('cards').querySelectorAll('article.card')];
  const at = cards.indexOf(card);
  const next = cards[at + 1] || cards[at - 1];
  card.remove();
  if (current) state.current = next ? next.dataset.id : null;
  if (hadFocus) {
    const target = next && next.querySelector('button:not([disabled])');
    if (target) target.focus(); else $('main').focus();
  }
  renderInbox();
}

// resolveCard closes a card whose call someone decided: at once when it
// was this page, after a moment (saying who) when it was someone else.
function resolveCard(e) {
  state.pending.delete(e.pendingId);
  const card = state.cards.get(e.pendingId);
  if (!card) return;
  if (card.dataset.deciding !== undefined) {
    // This page's own decision is in flight: if it is the one that
    // stood, the card goes; if another did, the answer to the request
    // (a 409) will say so on the card.
    if (decidedBy(e) === state.me.id) removeCard(e.pendingId);
    else markResolved(card, e);
    return;
  }
  markResolved(card, e);
  if (card.dataset.sticky === undefined) {
    setTimeout(() => {
      if (state.cards.get(e.pendingId) === card && card.dataset.sticky === undefined) removeCard(e.pendingId);
    }, RESOLVED_LINGER_MS);
  }
}

// ORDERS are the orders the inbox offers beside urgency, which breaks
// their ties: the riskiest, or the costliest (estimated), first.
const ORDERS = {
  '': () => 0,
  risk: (a, b) => riskRank(b.risk) - riskRank(a.risk),
  cost: (a, b) => (b.estimatedCost || 0) - (a.estimatedCost || 0),
};

// groupHead is the heading of a conversation's cards, kept from one
// render to the next.
const heads = new Map();
function groupHead(conv, n) {
  if (!heads.has(conv)) heads.set(conv, h('h2', { class: 'group-head', 'data-conversation': conv }, h('span', { class: 'mono' }, conv), h('span', { class: 'group-count' })));
  const head = heads.get(conv);
  head.querySelector('.group-count').textContent = ` · ${n} waiting`;
  return head;
}

// urgency orders cards: the soonest deadline first, then the oldest.
function urgency(a, b) {
  const da = a.approvalTimeoutAt || Infinity, db = b.approvalTimeoutAt || Infinity;
  if (a.overdue !== b.overdue) return a.overdue ? -1 : 1;
  if (da !== db) return da - db;
  return a.requestedAt - b.requestedAt || (a.pendingId < b.pendingId ? -1 : 1);
}

export function renderInbox() {
  const f = filters();
  const container = $('cards');
  // Compact: one line a call, the current one open.
  container.classList.toggle('compact', f.view === 'compact');
  // Every card, including those just decided elsewhere and those
  // showing an error, keeps its place: ordered by the entry it was
  // built from.
  const order = [...state.cards.values()].filter((c) => matches(c.entry, f)).sort((a, b) => ORDERS[f.sort](a.entry, b.entry) || urgency(a.entry, b.entry));
  const shown = [...state.pending.values()].filter((e) => matches(e, f));
  const n = state.pending.size;
  // Grouped, each conversation's cards follow a heading, the groups in
  // the order of their first card.
  let nodes = order;
  if (f.group === 'conversation') {
    const groups = Map.groupBy(order, (c) => c.entry.conversationId);
    nodes = [...groups].flatMap(([conv, cards]) => [groupHead(conv, cards.length), ...cards]);
  }
  let i = 0;
  for (const node of nodes) {
    if (container.children[i] !== node) container.insertBefore(node, container.children[i] || null);
    i++;
  }
  for (const node of [...container.children].slice(i)) node.remove();

  $('pending-count').textContent = String(n);
  $('pending-count').dataset.zero = n ? '' : '1';
  showCount(n);
  markCurrent();
  renderNew();

  const filtered = f.conversation || f.tool || f.caller || f.team || f.risk;
  $('inbox-note').hidden = !filtered || !n;
  $('inbox-note').textContent = filtered ? `Showing ${shown.length} of ${n} waiting calls.` : '';
  const empty = state.listed && i === 0;
  $('empty').hidden = !empty;
  $('empty-title').textContent = filtered && n ? 'No waiting calls match these filters' : 'Nothing waiting for you';
  $('empty-text').textContent = filtered && n
    ? `${n} waiting ${n === 1 ? 'call is' : 'calls are'} hidden by the filters.`
    : 'When an agent asks to run a tool that needs a human, it appears here at once.';
  $('empty-clear').hidden = !(filtered && n);
  $('empty-try').hidden = !!(filtered && n);
  $('f-clear').hidden = !(filtered || f.status || f.sort || f.group || f.view);
  renderBatch();
}

function renderDatalists() {
  const fill = (id, values) => $(id).replaceChildren(...[...values].sort().map((v) => h('option', { value: v })));
  fill('conversations', state.seenConversations);
  fill('tools', state.seenTools);
  fill('callers', state.seenCallers);
  fill('teams', state.seenTeams);
}
