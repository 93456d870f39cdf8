// The views (inbox, history, grants, analytics), the address that names
// one, and the links to a call that notifications send.

import { $, announce } from './dom.js';
import { PENDING, state } from './state.js';
import { api } from './api.js';
import { verdict } from './words.js';
import { showSignIn } from './session.js';
import { upsertPending, renderInbox } from './inbox.js';
import { openReject } from './card.js';
import { filters, matches, clearFilters } from './filters.js';
import { loadHistory, renderHistory } from './history.js';
import { loadGrants, renderGrants } from './grants.js';
import { loadAnalytics, stopAnalytics } from './analytics.js';

const VIEWS = ['inbox', 'history', 'grants', 'analytics'];

// setView shows a view. push puts it in the address (a tab's click);
// load (re)reads what the view lists.
export function setView(view, push = true, load = true) {
  if (state.view !== view || push) clearLink();
  state.view = view;
  for (const v of VIEWS) {
    $(v).hidden = v !== view;
    if (v === view) $('tab-' + v).setAttribute('aria-current', 'page');
    else $('tab-' + v).removeAttribute('aria-current');
  }
  $('filters').hidden = view === 'analytics' || view === 'grants';
  $('f-status-field').hidden = view !== 'history';
  for (const id of ['f-sort-field', 'f-group-field', 'f-view-field']) $(id).hidden = view !== 'inbox';
  if (push) history.replaceState(null, '', '#' + view);
  if (load && view === 'history' && state.listed) loadHistory();
  if (view === 'analytics') loadAnalytics();
  else stopAnalytics();
  if (view === 'grants' && load && state.me) { renderGrants(); loadGrants(); }
  renderInbox();
}

for (const v of VIEWS) $('tab-' + v).addEventListener('click', (ev) => { ev.preventDefault(); setView(v); });

// route reads the address: a view (#inbox, #history, #analytics), or a
// call the notifications link to: #/calls/<pendingId>, with
// ?decision=approve or reject for their buttons.
export function route() {
  const m = /^#\/calls\/([^?]+)(?:\?(.*))?$/.exec(location.hash);
  if (m) {
    let id = m[1];
    try { id = decodeURIComponent(id); } catch { /* as it came */ }
    const decision = new URLSearchParams(m[2] || '').get('decision');
    return { link: { id, decision: decision === 'approve' || decision === 'reject' ? decision : '' } };
  }
  const v = location.hash.slice(1);
  return { view: VIEWS.includes(v) ? v : 'inbox' };
}

window.addEventListener('hashchange', () => {
  if (!state.me) return;
  const r = route();
  if (r.link) openLink(r.link);
  else setView(r.view, false);
});

// openLink shows the call a notification links to: its card when it
// waits, with the button the link named ready (the reject panel open, or
// Approve focused) but never pressed; else its row in the history, with
// its timeline open.
export async function openLink({ id, decision }) {
  clearLink();
  let e = state.pending.get(id);
  if (!e) {
    try {
      e = await api('GET', `v1/tool-calls/${encodeURIComponent(id)}`);
    } catch (err) {
      if (err.status === 401) return showSignIn('Your token is no longer accepted. Sign in again.');
      setView('inbox', false);
      return showLinkNote(err.status === 404
        ? `The linked call ${id} does not exist here. It may belong to another toolgate, or the link may be cut short.`
        : `Could not open the linked call: ${err.message}`);
    }
  }
  if (!matches(e, filters()) || $('f-status').value) clearFilters();
  if (e.status === PENDING) {
    // Listed after this page's list, and the stream not yet caught up.
    if (!state.cards.has(id)) upsertPending(e, false);
    setView('inbox', false, false);
    state.linked = { id, entry: e };
    const card = state.cards.get(id);
    card.classList.add('card-target');
    card.scrollIntoView({ block: 'center' });
    announce(`Opened the linked call: ${e.toolName}`);
    const can = card.querySelector('.actions');
    if (decision === 'reject' && can) {
      openReject(card, card.entry);
    } else if (decision === 'approve' && can) {
      card.querySelector('button[data-action="approve"]').focus({ preventScroll: true });
    } else {
      card.tabIndex = -1;
      card.focus({ preventScroll: true });
    }
    return;
  }
  setView('history', false, false);
  state.linked = { id, entry: e };
  if (decision) showLinkNote(`This call needs no decision any more: ${verdict(e).replace(': ', ', ')}.`);
  await loadHistory();
  // Without the list (it failed), the linked call alone.
  if (!state.history) state.history = new Map();
  renderHistory();
}

function clearLink() {
  $('link-note').hidden = true;
  if (!state.linked) return;
  const card = state.cards.get(state.linked.id);
  if (card) card.classList.remove('card-target');
  for (const row of $('rows').querySelectorAll('.row-target')) row.classList.remove('row-target');
  state.linked = null;
}

function showLinkNote(text) {
  $('link-note').textContent = text;
  $('link-note').hidden = false;
}
