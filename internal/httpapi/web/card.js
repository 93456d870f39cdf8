// A waiting call's card: what it asks, how long it may wait, and the
// buttons and panels that decide it.

import { h, jsonView } from './dom.js';
import { costText, prettyArgs, span, ago } from './format.js';
import { state, canDecide } from './state.js';
import { api } from './api.js';
import { OUTCOMES, RISKS, whyNot, quorumText, reviewText, verdict, capitalize } from './words.js';
import { removeCard } from './inbox.js';
import { decide, renderBatch } from './decisions.js';
import { openPanel, closePanels } from './panel.js';
import { previewGrant, openGrant } from './grant.js';

export function markResolved(card, e) {
  card.classList.add('card-resolved');
  // One quorum state: the decided call's votes, nobody still needed.
  const q = card.querySelector('.quorum');
  if (q && e.quorum) q.textContent = quorumText(e);
  const [label, tone] = OUTCOMES[e.status] || [e.status, 'muted'];
  const pill = card.querySelector('.status-pill');
  if (pill) {
    pill.textContent = label;
    pill.className = `pill status-pill pill-${tone}`;
  }
  const banner = card.querySelector('.card-banner');
  banner.textContent = capitalize(verdict(e)) + (e.statusReason ? ` — “${e.statusReason}”` : '');
  banner.hidden = false;
  for (const el of card.querySelectorAll('.actions, .panel, input.select')) el.remove();
  if (state.selected.delete(e.pendingId)) renderBatch();
  const deadline = card.querySelector('.deadline');
  if (deadline) deadline.remove();
}

function meta(label, value, opts = {}) {
  if (value === '' || value === undefined || value === null) return null;
  return h('div', { class: 'meta-item' + (opts.wide ? ' meta-wide' : '') },
    h('dt', {}, label),
    h('dd', { class: opts.mono ? 'mono' : '', title: opts.title }, value));
}

export function buildCard(e) {
  const card = h('article', { class: 'card', 'data-id': e.pendingId, 'aria-labelledby': `t-${e.pendingId}`, 'data-risk': e.risk || null });
  const args = prettyArgs(e.toolArguments);
  const note = whyNot(e);
  card.dataset.note = note;
  const deciding = canDecide() && !note;
  const select = deciding
    ? h('input', { type: 'checkbox', class: 'select', 'data-action': 'select', 'aria-label': `Select this ${e.toolName} call to decide it with others` })
    : null;
  if (select) {
    select.checked = state.selected.has(e.pendingId);
    select.addEventListener('change', () => {
      if (select.checked) state.selected.add(e.pendingId); else state.selected.delete(e.pendingId);
      renderBatch();
    });
  }

  card.append(
    // What the policy says of the call's risk frames the rest: first.
    // (append, unlike h, would print a null as "null".)
    e.risk ? h('p', { class: `risk risk-${RISKS[e.risk] ? e.risk : 'other'}` }, RISKS[e.risk] || `Risk: ${e.risk}`) : '',
    h('header', { class: 'card-head' },
      h('div', { class: 'card-title' },
        select,
        h('h2', { class: 'tool', id: `t-${e.pendingId}` }, e.toolName),
        h('span', { class: 'pill pill-wait status-pill' }, 'Waiting'),
        e.secretsMasked
          ? h('span', { class: 'pill pill-info secret-badge', title: 'Its arguments hold what looks like a credential, shown as [redacted]' }, 'Secret')
          : null),
      h('p', { class: 'card-when' },
        h('time', { class: 'asked', 'data-since': e.requestedAt, 'data-prefix': 'Asked ', datetime: new Date(e.requestedAt).toISOString(), title: new Date(e.requestedAt).toLocaleString() }, 'Asked ' + ago(e.requestedAt)),
        h('span', { class: 'deadline', 'data-deadline': e.approvalTimeoutAt || '' }))),
    e.description && e.description !== e.toolName
      ? h('p', { class: 'description' }, e.description)
      : '',
    // What a compact row shows beside the summary (the body says it too).
    h('p', { class: 'card-line' }, `from ${e.callerBotId}`, e.team ? ` · team ${e.team}` : '', e.estimatedCost ? ` · est. cost ${costText(e.estimatedCost, e.currency)}` : ''),
    e.quorum ? h('p', { class: 'quorum', role: 'status' }) : '',
    h('ul', { class: 'reviews', hidden: true }),
    h('div', { class: 'card-body' },
      h('div', { class: 'card-info' },
        h('dl', { class: 'meta' },
          meta('Caller', e.callerBotId, { mono: true }),
          meta('Conversation', e.conversationId, { mono: true }),
          meta('Team', e.team),
          meta('Est. cost', costText(e.estimatedCost, e.currency))),
        e.statusReason ? h('div', { class: 'why' }, h('div', { class: 'why-label' }, 'Why it asks'), h('div', { class: 'mono why-text' }, e.statusReason)) : null),
      h('div', { class: 'args' },
        asRead(e.toolArguments),
        h('div', { class: 'args-label' }, 'Arguments',
          e.secretsMasked ? h('button', { type: 'button', class: 'btn btn-quiet btn-small', 'data-action': 'reveal', title: 'Show the arguments as they are: toolgate records that you saw them', onclick: (ev) => reveal(card, e, ev.currentTarget) }, 'Show') : null),
        jsonView(args),
        h('p', { class: 'reveal-error', role: 'alert', hidden: true }),
        e.argumentsDigest
          ? h('p', { class: 'digest', title: 'The SHA-256 of these arguments: an approval binds to exactly them' },
            'Approval binds ', h('code', { class: 'digest-value' }, e.argumentsDigest))
          : null)),
    h('div', { class: 'card-banner', role: 'status' }),
    h('p', { class: 'card-error', role: 'alert', hidden: true }),
  );
  card.querySelector('.card-banner').hidden = true;

  if (deciding) card.append(buildActions(card, e, args));
  else if (note) card.append(h('p', { class: 'card-note' }, note));

  updateCard(card, e);
  return card;
}

