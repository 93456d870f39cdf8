// Grants from a card: what "Allow for this session…" and "Always
// allow…" would let through, said before anyone grants, and the panel
// that makes one: how far (an argument pattern), how long, how often.

import { h } from './dom.js';
import { api, throttled } from './api.js';
import { decide } from './decisions.js';
import { openPanel, closePanels } from './panel.js';

// DURATIONS are the lifetimes a grant is offered with, 8 hours first.
const DURATIONS = [['8 hours', 8 * 3600e3], ['1 hour', 3600e3], ['24 hours', 24 * 3600e3], ['7 days', 7 * 24 * 3600e3], ['until revoked', 0]];

function previewURL(e, scope, match) {
  const q = new URLSearchParams({ scope });
  if (match) q.set('match', match);
  return `v1/tool-calls/${encodeURIComponent(e.pendingId)}/grant-preview?${q}`;
}

// previewGrant asks what a grant of the call would cover (the pattern
// derived from it; the scopes differ in reach, not in pattern) and says it
// beside the buttons before anyone clicks. A call no pattern covers alone,
// or one the policy has approved once only, offers no grant.
export function previewGrant(card, e, session, always, hint) {
  throttled(() => api('GET', previewURL(e, 'session'))).then((p) => {
    card.grantPreview = p;
    hint.dataset.state = 'ready';
    hint.dataset.pattern = p.pattern;
    hint.replaceChildren('grants: ', h('code', { class: 'grant-pattern' }, p.pattern));
    session.title = `Choose how far and how long later calls ${p.pattern} covers in conversation ${e.conversationId} run without asking`;
    always.title = `Choose how far and how long later calls ${p.pattern} covers${e.team ? ` for team ${e.team}` : ''} run without asking`;
  }, (err) => {
    hint.dataset.state = err.status === 400 ? 'none' : 'error';
    if (err.status === 400) {
      // No grant would cover it, or the policy allows none: only "once"
      // is honest.
      for (const b of [session, always]) { b.disabled = true; b.dataset.wasDisabled = '1'; }
      hint.textContent = 'No grant: ' + err.message.replace(/^.*?(toolArguments|scope \w+): /, '');
    } else {
      hint.textContent = 'Could not tell what a grant would cover: ' + err.message;
    }
  });
}

// reach says in words what a grant lets through: "any send_email call in
// conversation newsletter, for 8 hours".
function reach(e, scope, p, match, duration, singleUse) {
  const what = match
    ? `${singleUse ? 'the next' : 'any'} ${e.toolName} call whose ${p.argument} matches “${match}”`
    : p.pattern === e.toolName ? `${singleUse ? 'the next' : 'any'} ${e.toolName} call` : `${singleUse ? 'the next call' : 'calls'} ${p.pattern} covers`;
  const where = scope === 'session' ? ` in conversation ${e.conversationId}`
    : e.team ? ` of team ${e.team}, in every conversation` : ', in every conversation of every team';
  const [label, ms] = duration;
  return `Lets ${what}${where} run without asking, ${ms ? `for ${label}` : 'until someone revokes it'}.`;
}

// openGrant opens the panel that grants: the call runs now, and later
// calls the grant covers run without asking. It says the grant's reach in
// words as the approver narrows it by the argument the preview names
// (when one is), bounds its life, or makes it single use; the server
// checks each narrowing as it is typed.
export function openGrant(card, e, scope) {
  const p = card.grantPreview;
  if (!p) return;
  const id = `grant-${e.pendingId}`;
  const args = e.toolArguments && typeof e.toolArguments === 'object' ? e.toolArguments : {};
  const value = p.argument && typeof args[p.argument] === 'string' ? args[p.argument] : '';
  // A built-in tool's grant covers its exact argument unless narrowed
  // otherwise; any other tool's, every call of it. Either starts as
  // narrow as the call, its argument's value as it is: the approver
  // widens it with * or by emptying it. (A value shown masked is no
  // pattern: a tool that is not built in then starts at every call.)
  const exact = p.pattern !== e.toolName;
  const match = p.argument ? h('input', { id: `${id}-match`, class: 'grant-match mono', autocomplete: 'off', spellcheck: 'false', maxlength: 1024, placeholder: value }) : null;
  if (match) match.value = exact || !value.includes('[redacted]') ? value : '';
  const life = h('select', { id: `${id}-for`, class: 'grant-for' }, ...DURATIONS.map(([label], i) => h('option', { value: String(i) }, label)));
  const once = h('input', { type: 'checkbox', id: `${id}-once`, class: 'grant-once' });
  const said = h('p', { class: 'grant-reach', role: 'status' });
  const err = h('p', { class: 'field-error', role: 'alert', hidden: true });
  const allow = h('button', { type: 'submit', class: 'btn btn-approve', 'data-action': 'confirm-grant' }, scope === 'always' ? 'Run it and always allow' : 'Run it and allow');
  const narrowed = () => (match && match.value.trim() !== (exact ? value : '') ? match.value.trim() : '');
  let asked = 0;
  const say = () => {
    const m = narrowed();
    said.textContent = reach(e, scope, p, m, DURATIONS[Number(life.value)], once.checked);
    if (!m) { err.hidden = true; allow.disabled = false; return; }
    // The server says whether the narrowing covers the call approved.
    const n = ++asked;
    allow.disabled = true;
    api('GET', previewURL(e, scope, m)).then(() => {
      if (n === asked) { err.hidden = true; allow.disabled = false; }
    }, (ex) => {
      if (n !== asked) return;
      err.textContent = ex.message.replace(/^.*?grantMatch: /, '');
      err.hidden = false;
    });
  };
  for (const el of [match, life, once].filter(Boolean)) el.addEventListener('input', say);
  const form = h('form', { class: 'panel panel-grant' },
    h('p', { class: 'panel-title' }, scope === 'always' ? 'Run this call, and always allow calls like it' : 'Run this call, and allow calls like it in this conversation'),
    ...(match ? [h('label', { for: match.id }, `Only calls whose ${p.argument} matches (* for any text; empty: ${exact ? 'this exact one' : `any ${e.toolName} call`})`), match] : []),
    h('div', { class: 'grant-bounds' },
      h('label', { for: life.id }, 'For '), life,
      h('label', { for: once.id, class: 'check' }, once, ' Only the next call (single use)')),
    said, err,
    h('div', { class: 'panel-actions' },
      allow,
      h('button', { type: 'button', class: 'btn btn-quiet', 'data-action': 'cancel', onclick: () => closePanels(card) }, 'Cancel')));
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    if (allow.disabled) return;
    const body = { approved: true, scope, forMs: DURATIONS[Number(life.value)][1] };
    if (once.checked) body.singleUse = true;
    const m = narrowed();
    if (m) body.grantMatch = m;
    if (!body.forMs) delete body.forMs;
    decide(card, e, body);
  });
  say();
  openPanel(card, form, match || life);
}
