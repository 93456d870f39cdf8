// The filters: by conversation, tool, caller, team, risk and outcome; and the
// inbox's order, grouping and view.

import { $ } from './dom.js';
import { state } from './state.js';
import { renderInbox } from './inbox.js';
import { loadHistory, renderHistory } from './history.js';

// FIELDS are the filters' inputs, by the query parameter each is kept in.
const FIELDS = { conversation: 'f-conversation', tool: 'f-tool', caller: 'f-caller', team: 'f-team', risk: 'f-risk', sort: 'f-sort', group: 'f-group', view: 'f-view', status: 'f-status' };

export const filters = () => Object.fromEntries(Object.entries(FIELDS).map(([k, id]) => [k, $(id).value.trim()]));

// riskRank orders risks: high 3, medium 2, low 1, none 0.
export const riskRank = (r) => ({ high: 3, medium: 2, low: 1 })[r] || 0;

export function matches(e, f) {
  return (!f.conversation || e.conversationId === f.conversation) && (!f.tool || e.toolName === f.tool) &&
    (!f.caller || e.callerBotId === f.caller) && (!f.team || e.team === f.team) && (!f.risk || riskRank(e.risk) >= riskRank(f.risk));
}

let filterTimer = 0;
function onFilter() {
  saveFilters();
  renderInbox();
  if (state.view !== 'history') return;
  renderHistory();
  clearTimeout(filterTimer);
  filterTimer = setTimeout(loadHistory, 250);
}
for (const id of ['f-conversation', 'f-tool', 'f-caller', 'f-team']) $(id).addEventListener('input', onFilter);
for (const id of ['f-risk', 'f-sort', 'f-group', 'f-view', 'f-status']) $(id).addEventListener('change', onFilter);
$('filters').addEventListener('submit', (ev) => ev.preventDefault());
const clear = () => {
  clearFilters();
  onFilter();
};
$('f-clear').addEventListener('click', clear);
$('empty-clear').addEventListener('click', clear);

// clearFilters empties them without reloading: a link shows its call
// whatever they said.
export function clearFilters() {
  for (const id of Object.values(FIELDS)) $(id).value = '';
  saveFilters();
}

// Filters live in the query string, so a reload or a shared link keeps them.
function saveFilters() {
  const q = new URLSearchParams(Object.entries(filters()).filter(([, v]) => v));
  const s = q.toString();
  history.replaceState(null, '', location.pathname + (s ? '?' + s : '') + location.hash);
}

export function loadFilters() {
  const q = new URLSearchParams(location.search);
  for (const [k, id] of Object.entries(FIELDS)) $(id).value = q.get(k) || '';
}
