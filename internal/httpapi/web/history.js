// The history view: decided calls, newest first, each with its timeline.

import { $, h, jsonView } from './dom.js';
import { prettyArgs, ago } from './format.js';
import { PENDING, state, canDecide } from './state.js';
import { api, list } from './api.js';
import { OUTCOMES, SCOPES, decidedBy, signedIn } from './words.js';
import { showSignIn } from './session.js';
import { remember } from './inbox.js';
import { filters, matches } from './filters.js';
import { reveal } from './card.js';

const HISTORY_SHOWN = 300;

export async function loadHistory() {
  const f = filters();
  const params = {};
  if (f.status) params.status = f.status;
  if (f.conversation) params.conversationId = f.conversation;
  if (f.tool) params.toolName = f.tool;
  const ticket = {};
  state.historyLoading = ticket;
  $('history-note').textContent = 'Loading…';
  try {
    const { items } = await list(params);
    if (state.historyLoading !== ticket) return;
    state.history = new Map(items.filter((e) => e.status !== PENDING).map((e) => [e.pendingId, e]));
    for (const e of items) remember(e);
    renderHistory();
  } catch (err) {
    if (state.historyLoading !== ticket) return;
    if (err.status === 401) return showSignIn('Your token is no longer accepted. Sign in again.');
    $('history-note').textContent = 'Could not load the history: ' + err.message;
  }
}

const when = (e) => e.decisionTime || (e.lastTransition && e.lastTransition.at) || e.requestedAt;

export function renderHistory() {
  if (!state.history) return;
  const f = filters();
  // A linked call is shown whatever the list holds: it may be older
  // than the newest HISTORY_SHOWN.
  const linked = state.linked && state.linked.entry.status !== PENDING ? state.linked : null;
  if (linked && !state.history.has(linked.id)) state.history.set(linked.id, linked.entry);
  const all = [...state.history.values()]
    .filter((e) => matches(e, f) && (!f.status || e.status === f.status))
    .sort((a, b) => when(b) - when(a));
  const rows = all.slice(0, HISTORY_SHOWN);
  if (linked && !rows.some((e) => e.pendingId === linked.id)) rows.push(state.history.get(linked.id));
  const open = new Set([...$('rows').querySelectorAll('.row[data-open]')].map((r) => r.dataset.id));
  if (linked && !linked.shown) open.add(linked.id);
  $('rows').replaceChildren(...rows.map((e) => buildRow(e, open.has(e.pendingId))));
  if (linked && !linked.shown) {
    linked.shown = true;
    const row = $('rows').querySelector(`.row[data-id="${CSS.escape(linked.id)}"]`);
    if (row) {
      row.scrollIntoView({ block: 'center' });
      row.querySelector('button[data-action="timeline"]').focus({ preventScroll: true });
    }
  }
  $('history-empty').hidden = rows.length > 0;
  $('history-note').textContent = all.length > rows.length
    ? `The latest ${rows.length} of ${all.length} calls.`
    : rows.length ? `${rows.length} ${rows.length === 1 ? 'call' : 'calls'}, newest first.` : '';
}

