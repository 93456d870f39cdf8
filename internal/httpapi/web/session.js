// Who is here: the sign-in screens, and who is signed in.

import { $ } from './dom.js';
import { saved, state, roles, canDecide } from './state.js';
import { setConn, closeStream, boot } from './app.js';
import { an, stopAnalytics } from './analytics.js';
import { signedIn } from './words.js';

export function show(screen) {
  $('sign-in').hidden = screen !== 'sign-in';
  $('name-prompt').hidden = screen !== 'name';
  $('app').hidden = screen !== 'app';
  $('tabs').hidden = screen !== 'app';
  $('who').hidden = screen !== 'app';
}

export function showSignIn(message) {
  closeStream();
  state.me = null;
  setConn('signed-out');
  show('sign-in');
  const err = $('sign-in-error');
  err.textContent = message || '';
  err.hidden = !message;
  $('token').value = '';
  $('token').focus();
  showSingleSignOn();
}

// showSingleSignOn offers the sign-in at the OpenID provider, where
// toolgate has one; it brings the browser back to this page.
async function showSingleSignOn() {
  let info = null;
  try {
    const res = await fetch('auth/info', { cache: 'no-store' });
    if (res.ok) info = await res.json();
  } catch { /* offered when it can be told */ }
  $('sso').hidden = !(info && info.singleSignOn);
  if (!info || !info.singleSignOn) return;
  $('sso-link').href = 'auth/login?' + new URLSearchParams({ return: location.pathname + location.search + location.hash });
  $('sso-issuer').textContent = `at ${info.issuer}`;
}

export function showNamePrompt() {
  setConn('signed-out');
  show('name');
  $('user-name').value = saved.user;
  $('user-name').focus();
}

$('sign-in-form').addEventListener('submit', (ev) => {
  ev.preventDefault();
  const token = $('token').value.trim();
  if (!token) {
    $('sign-in-error').textContent = 'Paste a token first.';
    $('sign-in-error').hidden = false;
    return;
  }
  saved.token = token;
  boot();
});

$('name-form').addEventListener('submit', (ev) => {
  ev.preventDefault();
  const name = $('user-name').value.trim();
  if (!/^[\w.@+-]{1,64}$/.test(name)) {
    $('name-error').textContent = name
      ? 'A name is letters, digits and . _ @ + - only, up to 64: a user name such as alice or alice@example.com.'
      : 'Give your name: every decision you make is recorded under it (a user name such as alice).';
    $('name-error').hidden = false;
    return;
  }
  saved.user = name;
  boot();
});

$('sign-out').addEventListener('click', async () => {
  const open = state.me && state.me.open;
  if (state.me && state.me.session) {
    // The session is a cookie only toolgate reads: toolgate ends it.
    try { await fetch('auth/logout', { method: 'POST' }); } catch { /* signed out of this page all the same */ }
  }
  saved.token = '';
  saved.user = '';
  state.pending.clear();
  for (const card of state.cards.values()) card.remove();
  state.cards.clear();
  state.history = null;
  state.linked = null;
  state.selected.clear();
  state.grants = null;
  $('batch-result').hidden = true;
  stopAnalytics();
  an.data = null;
  if (open) { closeStream(); showNamePrompt(); } else showSignIn();
});

export function renderWho() {
  const me = state.me;
  const role = me.open ? 'open mode' : (roles().includes('admin') ? 'admin' : roles().includes('approver') ? 'approver' : roles().join(', '));
  $('who-name').textContent = me.id;
  $('who-role').textContent = (role || 'no role') + (me.identity ? ' · single sign-on' : '');
  $('who').title = me.identity ? signedIn(me.identity) : '';
  $('who-avatar').textContent = (me.id[0] || '?').toUpperCase();
  $('sign-out').textContent = me.open ? 'Change name' : 'Sign out';
  $('viewer-notice').textContent = roles().length
    ? 'You are signed in as a viewer: you can follow the queue, but not decide.'
    : 'You are signed in, but with no role in toolgate: none of your groups is mapped to one. Ask its admin.';
  $('viewer-notice').hidden = canDecide();
}
