// What a call's entry says, in words: how its state reads, who may
// decide it, and what became of it.

import { PENDING, state, canDecide, groups } from './state.js';

// How each state reads to a person, and its colour.
export const OUTCOMES = {
  PENDING_APPROVAL: ['Waiting', 'wait'],
  SCHEDULED_FOR_EXECUTION: ['Scheduled', 'info'],
  APPROVED_READY_FOR_EXECUTION: ['Approved', 'ok'],
  REJECTED_BY_USER: ['Rejected', 'bad'],
  REJECTED_BY_TIMEOUT: ['Timed out', 'bad'],
  REJECTED_BY_POLICY: ['Denied by policy', 'bad'],
  EXECUTING: ['Running', 'info'],
  COMPLETED_SUCCESS: ['Succeeded', 'ok'],
  COMPLETED_FAILURE: ['Failed', 'bad'],
  CANCELLED_BY_SYSTEM: ['Cancelled', 'muted'],
};

export const SCOPES = { task: 'for this task', session: 'for this session', always: 'always' };

// A policy's risk: line shown first on a card.
export const RISKS = { high: 'High risk', medium: 'Medium risk', low: 'Low risk' };

// whyNot says why the signed-in user may not decide e, or '' when they may.
export function whyNot(e) {
  const me = state.me ? state.me.id : '';
  if (!canDecide()) return '';
  if (e.callerBotId === me) return 'You asked for this call, so someone else decides it.';
  const who = deciders(e);
  if (who && !admits(who, me)) return `Only ${joinNames(who.map(person))} can decide this call.`;
  const mine = (e.votes || []).find((v) => v.by === me);
  if (mine && mine.approve) return 'You approved this call; it waits for the others its quorum needs.';
  if (mine) return 'You rejected this call; it waits for the others to decide.';
  return '';
}

const GROUP = 'group:';

// admits says whether a list of people (users and group:NAME) admits
// me: named, or in a group it names (machine.admits).
function admits(who, me) {
  const mine = groups();
  return who.includes(me) || who.some((u) => u.startsWith(GROUP) && mine.includes(u.slice(GROUP.length)));
}

// person is an entry of a list of people as it reads: a user's name, or
// "members of payments-leads".
function person(u) {
  return u.startsWith(GROUP) ? `members of ${u.slice(GROUP.length)}` : u;
}

// deciders are who may decide e now, as toolgate counts them
// (machine.Entry.Deciders): its quorum's members, else its approvers,
// widened by each escalation tier reached; null: any approver.
function deciders(e) {
  let base = null;
  if (e.quorum && e.quorum.of && e.quorum.of.length) base = e.quorum.of;
  else if (e.userIdToApprove) base = [e.userIdToApprove];
  else if (e.approvers && e.approvers.length) base = e.approvers;
  if (!base) return null;
  const out = [...base];
  for (const t of (e.escalations || []).slice(0, e.escalated || 0)) {
    for (const u of t.to) if (!out.includes(u)) out.push(u);
  }
  return out;
}

// quorumText says how far a call under a quorum is: "1 of 2 approvals
// (alice) · still needed: 1 of bob, carol". A decided call needs nobody
// more: it says what its votes were.
export function quorumText(e) {
  const yes = (e.votes || []).filter((v) => v.approve).map((v) => v.by);
  const no = (e.votes || []).filter((v) => !v.approve).map((v) => v.by);
  let s = `${yes.length} of ${e.quorum.required} approvals`;
  if (yes.length) s += ` (${yes.join(', ')})`;
  if (no.length) s += ` · rejected by ${no.join(', ')}`;
  const left = e.quorum.required - yes.length;
  if (e.status !== PENDING || left <= 0) return s;
  const who = deciders(e);
  if (who) {
    const waiting = who.filter((u) => u !== e.callerBotId && !(e.votes || []).some((v) => v.by === u));
    if (waiting.length) s += ` · still needed: ${left} of ${waiting.map(person).join(', ')}`;
  } else {
    s += ` · still needed: ${left} more`;
  }
  return s;
}

// reviewText says what an automated reviewer said of a call it left to
// the humans: "reviewer:bot escalated, leaning reject: it touches a
// .env file".
export function reviewText(r) {
  let s = `${r.by} ${r.refused ? `approved, refused (${r.refused})` : 'escalated'}`;
  if (r.lean && !r.refused) s += `, leaning ${r.lean}`;
  return r.reason ? `${s}: ${r.reason}` : s;
}

function joinNames(names) {
  if (names.length <= 1) return names.join('');
  if (names.length > 4) return names.slice(0, 3).join(', ') + ` or ${names.length - 3} others`;
  return names.slice(0, -1).join(', ') + ' or ' + names[names.length - 1];
}

export function decidedBy(e) {
  return e.approvedOrRejectedByUserId || (e.lastTransition && e.lastTransition.actor) || '';
}

// signedIn says who a person is at the OpenID provider that signed them
// in (an entry's deciderIdentity, a transition's identity).
export function signedIn(id) {
  const who = id.name && id.email ? `${id.name} <${id.email}>` : (id.name || id.email || '');
  return `${who ? who + ', ' : ''}signed in at ${id.iss} as ${id.sub}`;
}

// byWhat says what made e's latest decision (e.decidedBy), in words
// that follow a verb: " by alice", " by a rule of the policy".
function byWhat(e) {
  const who = decidedBy(e);
  switch (e.decidedBy) {
    case 'rule': return ' by a rule of the policy';
    case 'grant': return ' by a grant';
    case 'policy': return ' by the policy';
    case 'quorum': return who ? ` by a quorum (the last: ${who})` : ' by a quorum';
    case 'classifier': return who ? ` by the agent's own classifier (${who})` : " by the agent's own classifier";
    case 'channel': return who ? ` in the agent's own prompt (${who})` : " in the agent's own prompt";
    case 'reviewer': return who ? ` by the automated reviewer ${who.replace(/^reviewer:/, '')}` : ' by an automated reviewer';
    default: return who ? ` by ${who}` : '';
  }
}

// verdict says in a few words what became of e: "approved by alice".
export function verdict(e) {
  const by = byWhat(e);
  if (e.respondedBy) return `answered by ${e.respondedBy}`;
  if (e.decisionScope || e.status === 'APPROVED_READY_FOR_EXECUTION') {
    const scope = SCOPES[e.decisionScope] ? ` ${SCOPES[e.decisionScope]}` : '';
    return `approved${scope}${by}`;
  }
  switch (e.status) {
    case 'REJECTED_BY_USER': return `rejected${by}`;
    case 'REJECTED_BY_TIMEOUT': return 'rejected: nobody answered in time';
    case 'CANCELLED_BY_SYSTEM': return `cancelled${by}`;
    case 'REJECTED_BY_POLICY': return e.decidedBy ? `denied${by}` : 'denied by policy';
    default: return (OUTCOMES[e.status] || [e.status])[0].toLowerCase() + by;
  }
}

export function capitalize(s) { return s ? s[0].toUpperCase() + s.slice(1) : s; }
