// The grants view.

import { $, h, announce } from './dom.js';
import { ago } from './format.js';
import { state, canDecide } from './state.js';
import { api } from './api.js';
import { showSignIn } from './session.js';

// The grants in force, from GET /v1/grants: read when the view opens,
// after each list of the pending calls, and again a moment after a
// decision that may have recorded or used one. Revoke ends one at once.

let grantsTicket = null;
let grantsSoon = 0;

export async function loadGrants() {
  const ticket = {};
  grantsTicket = ticket;
  $('grants-refresh').disabled = true;
  try {
    const grants = await api('GET', 'v1/grants');
    if (grantsTicket !== ticket) return;
    state.grants = grants;
    $('grants-error').hidden = true;
  } catch (err) {
    if (grantsTicket !== ticket) return;
    if (err.status === 401) return showSignIn('Your token is no longer accepted. Sign in again.');
    $('grants-error').textContent = 'Could not load the grants: ' + err.message;
    $('grants-error').hidden = false;
  } finally {
    if (grantsTicket === ticket) $('grants-refresh').disabled = false;
  }
  if (grantsTicket === ticket) grantsTicket = null;
  renderGrants();
}

export function loadGrantsSoon() {
  clearTimeout(grantsSoon);
  grantsSoon = setTimeout(loadGrants, 400);
}

$('grants-refresh').addEventListener('click', () => loadGrants());

// grantReach says what bounds a grant, in words.
function grantReach(g) {
  if (g.taskId) return ['Task', `task ${g.taskId} of conversation ${g.conversationId}`];
  if (g.conversationId) return ['Session', `conversation ${g.conversationId}`];
  return ['Always', g.team ? `team ${g.team}’s calls` : 'every team’s calls'];
}

export function renderGrants() {
  const grants = state.grants;
  const list = $('grant-rows');
  $('grants').dataset.state = grants ? 'ready' : 'loading';
  $('grants-count').textContent = grants ? String(grants.length) : '0';
  $('grants-count').dataset.zero = grants && grants.length ? '' : '1';
  if (!grants) return;
  $('grants-empty').hidden = grants.length > 0;
  list.replaceChildren(...grants.map(buildGrantRow));
}

function buildGrantRow(g) {
  const [scope, reach] = grantReach(g);
  const expires = g.expiresAt
    ? h('span', { class: 'grant-expiry', 'data-deadline': g.expiresAt, title: 'Ends ' + new Date(g.expiresAt).toLocaleString() }, 'ends ' + new Date(g.expiresAt).toLocaleString())
    : h('span', { class: 'grant-expiry' }, 'until revoked');
  const revoke = canDecide()
    ? h('button', { type: 'button', class: 'btn btn-reject btn-small', 'data-action': 'revoke', title: 'End this grant now: calls it covers are asked about again' }, 'Revoke')
    : null;
  const err = h('p', { class: 'field-error grant-error', role: 'alert', hidden: true });
  // Not a .row: those are the history's.
  const row = h('li', { class: 'grant', 'data-id': g.id, 'data-pattern': g.pattern },
    h('div', { class: 'row-main' },
      h('span', { class: `pill ${scope === 'Always' ? 'pill-info' : 'pill-muted'}` }, scope),
      h('div', { class: 'row-what' },
        h('div', { class: 'row-title' },
          h('span', { class: 'grant-matches' }, 'matches ', h('code', { class: 'tool mono grant-pattern' }, g.pattern)),
          g.singleUse ? h('span', { class: 'pill pill-wait pill-tiny grant-single' }, 'single use') : null),
        h('div', { class: 'row-sub' },
          h('span', { class: 'grant-reach' }, reach),
          h('span', {}, 'granted by ', h('span', { class: 'row-who grant-by' }, g.by),
            g.at ? ' ' + ago(g.at) : ''),
          g.pendingId ? h('span', {}, 'from call ', h('a', { class: 'mono grant-call', href: `#/calls/${encodeURIComponent(g.pendingId)}` }, g.pendingId)) : null,
          expires),
        err),
      h('div', { class: 'row-end' }, revoke)));
  if (revoke) {
    revoke.addEventListener('click', async () => {
      revoke.disabled = true;
      err.hidden = true;
      try {
        await api('POST', `v1/grants/${encodeURIComponent(g.id)}/revoke`, {});
      } catch (ex) {
        if (ex.status === 401) { showSignIn('Your token is no longer accepted. Sign in again.'); return; }
        if (ex.status !== 404) {
          revoke.disabled = false;
          err.textContent = 'Could not revoke it: ' + ex.message;
          err.hidden = false;
          return;
        }
        // Revoked or expired already: it is not in force either way.
      }
      announce(`Revoked the grant ${g.pattern}`);
      if (state.grants) state.grants = state.grants.filter((x) => x.id !== g.id);
      renderGrants();
      loadGrantsSoon();
    });
  }
  return row;
}
