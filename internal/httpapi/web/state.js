// What the page holds: the signed-in user, the calls it shows, and what
// this browser remembers between visits.

export const PENDING = 'PENDING_APPROVAL';

export const saved = {
  get token() { return localStorage.getItem('toolgate.token') || ''; },
  set token(v) { if (v) localStorage.setItem('toolgate.token', v); else localStorage.removeItem('toolgate.token'); },
  get user() { return localStorage.getItem('toolgate.user') || ''; },
  set user(v) { if (v) localStorage.setItem('toolgate.user', v); else localStorage.removeItem('toolgate.user'); },
};

export const state = {
  me: null,
  pending: new Map(), // pendingId → entry
  cards: new Map(), // pendingId → card element
  history: null, // pendingId → entry, once the history view has loaded
  historyLoading: null,
  seenConversations: new Set(),
  seenTools: new Set(),
  seenCallers: new Set(),
  seenTeams: new Set(),
  view: 'inbox',
  es: null,
  retries: 0,
  retryTimer: 0,
  everLive: false,
  listed: false,
  linked: null, // {id, entry}: the call a link opened
  current: null, // the pendingId of the card the keys act on
  selected: new Set(), // pendingIds ticked for a decision together
  batching: false, // a decision of the selected calls is in flight
  grants: null, // the grants in force, once listed
};

export const roles = () => (state.me && state.me.roles) || [];
// The groups the signed-in person is in, as their sign-in says: a call
// whose approvers name one (group:NAME) is theirs to decide.
export const groups = () => (state.me && state.me.groups) || [];
export const canDecide = () => roles().includes('approver') || roles().includes('admin');