// asRead shows arguments a person reads in a shape of their own: an
// email as its recipients, subject and body (its line breaks kept),
// before the arguments as sent; null for any other.
function asRead(args) {
  const s = (k) => (args && typeof args[k] === 'string' ? args[k] : '');
  if (!s('to') || !(s('subject') || s('body'))) return null;
  const line = (label, v) => (v ? [h('dt', {}, label), h('dd', {}, v)] : []);
  return h('div', { class: 'as-read as-email', 'aria-label': 'The email' },
    h('dl', {}, ...line('To', s('to')), ...line('Cc', s('cc')), ...line('Subject', s('subject'))),
    s('body') ? h('p', { class: 'as-read-body' }, s('body')) : null);
}

// reveal asks for the call's arguments as they are, which the policy's
// reveal allows some roles (admin by default) and toolgate records, and
// shows them in place of the masked ones in root (a card, a history
// row); a refusal says why.
export async function reveal(root, e, button) {
  const err = root.querySelector('.reveal-error');
  button.disabled = true;
  try {
    const r = await api('POST', `v1/tool-calls/${encodeURIComponent(e.pendingId)}/reveal`, {});
    root.querySelector('.args pre.json').replaceWith(jsonView(prettyArgs(r.toolArguments)));
    root.querySelector('.args').classList.add('args-revealed');
    button.remove();
    err.hidden = true;
  } catch (ex) {
    err.textContent = 'Not shown: ' + ex.message;
    err.hidden = false;
    button.disabled = false;
  }
}

function buildActions(card, e, args) {
  const btn = (action, label, cls, title) => h('button', { type: 'button', class: `btn ${cls}`, 'data-action': action, title }, label);
  const approve = btn('approve', 'Approve', 'btn-approve', 'Run this call once');
  const session = btn('session', 'Allow for this session…', 'btn-secondary', `Run this call, and later calls like it in conversation ${e.conversationId}, without asking`);
  const always = btn('always', 'Always allow…', 'btn-secondary', e.team ? `Run this call, and add a rule allowing calls like it for team ${e.team}` : 'Run this call, and add a rule allowing calls like it');
  const edit = btn('edit', 'Approve with edits…', 'btn-secondary', 'Change the arguments, then run it');
  const reject = btn('reject', 'Reject…', 'btn-reject', 'Refuse this call and tell the agent why');

  approve.addEventListener('click', () => decide(card, e, { approved: true }));
  session.addEventListener('click', () => openGrant(card, e, 'session'));
  always.addEventListener('click', () => openGrant(card, e, 'always'));
  reject.addEventListener('click', () => openReject(card, e));
  edit.addEventListener('click', () => openEdit(card, e, args));
  // A respondable call may be answered with the tool's result instead.
  const respond = e.respondable && !e.quorum ? btn('respond', 'Answer…', 'btn-secondary', 'Give the agent the tool\'s result yourself: the tool does not run') : null;
  if (respond) respond.addEventListener('click', () => openRespond(card, e));
  if (e.quorum) {
    // Each of its approvers approves this call as submitted, once: no
    // grant (later calls would skip the quorum), no edit.
    approve.title = `Add your approval: the call runs once ${e.quorum.required} approvers have approved it`;
    return h('div', { class: 'actions' }, h('div', { class: 'actions-main' }, approve), reject);
  }

  const hint = h('p', { class: 'grant-hint', 'data-state': 'loading', role: 'status' }, 'grants: …');
  previewGrant(card, e, session, always, hint);
  return h('div', { class: 'actions' },
    // An edit is offered where the policy allows one (editable).
    h('div', { class: 'actions-main' }, approve, session, always, ...(e.notEditable ? [] : [edit]), ...(respond ? [respond] : [])),
    reject,
    hint);
}