function buildRow(e, open) {
  // A run whose executor was lost may have done its work: not a failure.
  const [label, tone] = e.outcomeUnknown ? ['Result unknown', 'wait'] : OUTCOMES[e.status] || [e.status, 'muted'];
  const who = decidedBy(e);
  const t = when(e);
  const detailsId = `d-${e.pendingId}`;
  const toggle = h('button', { type: 'button', class: 'btn btn-quiet btn-small', 'aria-expanded': 'false', 'aria-controls': detailsId, 'data-action': 'timeline' }, 'Timeline');
  const details = h('div', { class: 'row-details', id: detailsId, hidden: true });
  const target = state.linked && state.linked.id === e.pendingId;
  const row = h('li', { class: 'row' + (target ? ' row-target' : ''), 'data-id': e.pendingId, 'data-status': e.status },
    h('div', { class: 'row-main' },
      h('span', { class: `pill pill-${tone}` }, label),
      h('div', { class: 'row-what' },
        h('div', { class: 'row-title' },
          h('span', { class: 'tool mono' }, e.toolName),
          e.description && e.description !== e.toolName ? h('span', { class: 'row-desc' }, e.description) : null,
          e.originalArguments ? h('span', { class: 'pill pill-info pill-tiny' }, 'edited') : null,
          e.rerunOf ? h('span', { class: 'pill pill-info pill-tiny', title: `Run again, as a person asked, after ${e.rerunOf}'s outcome was unknown` }, 'run again') : null,
          e.secretsMasked ? h('span', { class: 'pill pill-info pill-tiny secret-badge', title: 'Its arguments hold what looks like a credential, shown as [redacted]' }, 'Secret') : null,
          e.decisionScope && e.decisionScope !== 'once' ? h('span', { class: 'pill pill-muted pill-tiny' }, SCOPES[e.decisionScope] || e.decisionScope) : null),
        h('div', { class: 'row-sub' },
          who ? h('span', {}, 'by ', h('span', { class: 'row-who' }, who)) : null,
          e.deciderViaGroup ? h('span', { class: 'row-group', title: `The call's approvers name the group ${e.deciderViaGroup}, which ${who} is in` }, `via group ${e.deciderViaGroup}`) : null,
          e.deciderIdentity ? h('span', { class: 'row-signin' }, signedIn(e.deciderIdentity)) : null,
          e.statusReason ? h('span', { class: 'row-reason' }, `“${e.statusReason}”`) : null,
          h('span', { class: 'mono row-conv' }, e.conversationId))),
      h('div', { class: 'row-end' },
        h('time', { 'data-since': t, datetime: new Date(t).toISOString(), title: new Date(t).toLocaleString() }, ago(t)),
        toggle)),
    details);
  const expand = async () => {
    const opening = details.hidden;
    details.hidden = !opening;
    toggle.setAttribute('aria-expanded', String(opening));
    if (opening) row.dataset.open = ''; else delete row.dataset.open;
    if (!opening || details.dataset.loaded) return;
    details.replaceChildren(h('p', { class: 'muted' }, 'Loading…'));
    try {
      const items = await api('GET', `v1/tool-calls/${encodeURIComponent(e.pendingId)}/history`);
      details.dataset.loaded = '1';
      details.replaceChildren(buildTimeline(e, items));
    } catch (err) {
      details.replaceChildren(h('p', { class: 'field-error' }, 'Could not load the timeline: ' + err.message));
    }
  };
  toggle.addEventListener('click', expand);
  if (open) expand();
  return row;
}

function buildTimeline(e, items) {
  const frag = document.createDocumentFragment();
  frag.append(h('ol', { class: 'timeline' }, items.map((it) => h('li', { 'data-event': it.event, title: `${it.event} → ${it.to || ''}${it.actor ? ` by ${it.actor}` : ''}` },
    h('time', { datetime: new Date(it.at).toISOString() }, new Date(it.at).toLocaleString()),
    h('span', { class: 'tl-event' }, happened(it, e)),
    it.reason ? h('span', { class: 'tl-reason' }, it.reason) : null))));
  const argBlock = (label, raw) => h('div', { class: 'args' }, h('div', { class: 'args-label' }, label), jsonView(prettyArgs(raw)));
  if (e.originalArguments) {
    frag.append(h('div', { class: 'args-pair' },
      argBlock('Asked with', e.originalArguments),
      argBlock('Ran with (edited)', e.toolArguments)));
  } else {
    const args = argBlock('Arguments', e.toolArguments);
    if (e.secretsMasked) {
      // Shown in clear to a role the policy's reveal names, recorded.
      const err = h('p', { class: 'reveal-error', role: 'alert', hidden: true });
      args.firstChild.append(' ', h('button', { type: 'button', class: 'btn btn-quiet btn-small', 'data-action': 'reveal',
        title: 'Show the arguments as they are: toolgate records that you saw them', onclick: (ev) => reveal(args.parentNode, e, ev.currentTarget) }, 'Show'));
      args.append(err);
    }
    frag.append(args);
  }
  if (e.result !== undefined && e.result !== null) frag.append(argBlock(e.respondedBy ? `Result (answered by ${e.respondedBy})` : 'Result', e.result));
  if (e.error) frag.append(h('p', { class: 'field-error' }, e.error));
  if (e.outcomeUnknown && canDecide()) frag.append(rerunForm(e));
  return frag;
}

