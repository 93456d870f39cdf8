// Keyboard triage: one card is current (outlined, and the one the keys
// act on); j and k move it, a approves it once, r opens its reject panel,
// e its edit panel, x ticks it for the batch bar, and ? shows the keys.
//
// A key does what the card's own button does, by pressing that button:
// a key never reaches a decision the buttons do not offer (a grant opens
// only from its button, where its panel says its reach). Keys do nothing
// while a field takes typing, with a modifier held, or outside the inbox.

import { $, announce } from './dom.js';
import { state } from './state.js';

// The current card, when it is on the page (a filter may hide it).
function currentCard() {
  const card = state.current && state.cards.get(state.current);
  return card && card.isConnected ? card : null;
}

// markCurrent outlines the current card, and only it.
export function markCurrent() {
  for (const card of $('cards').querySelectorAll('article.card')) {
    const on = card.dataset.id === state.current;
    card.classList.toggle('card-current', on);
    if (on) card.setAttribute('aria-current', 'true'); else card.removeAttribute('aria-current');
  }
}

// setCurrent makes card current; with focus, it takes the focus (so a
// screen reader reads it, and Tab goes on into it) and comes into view.
export function setCurrent(card, focus) {
  state.current = card ? card.dataset.id : null;
  markCurrent();
  if (!card || !focus) return;
  card.tabIndex = -1;
  card.focus({ preventScroll: true });
  card.scrollIntoView({ block: 'nearest' });
}

function move(step) {
  const cards = [...$('cards').querySelectorAll('article.card')];
  if (!cards.length) return;
  const i = cards.indexOf(currentCard());
  setCurrent(cards[i < 0 ? 0 : Math.min(cards.length - 1, Math.max(0, i + step))], true);
}

// press presses the current card's button for action, when it shows
// one, and says why not when it does not.
function press(action, missing) {
  const card = currentCard();
  if (!card) { announce('No call is current: press j for the first.'); return; }
  if (action !== 'select') {
    // A panel open in place of the buttons is where this call is decided.
    const panel = card.querySelector('.panel');
    if (panel) { panel.querySelector('input, textarea, select, button').focus(); return; }
  }
  const b = card.querySelector(action === 'select' ? 'input.select' : `.actions button[data-action="${action}"]`);
  if (b && !b.disabled) { b.click(); return; }
  const note = card.querySelector('.card-note');
  announce(note ? note.textContent : missing);
}

const ACTIONS = {
  j: () => move(1),
  k: () => move(-1),
  a: () => press('approve', 'This call cannot be approved now.'),
  r: () => press('reject', 'This call cannot be rejected now.'),
  e: () => press('edit', 'This call offers no edits.'),
  x: () => press('select', 'This call cannot be selected.'),
  '?': toggleHelp,
};

function toggleHelp() {
  const d = $('keys-help');
  if (d.open) d.close(); else d.showModal();
}

// typing says whether el takes text, where a letter is a letter.
function typing(el) {
  if (!(el instanceof Element)) return false;
  if (el.matches('textarea, select, [contenteditable]:not([contenteditable="false"])')) return true;
  return el.tagName === 'INPUT' && !['checkbox', 'radio', 'button', 'submit', 'reset'].includes(el.type);
}

// A key that acted is not typed as well into the field it opened (r's
// reason). Preventing its keydown is enough for a person's keyboard; a
// browser driven over the DevTools protocol sends the character as an
// event of its own, a keypress, which is dropped.
let swallow = '';

document.addEventListener('keydown', (ev) => {
  const act = ACTIONS[ev.key];
  if (!act || ev.defaultPrevented || ev.ctrlKey || ev.metaKey || ev.altKey || ev.isComposing || typing(ev.target)) return;
  if (!state.me || state.view !== 'inbox' || $('app').hidden) return;
  if ($('keys-help').open && ev.key !== '?') return;
  // A held key repeats: moving on is fine, deciding the next calls is not.
  if (ev.repeat && ev.key !== 'j' && ev.key !== 'k') return;
  ev.preventDefault();
  swallow = ev.key;
  act();
});
document.addEventListener('keypress', (ev) => { if (ev.key === swallow) ev.preventDefault(); }, true);
document.addEventListener('keyup', () => { swallow = ''; }, true);

// A click on a card (a compact row, say) makes it current, and opens it.
$('cards').addEventListener('click', (ev) => {
  const card = ev.target.closest('article.card');
  if (card && card.dataset.id !== state.current && !ev.target.closest('button, input, select, textarea, a')) setCurrent(card, false);
});

// Whatever takes the focus in a card (a click, Tab) makes it current.
$('cards').addEventListener('focusin', (ev) => {
  const card = ev.target.closest('article.card');
  if (card && card.dataset.id !== state.current) setCurrent(card, false);
});

$('keys-open').addEventListener('click', toggleHelp);
$('keys-close').addEventListener('click', () => $('keys-help').close());