export function openReject(card, e) {
  const id = `reason-${e.pendingId}`;
  const input = h('input', { id, class: 'reason', name: 'reason', maxlength: 500, autocomplete: 'off', placeholder: 'e.g. Use the staging account instead' });
  const stop = h('input', { type: 'checkbox', id: `${id}-stop`, name: 'interrupt', 'data-action': 'interrupt' });
  const form = h('form', { class: 'panel panel-reject' },
    h('label', { for: id }, 'Why reject it? The agent is told.'),
    input,
    h('label', { for: `${id}-stop`, class: 'check' }, stop, ' Also stop the agent\'s turn'),
    h('div', { class: 'panel-actions' },
      h('button', { type: 'submit', class: 'btn btn-danger', 'data-action': 'confirm-reject' }, 'Reject call'),
      h('button', { type: 'button', class: 'btn btn-quiet', 'data-action': 'cancel', onclick: () => closePanels(card) }, 'Cancel')));
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    const reason = input.value.trim();
    const body = reason ? { approved: false, reason } : { approved: false };
    if (stop.checked) body.interrupt = true;
    decide(card, e, body);
  });
  openPanel(card, form, input);
}

// openRespond answers a respondable call with a result the approver
// gives (any JSON): the call ends with it, and the tool does not run.
function openRespond(card, e) {
  const id = `respond-${e.pendingId}`;
  const area = h('textarea', { id, class: 'edit-args mono', spellcheck: 'false', rows: 6, 'aria-describedby': `${id}-err`, placeholder: '{"hits": []}' });
  const err = h('p', { class: 'field-error', id: `${id}-err`, role: 'alert', hidden: true });
  const form = h('form', { class: 'panel panel-respond' },
    h('label', { for: id }, 'The tool\'s result, as JSON. The agent gets it as the call\'s result, as yours; the tool does not run.'),
    area, err,
    h('div', { class: 'panel-actions' },
      h('button', { type: 'submit', class: 'btn btn-approve', 'data-action': 'confirm-respond' }, 'Answer call'),
      h('button', { type: 'button', class: 'btn btn-quiet', 'data-action': 'cancel', onclick: () => closePanels(card) }, 'Cancel')));
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    let result;
    try {
      result = JSON.parse(area.value);
    } catch (ex) {
      err.textContent = 'Not valid JSON: ' + String(ex.message || ex).replace(/^JSON\.parse: /, '');
      err.hidden = false;
      return;
    }
    decide(card, e, { result });
  });
  openPanel(card, form, area);
}

// parseArgs checks edited arguments: the API takes a JSON object only.
function parseArgs(text) {
  let v;
  try {
    v = JSON.parse(text);
  } catch (err) {
    return { error: 'Not valid JSON: ' + String(err.message || err).replace(/^JSON\.parse: /, '') };
  }
  if (v === null || typeof v !== 'object' || Array.isArray(v)) return { error: 'The arguments must be a JSON object: { … }.' };
  return { value: v };
}

function openEdit(card, e, args) {
  const id = `edit-${e.pendingId}`;
  const area = h('textarea', { id, class: 'edit-args mono', spellcheck: 'false', rows: Math.min(18, args.split('\n').length + 1), 'aria-describedby': `${id}-err` });
  area.value = args;
  const err = h('p', { class: 'field-error', id: `${id}-err`, role: 'alert', hidden: true });
  const submit = h('button', { type: 'submit', class: 'btn btn-approve', 'data-action': 'confirm-edit' }, 'Approve edited call');
  // What the edit changes, line by line, against the arguments asked.
  const diff = h('pre', { class: 'edit-diff mono', 'aria-label': 'What the edit changes', hidden: true });
  const check = () => {
    const r = parseArgs(area.value);
    err.textContent = r.error || '';
    err.hidden = !r.error;
    area.setAttribute('aria-invalid', r.error ? 'true' : 'false');
    submit.disabled = !!r.error;
    const lines = r.error ? [] : lineDiff(args.split('\n'), prettyArgs(r.value).split('\n'));
    diff.replaceChildren(...lines.map(([op, line]) => h('span', { class: `diff-${op === '+' ? 'add' : 'del'}` }, `${op} ${line}\n`)));
    diff.hidden = !lines.length;
    return r;
  };
  area.addEventListener('input', check);
  const form = h('form', { class: 'panel panel-edit' },
    h('label', { for: id }, 'Arguments to run with'),
    area, err, diff,
    h('div', { class: 'panel-actions' },
      submit,
      h('button', { type: 'button', class: 'btn btn-quiet', 'data-action': 'cancel', onclick: () => closePanels(card) }, 'Cancel'),
      h('span', { class: 'hint' }, 'The agent’s original arguments are kept in the history.')));
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    const r = check();
    if (r.error) { area.focus(); return; }
    const unchanged = JSON.stringify(r.value) === JSON.stringify(e.toolArguments || {});
    decide(card, e, unchanged ? { approved: true } : { approved: true, arguments: r.value });
  });
  openPanel(card, form, area);
}