// rerunForm runs once more a call whose outcome is unknown, when the
// approver has checked what its lost run did: a new call, recorded as
// their decision.
function rerunForm(e) {
  const reason = h('input', { class: 'reason', autocomplete: 'off', 'aria-label': 'Why run it again', placeholder: 'What you checked (recorded)', maxlength: 4096 });
  const out = h('p', { role: 'status' });
  const run = h('button', { type: 'submit', class: 'btn btn-approve btn-small', 'data-action': 'rerun',
    title: 'The tool may have run: run it once more only if you know it did not, or that twice does no harm' }, 'Run again');
  const form = h('form', { class: 'rerun' }, reason, run, out);
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    run.disabled = true;
    try {
      const again = await api('POST', `v1/tool-calls/${encodeURIComponent(e.pendingId)}/rerun`, { reason: reason.value });
      out.className = '';
      out.textContent = `Running again as ${again.pendingId}.`;
    } catch (ex) {
      out.className = 'field-error';
      out.textContent = 'Not run again: ' + ex.message;
      run.disabled = false;
    }
  });
  return form;
}

// who names an actor for people: an executor process by its credential
// ("executor", not "executor/host-7-4121": the step's title has it all).
function who(actor) {
  return actor ? actor.split('/')[0] : 'toolgate';
}

// BY says what decided, when it was not a person.
const BY = { rule: 'a policy rule', grant: 'a grant', policy: 'the policy', timeout: 'the deadline', classifier: "the agent's classifier", channel: "the agent's own channel", reviewer: 'a reviewer' };

// happened says one step of e's history in plain words.
function happened(it, e) {
  const by = BY[it.decidedBy];
  const asker = e.callerBotId;
  switch (it.event) {
    case 'ask': return `Asked by ${asker}; waits for a person`;
    case 'schedule': return by === 'a grant' ? `Asked by ${asker}; runs without asking: a grant covers it` : `Asked by ${asker}; runs without asking${by ? ` (${by})` : ''}`;
    case 'deny': return `Asked by ${asker}; refused by ${by || 'the policy'}`;
    case 'approve': return it.decidedBy === 'quorum' ? `Approved by ${who(it.actor)}, completing the quorum` : by ? `Approved by ${by}` : `Approved by ${who(it.actor)}`;
    case 'vote': return `${who(it.actor)} voted`;
    case 'reject': return by ? `Rejected by ${by}` : `Rejected by ${who(it.actor)}`;
    case 'respond': return `Answered by ${who(it.actor)} with a result; the tool did not run`;
    case 'escalate': return 'Escalated: more people may decide it';
    case 'timeout': return 'Nobody decided in time';
    case 'overdue': return 'Past its deadline, still waiting';
    case 'remind': return 'Reminded the approvers';
    case 'cancel': return `Cancelled by ${who(it.actor)}`;
    case 'start': return `Started running on ${who(it.actor)}`;
    case 'reclaim': return `Taken over by ${who(it.actor)}: the last run stopped reporting`;
    case 'succeed': return 'Finished';
    case 'fail': return 'Failed';
    case 'review': return `Reviewed by ${who(it.actor)}`;
    case 'revealed': return `Arguments shown in clear to ${who(it.actor)}`;
    default: return `${it.event} by ${who(it.actor)}`;
  }
}
