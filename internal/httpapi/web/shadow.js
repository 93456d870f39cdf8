// The analytics view's report on the shadow policy.

import { $, h } from './dom.js';
import { num } from './format.js';
import { api } from './api.js';
import { table } from './analytics.js';

// The shadow policy's report, from /v1/policy/shadow/report: how many
// submits were compared against the candidate and how many it would
// decide otherwise, per change of verdict. Shown while there is one to
// report on; a failure to read it hides it.
export async function loadShadow() {
  let report = null;
  try {
    report = await api('GET', 'v1/policy/shadow/report?examples=1');
  } catch {
    // No report to show: the section hides.
  }
  renderShadow(report);
}

function renderShadow(s) {
  const section = $('an-shadow');
  section.hidden = !s || !s.shadowRevision;
  if (section.hidden) return;
  const set = s.set ? 'set now' : 'no longer set';
  $('an-shadow-sub').textContent = `Revision ${s.shadowRevision} (${set}): ${num(s.calls)} ${s.calls === 1 ? 'call' : 'calls'} compared, ${num(s.changed)} would be decided otherwise. Nothing it says is enforced.`;
  if (!s.verdicts.length) {
    $('an-shadow-verdicts').replaceChildren(h('p', { class: 'muted' }, 'No call submitted since it was set.'));
    return;
  }
  const cols = [
    { key: 'name', label: 'In force → shadow', value: (v) => v.name },
    { key: 'calls', label: 'Calls', num: true, value: (v) => num(v.calls), raw: (v) => v.calls },
  ];
  const rows = s.verdicts.map((v) => ({ name: v.from === v.to ? `${v.from} (unchanged)` : `${v.from} → ${v.to}`, calls: v.calls }));
  $('an-shadow-verdicts').replaceChildren(table(cols, rows, 'Shadow policy: calls per change of verdict'));
}