// lineDiff is what turns lines a into lines b: the lines removed ("-")
// and added ("+"), in order, by their longest common subsequence.
function lineDiff(a, b) {
  const n = a.length, m = b.length;
  const lcs = Array.from({ length: n + 1 }, () => new Array(m + 1).fill(0));
  for (let i = n - 1; i >= 0; i--) for (let j = m - 1; j >= 0; j--) lcs[i][j] = a[i] === b[j] ? lcs[i + 1][j + 1] + 1 : Math.max(lcs[i + 1][j], lcs[i][j + 1]);
  const out = [];
  let i = 0, j = 0;
  while (i < n || j < m) {
    if (i < n && j < m && a[i] === b[j]) { i++; j++; } else if (i < n && (j === m || lcs[i + 1][j] >= lcs[i][j + 1])) out.push(['-', a[i++]]); else out.push(['+', b[j++]]);
  }
  return out;
}

export function setBusy(card, busy) {
  card.classList.toggle('card-busy', busy);
  for (const b of card.querySelectorAll('.actions button, .panel button, .panel input, .panel textarea')) {
    if (busy) { b.dataset.wasDisabled = b.disabled ? '1' : ''; b.disabled = true; } else { b.disabled = b.dataset.wasDisabled === '1'; }
  }
  card.setAttribute('aria-busy', busy ? 'true' : 'false');
}

export function showCardError(card, message, entry) {
  const el = card.querySelector('.card-error');
  el.replaceChildren(h('span', {}, message));
  el.hidden = false;
  card.dataset.sticky = '';
  if (entry) {
    markResolved(card, entry);
    el.append(h('button', { type: 'button', class: 'btn btn-quiet btn-small', 'data-action': 'dismiss', onclick: () => removeCard(card.dataset.id) }, 'Dismiss'));
    const b = el.querySelector('button');
    if (b) b.focus();
  }
}

export function updateCard(card, e) {
  const q = card.querySelector('.quorum');
  if (q && e.quorum) q.textContent = quorumText(e);
  const rv = card.querySelector('.reviews');
  if (rv) {
    rv.replaceChildren(...(e.reviews || []).map((r) => h('li', {}, reviewText(r))));
    rv.hidden = !(e.reviews || []).length;
  }
  const pill = card.querySelector('.status-pill');
  if (pill) {
    pill.textContent = e.overdue ? 'Overdue' : 'Waiting';
    pill.className = `pill status-pill ${e.overdue ? 'pill-bad' : 'pill-wait'}`;
  }
  card.classList.toggle('card-overdue', !!e.overdue);
  const d = card.querySelector('.deadline');
  if (d) {
    d.dataset.deadline = e.approvalTimeoutAt || '';
    d.dataset.autoReject = e.autoRejectOnTimeout ? '1' : '';
    tickDeadline(d);
  }
}

function tickDeadline(el) {
  const at = Number(el.dataset.deadline);
  const card = el.closest('.card');
  const overdue = card && card.classList.contains('card-overdue');
  if (!at) {
    el.textContent = 'No deadline';
    el.className = 'deadline deadline-none';
    return;
  }
  const left = at - Date.now();
  const verb = el.dataset.autoReject ? 'Auto-rejects in' : 'Due in';
  let cls = 'deadline';
  if (left <= 0) {
    el.textContent = overdue || !el.dataset.autoReject ? `Overdue by ${span(-left)}` : 'Rejecting now…';
    cls += ' deadline-late';
  } else {
    el.replaceChildren(`${verb} `, h('strong', {}, span(left)));
    if (left < 60000) cls += ' deadline-late';
    else if (left < 5 * 60000) cls += ' deadline-soon';
  }
  el.className = cls;
  el.title = 'Deadline ' + new Date(at).toLocaleString();
}

// Once a second, every deadline and every "… ago" on the page, in any view.
setInterval(() => {
  for (const el of document.querySelectorAll('.deadline[data-deadline]')) tickDeadline(el);
  for (const el of document.querySelectorAll('time[data-since]')) el.textContent = (el.dataset.prefix || '') + ago(Number(el.dataset.since));
}, 1000);
