// What the page tells the approver without being asked: the calls that
// arrive while it is open (a "New" mark on each card until it has been in
// view a moment, an "N new" pill at the top of the list while one is out
// of view, the count in the title and on the favicon, and a browser
// notification for those who turn them on), and what a decision of
// theirs did.

import { $, h, announce } from './dom.js';
import { state } from './state.js';
import { SCOPES } from './words.js';
import { setCurrent } from './keys.js';

// How long a new card is in view, the page showing, before it counts
// as seen; and how long a decision's confirmation stays.
const SEEN_AFTER_MS = 2500;
const CONFIRM_MS = 6000;

// The cards not yet seen: card → {known, inView, timer, above}. known:
// the observer has said where it is (until then it is neither in view
// nor out of it).
const unseen = new Map();

const observer = new IntersectionObserver((changes) => {
  for (const c of changes) {
    const u = unseen.get(c.target);
    if (!u) continue;
    u.known = true;
    u.inView = c.isIntersecting;
    u.above = c.boundingClientRect.top < 0;
  }
  renderNew();
}, { threshold: 0.3 });

// markNew marks a card that arrived while the page was open.
export function markNew(card) {
  card.classList.add('card-new', 'card-unseen');
  const title = card.querySelector('.card-title h2');
  if (title) title.after(h('span', { class: 'pill pill-new' }, 'New'));
  unseen.set(card, { known: false, inView: false, timer: 0, above: false });
  observer.observe(card);
}

export const isNew = (card) => unseen.has(card);

function seen(card) {
  const u = unseen.get(card);
  if (!u) return;
  clearTimeout(u.timer);
  unseen.delete(card);
  observer.unobserve(card);
  card.classList.remove('card-unseen');
  for (const p of card.querySelectorAll('.pill-new')) p.remove();
}

// renderNew counts a card seen once it has stayed in view a moment, and
// shows the pill while new cards are out of view.
export function renderNew() {
  const visible = document.visibilityState === 'visible';
  const away = [];
  for (const [card, u] of unseen) {
    // Decided, or drawn anew: that card is gone.
    if (state.cards.get(card.dataset.id) !== card) { seen(card); continue; }
    if (u.known && u.inView && visible) {
      if (!u.timer) u.timer = setTimeout(() => { seen(card); renderNew(); }, SEEN_AFTER_MS);
      continue;
    }
    clearTimeout(u.timer);
    u.timer = 0;
    if (u.known && card.isConnected) away.push(card);
  }
  const pill = $('new-pill');
  pill.hidden = !away.length || state.view !== 'inbox';
  if (pill.hidden) return;
  const newest = away[away.length - 1];
  pill.newest = newest;
  $('new-pill-text').textContent = `${away.length} new`;
  $('new-pill-arrow').textContent = unseen.get(newest).above ? '↑' : '↓';
  pill.setAttribute('aria-label', `${away.length} new ${away.length === 1 ? 'call' : 'calls'} out of view: show the newest`);
  // It sits under the top bar and the batch bar, which stay in view.
  const bars = [document.querySelector('.topbar'), $('batch')].filter((el) => el && !el.hidden);
  $('new-wrap').style.top = `${bars.reduce((sum, el) => sum + el.offsetHeight, 0) + 8}px`;
}

$('new-pill').addEventListener('click', () => {
  const card = $('new-pill').newest;
  if (!card || !card.isConnected) return;
  card.scrollIntoView({ block: 'center' });
  setCurrent(card, true);
});

document.addEventListener('visibilitychange', renderNew);

// showCount puts the number of waiting calls in the title and on the
// favicon, where a tab in the background still shows it.
export function showCount(n) {
  document.title = n ? `(${n}) toolgate inbox` : 'toolgate inbox';
  drawIcon(n);
}

let icon = null; // favicon.svg's text, once read
let drawn = 0;

