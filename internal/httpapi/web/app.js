// toolgate inbox: every call waiting for a human, live.
//
// The durable state is toolgate's, never this page's: on load, and again
// whenever the event stream drops, the page lists the pending calls and
// then follows /v1/events from the list's eventsSeq, so nothing that
// happened between the list and the stream is missed and a refresh or a
// lost connection always ends in the server's state. Each event carries
// the whole entry as that transition wrote it, so applying them in order
// converges on the truth.
//
// Everything agents send (tool names, arguments, reasons) is put into the
// page as text, never as markup.
//
// This module starts the page and keeps it in step: the sign-in, the
// list and the event stream. The page's parts are modules of their own,
// loaded by the browser as they are (no build step): dom.js, format.js,
// state.js, api.js and words.js are what the others share; session.js
// the sign-in screens; inbox.js the pending calls, card.js a call's card
// and decisions.js its decision, keys.js the keyboard, notify.js what
// the page says of new calls and decisions; filters.js, views.js,
// history.js, grants.js, analytics.js, charts.js and shadow.js the rest
// of the page.
//
// The modules import each other in circles (a card decides, a decision
// redraws the inbox). That is safe because, as it loads, a module only
// defines its functions and adds its listeners, using nothing of the
// others but dom.js, which imports nothing; the page starts when this
// module, which the browser evaluates last, calls boot. Keep it so: a
// module in a circle may not yet have run when another one loads.

import { $ } from './dom.js';
import { PENDING, saved, state } from './state.js';
import { api, list } from './api.js';
import { show, showSignIn, showNamePrompt, renderWho } from './session.js';
import { replacePending, apply } from './inbox.js';
import { loadFilters } from './filters.js';
import { setView, route, openLink } from './views.js';
import { loadHistory } from './history.js';
import { loadGrants } from './grants.js';

// The event stream's event names: one per kind of transition.
const SUBJECTS = [
  'tool.approval_required', 'tool.scheduled_execution', 'tool.policy_denied',
  'tool.approval_granted', 'tool.approval_progress', 'tool.approval_rejected', 'tool.approval_escalated', 'tool.approval_timeout',
  'tool.approval_overdue', 'tool.approval_reminder', 'tool.cancelled', 'tool.execution_started', 'tool.execution_succeeded',
  'tool.execution_failed', 'tool.approval_responded', 'tool.approval_reviewed',
];

const CONN_TEXT = {
  connecting: 'Connecting…',
  live: 'Live',
  reconnecting: 'Reconnecting…',
  'signed-out': 'Signed out',
};

export function setConn(s) {
  const el = $('conn');
  if (el.dataset.state === s) return;
  el.dataset.state = s;
  $('conn-text').textContent = CONN_TEXT[s];
  el.title = s === 'live' ? 'Following changes as they happen' : s === 'reconnecting' ? 'Lost the connection; catching up as soon as it is back' : '';
}

export function closeStream() {
  clearTimeout(state.retryTimer);
  if (state.es) {
    state.es.close();
    state.es = null;
  }
}

// follow opens the event stream from seq. EventSource cannot send
// headers, so the token travels in the query, as the API allows for
// this one endpoint.
function follow(seq) {
  closeStream();
  const q = new URLSearchParams({ since: String(seq) });
  if (saved.token) q.set('access_token', saved.token);
  const es = new EventSource('v1/events?' + q);
  state.es = es;
  es.addEventListener('open', () => {
    if (state.es !== es) return;
    state.retries = 0;
    state.everLive = true;
    setConn('live');
  });
  // On any error the stream is closed and the page lists again before
  // following anew: a list is the truth, whatever the stream missed.
  es.addEventListener('error', () => {
    if (state.es !== es) return;
    closeStream();
    setConn('reconnecting');
    retrySoon();
  });
  for (const s of SUBJECTS) {
    es.addEventListener(s, (ev) => {
      if (state.es !== es) return;
      let msg;
      try { msg = JSON.parse(ev.data); } catch { return; }
      if (msg && msg.entry) apply(msg.entry);
    });
  }
}

function retrySoon() {
  clearTimeout(state.retryTimer);
  const delay = Math.min(10000, 500 * 2 ** state.retries) * (0.75 + Math.random() * 0.5);
  state.retries = Math.min(state.retries + 1, 6);
  state.retryTimer = setTimeout(sync, delay);
}

// sync lists the pending calls and follows the stream from there.
async function sync() {
  closeStream();
  setConn(state.everLive ? 'reconnecting' : 'connecting');
  let page;
  try {
    page = await list({ status: PENDING });
  } catch (err) {
    if (err.status === 401) return showSignIn('Your sign-in is no longer accepted. Sign in again.');
    if (err.status === 403) return setConn('signed-out'); // no role that reads calls: the notice says so
    retrySoon();
    return;
  }
  // What a list after the first finds (calls asked while the stream
  // was down) arrived while the page was open.
  const again = state.listed;
  state.listed = true;
  replacePending(page.items, again);
  if (state.view === 'history') loadHistory();
  loadGrants();
  follow(page.eventsSeq);
}

export async function boot() {
  closeStream();
  setConn('connecting');
  let me;
  try {
    me = await api('GET', 'v1/me');
  } catch (err) {
    if (err.status === 401) {
      return showSignIn(saved.token ? 'That token was not accepted.' : '');
    }
    setConn('reconnecting');
    clearTimeout(state.retryTimer);
    state.retryTimer = setTimeout(boot, Math.min(10000, 1000 * 2 ** state.retries++));
    return;
  }
  state.me = me;
  if (me.open && !saved.user) return showNamePrompt();
  renderWho();
  show('app');
  const r = route();
  setView(r.link ? 'inbox' : r.view, false);
  await sync();
  if (r.link) openLink(r.link);
}

// Back to the page after a while away: make sure it is current.
document.addEventListener('visibilitychange', () => {
  if (document.visibilityState === 'visible' && state.me && !state.es) sync();
});

loadFilters();
boot();
