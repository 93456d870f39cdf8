// The filters: by conversation, tool and outcome.

import { $ } from './dom.js';
import { state } from './state.js';
import { renderInbox } from './inbox.js';
import { loadHistory, renderHistory } from './history.js';

export const filters = () => ({
  conversation: $('f-conversation').value.trim(),
  tool: $('f-tool').value.trim(),
  status: $('f-status').value,
});

export function matches(e, f) {
  return (!f.conversation || e.conversationId === f.conversation) && (!f.tool || e.toolName === f.tool);
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
for (const id of ['f-conversation', 'f-tool']) $(id).addEventListener('input', onFilter);
$('f-status').addEventListener('change', onFilter);
$('filters').addEventListener('submit', (ev) => ev.preventDefault());
const clear = () => {
  $('f-conversation').value = '';
  $('f-tool').value = '';
  $('f-status').value = '';
  onFilter();
};
$('f-clear').addEventListener('click', clear);
$('empty-clear').addEventListener('click', clear);

// clearFilters empties them without reloading: a link shows its call
// whatever they said.
export function clearFilters() {
  $('f-conversation').value = '';
  $('f-tool').value = '';
  $('f-status').value = '';
  saveFilters();
}

// Filters live in the query string, so a reload or a shared link keeps them.
function saveFilters() {
  const f = filters();
  const q = new URLSearchParams();
  if (f.conversation) q.set('conversation', f.conversation);
  if (f.tool) q.set('tool', f.tool);
  if (f.status) q.set('status', f.status);
  const s = q.toString();
  history.replaceState(null, '', location.pathname + (s ? '?' + s : '') + location.hash);
}

export function loadFilters() {
  const q = new URLSearchParams(location.search);
  $('f-conversation').value = q.get('conversation') || '';
  $('f-tool').value = q.get('tool') || '';
  $('f-status').value = q.get('status') || '';
}