async function drawIcon(n) {
  if (drawn === n) return;
  drawn = n;
  icon = icon || fetch('favicon.svg').then((r) => (r.ok ? r.text() : '')).catch(() => '');
  const svg = await icon;
  const link = document.querySelector('link[rel="icon"]');
  if (!svg || !link || drawn !== n) return;
  if (!n) { link.href = 'favicon.svg'; return; }
  const label = n > 99 ? '99+' : String(n);
  const badge = `<circle cx="23" cy="9" r="9" fill="#dc2626"/><text x="23" y="${label.length > 1 ? 12.5 : 13.5}" `
    + `font-family="Arial,sans-serif" font-size="${[13, 11, 8][label.length - 1]}" font-weight="700" fill="#fff" text-anchor="middle">${label}</text>`;
  link.href = 'data:image/svg+xml,' + encodeURIComponent(svg.replace('</svg>', badge + '</svg>'));
}

// Browser notifications are asked for only by a click on their button,
// and sent only while the page is not in front of the approver.
const NOTIFY_KEY = 'toolgate.notify';
const notifying = () => 'Notification' in window && Notification.permission === 'granted' && localStorage.getItem(NOTIFY_KEY) === '1';

function renderNotify() {
  const b = $('notify');
  b.hidden = !('Notification' in window);
  if (b.hidden) return;
  const denied = Notification.permission === 'denied';
  b.disabled = denied;
  b.setAttribute('aria-pressed', notifying() ? 'true' : 'false');
  b.textContent = denied ? 'Notifications blocked by the browser' : notifying() ? 'Notifications on' : 'Notify me of new calls';
  b.title = notifying() ? 'Click to stop them' : denied ? 'Allow them in the browser\'s site settings' : 'A browser notification for each new call while this page is in the background';
}

$('notify').addEventListener('click', async () => {
  if (notifying()) {
    localStorage.removeItem(NOTIFY_KEY);
  } else if (await Notification.requestPermission() === 'granted') {
    localStorage.setItem(NOTIFY_KEY, '1');
  }
  renderNotify();
});
renderNotify();

// notifyNew sends a browser notification of a new call, when they are
// on and the approver is looking elsewhere; clicking it opens the call.
export function notifyNew(e) {
  if (!notifying() || (document.visibilityState === 'visible' && document.hasFocus())) return;
  try {
    const n = new Notification(`${e.toolName} waits for a decision`, {
      body: `${e.callerBotId} asks${e.description ? ': ' + e.description : ''}`, tag: e.pendingId, icon: 'favicon.svg',
    });
    n.addEventListener('click', () => {
      window.focus();
      location.hash = `#/calls/${encodeURIComponent(e.pendingId)}`;
      n.close();
    });
  } catch { /* a browser that shows them only from a service worker */ }
}

// confirmDecision says, for a few seconds, what the approver's decision
// of e (body, as sent) did, with a link to the call in the history.
// There is no undo: an approved call may already be running.
export function confirmDecision(e, body) {
  let what = 'Approved';
  if (body.result !== undefined) what = 'Answered';
  else if (!body.approved) what = 'Rejected';
  else if (body.arguments) what = 'Approved with edits';
  const scope = body.scope && SCOPES[body.scope] ? `, and allowed ${SCOPES[body.scope]}` : '';
  const reason = body.reason ? ` — “${body.reason}”` : '';
  const text = `${what} ${e.toolName} (${e.pendingId})${scope}${reason}`;
  $('toast-text').textContent = text;
  announce(text);
  $('toast-link').href = `#/calls/${encodeURIComponent(e.pendingId)}`;
  $('toast').dataset.shown = '1';
  holdToast();
}

let toastTimer = 0;
function holdToast() {
  clearTimeout(toastTimer);
  toastTimer = setTimeout(() => { delete $('toast').dataset.shown; }, CONFIRM_MS);
}
// It stays while the pointer or the focus is on it.
$('toast').addEventListener('mouseenter', () => clearTimeout(toastTimer));
$('toast').addEventListener('focusin', () => clearTimeout(toastTimer));
$('toast').addEventListener('mouseleave', holdToast);
$('toast').addEventListener('focusout', holdToast);
