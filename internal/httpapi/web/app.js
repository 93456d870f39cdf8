// toolgate inbox: every call waiting for a human, live.
//
// The durable state is toolgate's, never this page's: on load, and again
// whenever the event stream drops, the page lists the pending calls and
// then follows /v1/events from the list's eventsSeq, so nothing that
// happened between the list and the stream is missed and a refresh or a
// lost connection always ends in the server's state. Each event carries
// the whole entry as that transition wrote it, so applying them in order
// converges on the truth.
//
// Everything agents send (tool names, arguments, reasons) is put into the
// page as text, never as markup.
'use strict';

(() => {
  const PENDING = 'PENDING_APPROVAL';

  // The event stream's event names: one per kind of transition.
  const SUBJECTS = [
    'tool.approval_required', 'tool.scheduled_execution', 'tool.policy_denied',
    'tool.approval_granted', 'tool.approval_progress', 'tool.approval_rejected', 'tool.approval_escalated', 'tool.approval_timeout',
    'tool.approval_overdue', 'tool.approval_reminder', 'tool.cancelled', 'tool.execution_started', 'tool.execution_succeeded',
    'tool.execution_failed', 'tool.approval_responded', 'tool.approval_reviewed',
  ];

  // How each state reads to a person, and its colour.
  const OUTCOMES = {
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

  const SCOPES = { task: 'for this task', session: 'for this session', always: 'always' };

  // A policy's risk: line shown first on a card.
  const RISKS = { high: 'High risk', medium: 'Medium risk', low: 'Low risk' };

  // How long a card that someone else decided stays, saying so, before it
  // goes; a card showing an error stays until dismissed.
  const RESOLVED_LINGER_MS = 4000;
  const HISTORY_SHOWN = 300;
  const LIST_PAGES = 20;

  const $ = (id) => document.getElementById(id);

  // h builds an element: h('p', {class: 'x'}, 'text', child…). Strings
  // become text nodes, so nothing here is ever parsed as HTML.
  function h(tag, attrs, ...children) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
      else if (k === 'text') el.textContent = v;
      else el.setAttribute(k, v === true ? '' : String(v));
    }
    for (const c of children.flat()) {
      if (c === null || c === undefined || c === false) continue;
      el.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return el;
  }

  // ---- storage ----------------------------------------------------------

  const saved = {
    get token() { return localStorage.getItem('toolgate.token') || ''; },
    set token(v) { if (v) localStorage.setItem('toolgate.token', v); else localStorage.removeItem('toolgate.token'); },
    get user() { return localStorage.getItem('toolgate.user') || ''; },
    set user(v) { if (v) localStorage.setItem('toolgate.user', v); else localStorage.removeItem('toolgate.user'); },
  };

  const state = {
    me: null,
    pending: new Map(), // pendingId → entry
    cards: new Map(), // pendingId → card element
    history: null, // pendingId → entry, once the history view has loaded
    historyLoading: null,
    seenConversations: new Set(),
    seenTools: new Set(),
    view: 'inbox',
    es: null,
    retries: 0,
    retryTimer: 0,
    everLive: false,
    listed: false,
    linked: null, // {id, entry}: the call a link opened
    selected: new Set(), // pendingIds ticked for a decision together
    batching: false, // a decision of the selected calls is in flight
    grants: null, // the grants in force, once listed
  };

  // ---- the API ------------------------------------------------------------

  class APIError extends Error {
    constructor(status, body, fallback) {
      // The API's errors are {error: {code, message, entry}}.
      const detail = (body && body.error) || {};
      super(detail.message || fallback);
      this.status = status;
      this.code = detail.code || '';
      this.entry = detail.entry || null;
    }
  }

  async function api(method, path, body) {
    const headers = { Accept: 'application/json' };
    if (saved.token) headers.Authorization = 'Bearer ' + saved.token;
    if (saved.user) headers['X-Toolgate-User'] = saved.user;
    const init = { method, headers, cache: 'no-store' };
    if (body !== undefined) {
      headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(body);
    }
    let res;
    try {
      res = await fetch(path, init);
    } catch {
      throw new APIError(0, null, 'Could not reach toolgate. Check the connection and try again.');
    }
    let data = null;
    try { data = await res.json(); } catch { /* an empty or non-JSON body */ }
    if (!res.ok) throw new APIError(res.status, data, `${res.status} ${res.statusText}`);
    return data;
  }

  // list reads every page of a list. The first page's eventsSeq is the
  // earliest, so following the stream from it misses nothing of any page.
  async function list(params) {
    const q = new URLSearchParams(params);
    q.set('limit', '1000');
    const items = [];
    let seq = null;
    for (let page = 0; page < LIST_PAGES; page++) {
      const p = await api('GET', 'v1/tool-calls?' + q);
      if (seq === null) seq = p.eventsSeq;
      items.push(...p.items);
      if (!p.nextCursor) break;
      q.set('cursor', p.nextCursor);
    }
    return { items, eventsSeq: seq };
  }

  // ---- who is here --------------------------------------------------------

  const roles = () => (state.me && state.me.roles) || [];
  const canDecide = () => roles().includes('approver') || roles().includes('admin');

  // whyNot says why the signed-in user may not decide e, or '' when they may.
  function whyNot(e) {
    const me = state.me ? state.me.id : '';
    if (!canDecide()) return '';
    if (e.callerBotId === me) return 'You asked for this call, so someone else decides it.';
    const who = deciders(e);
    if (who && !who.includes(me)) return `Only ${joinNames(who)} can decide this call.`;
    const mine = (e.votes || []).find((v) => v.by === me);
    if (mine && mine.approve) return 'You approved this call; it waits for the others its quorum needs.';
    if (mine) return 'You rejected this call; it waits for the others to decide.';
    return '';
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
  // (alice) · still needed: 1 of bob, carol".
  function quorumText(e) {
    const yes = (e.votes || []).filter((v) => v.approve).map((v) => v.by);
    const no = (e.votes || []).filter((v) => !v.approve).map((v) => v.by);
    let s = `${yes.length} of ${e.quorum.required} approvals`;
    if (yes.length) s += ` (${yes.join(', ')})`;
    if (no.length) s += ` · rejected by ${no.join(', ')}`;
    const who = deciders(e);
    const left = e.quorum.required - yes.length;
    if (who) {
      const waiting = who.filter((u) => u !== e.callerBotId && !(e.votes || []).some((v) => v.by === u));
      if (waiting.length) s += ` · still needed: ${left} of ${waiting.join(', ')}`;
    } else {
      s += ` · still needed: ${left} more`;
    }
    return s;
  }

  // reviewText says what an automated reviewer said of a call it left to
  // the humans: "reviewer:bot escalated, leaning reject: it touches a
  // .env file".
  function reviewText(r) {
    let s = `${r.by} ${r.refused ? `approved, refused (${r.refused})` : 'escalated'}`;
    if (r.lean && !r.refused) s += `, leaning ${r.lean}`;
    return r.reason ? `${s}: ${r.reason}` : s;
  }

  function joinNames(names) {
    if (names.length <= 1) return names.join('');
    if (names.length > 4) return names.slice(0, 3).join(', ') + ` or ${names.length - 3} others`;
    return names.slice(0, -1).join(', ') + ' or ' + names[names.length - 1];
  }

  // ---- screens --------------------------------------------------------------

  function show(screen) {
    $('sign-in').hidden = screen !== 'sign-in';
    $('name-prompt').hidden = screen !== 'name';
    $('app').hidden = screen !== 'app';
    $('tabs').hidden = screen !== 'app';
    $('who').hidden = screen !== 'app';
  }

  function showSignIn(message) {
    closeStream();
    state.me = null;
    setConn('signed-out');
    show('sign-in');
    const err = $('sign-in-error');
    err.textContent = message || '';
    err.hidden = !message;
    $('token').value = '';
    $('token').focus();
  }

  function showNamePrompt() {
    setConn('signed-out');
    show('name');
    $('user-name').value = saved.user;
    $('user-name').focus();
  }

  $('sign-in-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const token = $('token').value.trim();
    if (!token) {
      $('sign-in-error').textContent = 'Paste a token first.';
      $('sign-in-error').hidden = false;
      return;
    }
    saved.token = token;
    boot();
  });

  $('name-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const name = $('user-name').value.trim();
    if (!/^[\w.@+-]{1,64}$/.test(name)) {
      $('name-error').textContent = 'Use letters, digits and . _ @ + - only.';
      $('name-error').hidden = false;
      return;
    }
    saved.user = name;
    boot();
  });

  $('sign-out').addEventListener('click', () => {
    const open = state.me && state.me.open;
    saved.token = '';
    saved.user = '';
    state.pending.clear();
    for (const card of state.cards.values()) card.remove();
    state.cards.clear();
    state.history = null;
    state.linked = null;
    state.selected.clear();
    state.grants = null;
    $('batch-result').hidden = true;
    stopAnalytics();
    an.data = null;
    if (open) { closeStream(); showNamePrompt(); } else showSignIn();
  });

  function renderWho() {
    const me = state.me;
    const role = me.open ? 'open mode' : (roles().includes('admin') ? 'admin' : roles().includes('approver') ? 'approver' : roles().join(', '));
    $('who-name').textContent = me.id;
    $('who-role').textContent = role;
    $('who-avatar').textContent = (me.id[0] || '?').toUpperCase();
    $('sign-out').textContent = me.open ? 'Change name' : 'Sign out';
    $('viewer-notice').hidden = canDecide();
  }

  // ---- the connection -------------------------------------------------------

  const CONN_TEXT = {
    connecting: 'Connecting…',
    live: 'Live',
    reconnecting: 'Reconnecting…',
    'signed-out': 'Signed out',
  };

  function setConn(s) {
    const el = $('conn');
    if (el.dataset.state === s) return;
    el.dataset.state = s;
    $('conn-text').textContent = CONN_TEXT[s];
    el.title = s === 'live' ? 'Following changes as they happen' : s === 'reconnecting' ? 'Lost the connection; catching up as soon as it is back' : '';
  }

  function closeStream() {
    clearTimeout(state.retryTimer);
    if (state.es) {
      state.es.close();
      state.es = null;
    }
  }

  // follow opens the event stream from seq. EventSource cannot send
  // headers, so the token travels in the query, as the API allows for
  // this one endpoint.
  function follow(seq) {
    closeStream();
    const q = new URLSearchParams({ since: String(seq) });
    if (saved.token) q.set('access_token', saved.token);
    const es = new EventSource('v1/events?' + q);
    state.es = es;
    es.addEventListener('open', () => {
      if (state.es !== es) return;
      state.retries = 0;
      state.everLive = true;
      setConn('live');
    });
    // On any error the stream is closed and the page lists again before
    // following anew: a list is the truth, whatever the stream missed.
    es.addEventListener('error', () => {
      if (state.es !== es) return;
      closeStream();
      setConn('reconnecting');
      retrySoon();
    });
    for (const s of SUBJECTS) {
      es.addEventListener(s, (ev) => {
        if (state.es !== es) return;
        let msg;
        try { msg = JSON.parse(ev.data); } catch { return; }
        if (msg && msg.entry) apply(msg.entry);
      });
    }
  }

  function retrySoon() {
    clearTimeout(state.retryTimer);
    const delay = Math.min(10000, 500 * 2 ** state.retries) * (0.75 + Math.random() * 0.5);
    state.retries = Math.min(state.retries + 1, 6);
    state.retryTimer = setTimeout(sync, delay);
  }

  // sync lists the pending calls and follows the stream from there.
  async function sync() {
    closeStream();
    setConn(state.everLive ? 'reconnecting' : 'connecting');
    let page;
    try {
      page = await list({ status: PENDING });
    } catch (err) {
      if (err.status === 401) return showSignIn('Your token is no longer accepted. Sign in again.');
      retrySoon();
      return;
    }
    state.listed = true;
    replacePending(page.items);
    if (state.view === 'history') loadHistory();
    loadGrants();
    follow(page.eventsSeq);
  }

  async function boot() {
    closeStream();
    setConn('connecting');
    let me;
    try {
      me = await api('GET', 'v1/me');
    } catch (err) {
      if (err.status === 401) {
        return showSignIn(saved.token ? 'That token was not accepted.' : '');
      }
      setConn('reconnecting');
      clearTimeout(state.retryTimer);
      state.retryTimer = setTimeout(boot, Math.min(10000, 1000 * 2 ** state.retries++));
      return;
    }
    state.me = me;
    if (me.open && !saved.user) return showNamePrompt();
    renderWho();
    show('app');
    const r = route();
    setView(r.link ? 'inbox' : r.view, false);
    await sync();
    if (r.link) openLink(r.link);
  }

  // ---- state changes ------------------------------------------------------

  function remember(e) {
    let changed = false;
    if (e.conversationId && !state.seenConversations.has(e.conversationId)) {
      state.seenConversations.add(e.conversationId);
      changed = true;
    }
    if (e.toolName && !state.seenTools.has(e.toolName)) {
      state.seenTools.add(e.toolName);
      changed = true;
    }
    if (changed) renderDatalists();
  }

  function replacePending(items) {
    const fresh = new Map(items.map((e) => [e.pendingId, e]));
    for (const [id, card] of [...state.cards]) {
      if (fresh.has(id)) continue;
      state.pending.delete(id);
      // A card showing an error keeps it until dismissed.
      if (card.dataset.sticky === undefined) removeCard(id);
    }
    for (const e of items) upsertPending(e, false);
    renderInbox();
  }

  function apply(e) {
    remember(e);
    if (state.view === 'analytics') refreshAnalyticsSoon();
    // An approval beyond once records a grant; a call a grant let run
    // may have used up a single-use one.
    if (state.view === 'grants' || (e.decisionScope && e.decisionScope !== 'once') || /^grant /.test(e.statusReason || '')) loadGrantsSoon();
    if (e.status === PENDING) {
      upsertPending(e, true);
    } else if (state.pending.has(e.pendingId)) {
      resolveCard(e);
    }
    if (state.history && e.status !== PENDING) {
      state.history.set(e.pendingId, e);
      renderHistory();
    }
    renderInbox();
  }

  function upsertPending(e, announceIt) {
    remember(e);
    const known = state.pending.has(e.pendingId);
    state.pending.set(e.pendingId, e);
    const card = state.cards.get(e.pendingId);
    if (card && card.dataset.note === whyNot(e)) {
      card.entry = e;
      updateCard(card, e);
      return;
    }
    // New, or who may decide it changed for this user (a vote of theirs,
    // an escalation reaching them): built anew.
    const fresh = buildCard(e);
    if (card) {
      card.replaceWith(fresh);
      fresh.entry = e;
      state.cards.set(e.pendingId, fresh);
      return;
    }
    fresh.entry = e;
    state.cards.set(e.pendingId, fresh);
    if (!known && announceIt) {
      fresh.classList.add('card-new');
      announce(`New request: ${e.toolName} from ${e.callerBotId}`);
    }
  }

  function removeCard(id) {
    const card = state.cards.get(id);
    state.pending.delete(id);
    state.cards.delete(id);
    state.selected.delete(id);
    if (!card) return;
    // Keep keyboard users in the queue: focus moves to the next card.
    const hadFocus = card.contains(document.activeElement);
    const next = card.nextElementSibling || card.previousElementSibling;
    card.remove();
    if (hadFocus) {
      const target = next && next.querySelector('button:not([disabled])');
      if (target) target.focus(); else $('main').focus();
    }
    renderInbox();
  }

  // resolveCard closes a card whose call someone decided: at once when it
  // was this page, after a moment (saying who) when it was someone else.
  function resolveCard(e) {
    state.pending.delete(e.pendingId);
    const card = state.cards.get(e.pendingId);
    if (!card) return;
    if (card.dataset.deciding !== undefined) {
      // This page's own decision is in flight: if it is the one that
      // stood, the card goes; if another did, the answer to the request
      // (a 409) will say so on the card.
      if (decidedBy(e) === state.me.id) removeCard(e.pendingId);
      else markResolved(card, e);
      return;
    }
    markResolved(card, e);
    if (card.dataset.sticky === undefined) {
      setTimeout(() => {
        if (state.cards.get(e.pendingId) === card && card.dataset.sticky === undefined) removeCard(e.pendingId);
      }, RESOLVED_LINGER_MS);
    }
  }

  // ---- cards ----------------------------------------------------------------

  function decidedBy(e) {
    return e.approvedOrRejectedByUserId || (e.lastTransition && e.lastTransition.actor) || '';
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
  function verdict(e) {
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

  function markResolved(card, e) {
    card.classList.add('card-resolved');
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

  function capitalize(s) { return s ? s[0].toUpperCase() + s.slice(1) : s; }

  function formatCost(n) {
    if (!n) return '';
    return n.toLocaleString(undefined, n < 1 ? { maximumSignificantDigits: 3 } : { minimumFractionDigits: 2, maximumFractionDigits: 2 });
  }

  function prettyArgs(raw) {
    try { return JSON.stringify(raw === undefined || raw === null ? {} : raw, null, 2); } catch { return String(raw); }
  }

  // jsonView renders pretty JSON with its tokens coloured, as text nodes.
  function jsonView(text) {
    const pre = h('pre', { class: 'json' });
    const re = /("(?:\\.|[^"\\])*")(\s*:)?|\b(true|false|null)\b|-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?/g;
    let last = 0;
    for (const m of text.matchAll(re)) {
      if (m.index > last) pre.append(text.slice(last, m.index));
      let cls = 'j-num';
      if (m[1]) cls = m[2] ? 'j-key' : 'j-str';
      else if (m[3]) cls = 'j-lit';
      pre.append(h('span', { class: cls }, m[1] || m[0]));
      if (m[2]) pre.append(m[2]);
      last = m.index + m[0].length;
    }
    pre.append(text.slice(last));
    return pre;
  }

  function meta(label, value, opts = {}) {
    if (value === '' || value === undefined || value === null) return null;
    return h('div', { class: 'meta-item' + (opts.wide ? ' meta-wide' : '') },
      h('dt', {}, label),
      h('dd', { class: opts.mono ? 'mono' : '', title: opts.title }, value));
  }

  function buildCard(e) {
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
          h('span', { class: 'pill pill-wait status-pill' }, 'Waiting')),
        h('p', { class: 'card-when' },
          h('time', { class: 'asked', 'data-since': e.requestedAt, 'data-prefix': 'Asked ', datetime: new Date(e.requestedAt).toISOString(), title: new Date(e.requestedAt).toLocaleString() }, 'Asked ' + ago(e.requestedAt)),
          h('span', { class: 'deadline', 'data-deadline': e.approvalTimeoutAt || '' }))),
      e.description && e.description !== e.toolName
        ? h('p', { class: 'description' }, e.description)
        : '',
      e.quorum ? h('p', { class: 'quorum', role: 'status' }) : '',
      h('ul', { class: 'reviews', hidden: true }),
      h('div', { class: 'card-body' },
        h('div', { class: 'card-info' },
          h('dl', { class: 'meta' },
            meta('Caller', e.callerBotId, { mono: true }),
            meta('Conversation', e.conversationId, { mono: true }),
            meta('Team', e.team),
            meta('Est. cost', formatCost(e.estimatedCost))),
          e.statusReason ? h('div', { class: 'why' }, h('div', { class: 'why-label' }, 'Why it asks'), h('div', { class: 'mono why-text' }, e.statusReason)) : null),
        h('div', { class: 'args' },
          h('div', { class: 'args-label' }, 'Arguments'),
          jsonView(args),
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

  function buildActions(card, e, args) {
    const btn = (action, label, cls, title) => h('button', { type: 'button', class: `btn ${cls}`, 'data-action': action, title }, label);
    const approve = btn('approve', 'Approve', 'btn-approve', 'Run this call once');
    const session = btn('session', 'Allow for this session', 'btn-secondary', `Run this call, and later calls like it in conversation ${e.conversationId}, without asking`);
    const always = btn('always', 'Always allow', 'btn-secondary', e.team ? `Run this call, and add a rule allowing calls like it for team ${e.team}` : 'Run this call, and add a rule allowing calls like it');
    const edit = btn('edit', 'Approve with edits…', 'btn-secondary', 'Change the arguments, then run it');
    const reject = btn('reject', 'Reject…', 'btn-reject', 'Refuse this call and tell the agent why');

    approve.addEventListener('click', () => decide(card, e, { approved: true }));
    session.addEventListener('click', () => decide(card, e, { approved: true, scope: 'session' }));
    always.addEventListener('click', () => decide(card, e, { approved: true, scope: 'always' }));
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
    previewGrant(e, session, always, hint);
    return h('div', { class: 'actions' },
      h('div', { class: 'actions-main' }, approve, session, always, edit, ...(respond ? [respond] : [])),
      reject,
      hint);
  }

  // previewGrant asks what "Allow for this session" and "Always allow"
  // would grant (the pattern derived from the call; the scopes differ in
  // reach, not in pattern) and says it beside them before anyone clicks.
  // A call no pattern covers alone can be approved once only.
  function previewGrant(e, session, always, hint) {
    throttled(() => api('GET', `v1/tool-calls/${encodeURIComponent(e.pendingId)}/grant-preview?scope=session`)).then((p) => {
      hint.dataset.state = 'ready';
      hint.dataset.pattern = p.pattern;
      hint.replaceChildren('grants: ', h('code', { class: 'grant-pattern' }, p.pattern));
      session.title = `Run this call, and later calls ${p.pattern} covers in conversation ${e.conversationId}, without asking`;
      always.title = `Run this call, and later calls ${p.pattern} covers${e.team ? ` for team ${e.team}` : ''}, without asking`;
    }, (err) => {
      hint.dataset.state = err.status === 400 ? 'none' : 'error';
      if (err.status === 400) {
        // No grant would cover it: only "once" is honest.
        for (const b of [session, always]) { b.disabled = true; b.dataset.wasDisabled = '1'; }
        hint.textContent = 'No grant: ' + err.message.replace(/^.*?toolArguments: /, '');
      } else {
        hint.textContent = 'Could not tell what a grant would cover: ' + err.message;
      }
    });
  }

  // throttled runs at most a few requests of a kind at once, so that a
  // page of many cards does not starve the event stream of connections.
  const throttle = { running: 0, queue: [] };
  function throttled(f) {
    return new Promise((resolve, reject) => {
      throttle.queue.push(() => f().then(resolve, reject));
      pump();
    });
  }
  function pump() {
    while (throttle.running < 3 && throttle.queue.length) {
      const next = throttle.queue.shift();
      throttle.running++;
      next().finally(() => { throttle.running--; pump(); });
    }
  }

  function closePanels(card) {
    for (const p of card.querySelectorAll('.panel')) p.remove();
    const actions = card.querySelector('.actions');
    if (actions) actions.hidden = false;
  }

  function openPanel(card, panel, focus) {
    closePanels(card);
    const actions = card.querySelector('.actions');
    if (actions) actions.hidden = true;
    panel.addEventListener('keydown', (ev) => {
      if (ev.key === 'Escape') {
        ev.preventDefault();
        closePanels(card);
        const b = card.querySelector('.actions button');
        if (b) b.focus();
      }
    });
    card.append(panel);
    focus.focus();
  }

  function openReject(card, e) {
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
    const check = () => {
      const r = parseArgs(area.value);
      err.textContent = r.error || '';
      err.hidden = !r.error;
      area.setAttribute('aria-invalid', r.error ? 'true' : 'false');
      submit.disabled = !!r.error;
      return r;
    };
    area.addEventListener('input', check);
    const form = h('form', { class: 'panel panel-edit' },
      h('label', { for: id }, 'Arguments to run with'),
      area, err,
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

  function setBusy(card, busy) {
    card.classList.toggle('card-busy', busy);
    for (const b of card.querySelectorAll('.actions button, .panel button, .panel input, .panel textarea')) {
      if (busy) { b.dataset.wasDisabled = b.disabled ? '1' : ''; b.disabled = true; } else { b.disabled = b.dataset.wasDisabled === '1'; }
    }
    card.setAttribute('aria-busy', busy ? 'true' : 'false');
  }

  function showCardError(card, message, entry) {
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

  // describeError turns a refused decision into what the approver needs.
  function describeError(err) {
    if (err.status === 409 && err.entry) return `Already ${verdict(err.entry)}.`;
    if (err.status === 403) return `You can’t decide this call: ${err.message}`;
    if (err.status === 400) return `Not accepted: ${err.message}`;
    return err.message || 'Something went wrong.';
  }

  async function decide(card, e, body) {
    const err = card.querySelector('.card-error');
    err.hidden = true;
    delete card.dataset.sticky;
    setBusy(card, true);
    card.dataset.deciding = '';
    try {
      const updated = await api('POST', `v1/tool-calls/${encodeURIComponent(e.pendingId)}/decision`, body);
      if (updated.status === PENDING) {
        // An approval its quorum still needs others for: the card stays,
        // saying how far the call is.
        announce(`${e.toolName}: your approval is recorded, ${quorumText(updated)}`);
        delete card.dataset.deciding;
        setBusy(card, false);
        upsertPending(updated, false);
        renderInbox();
        return;
      }
      announce(`${e.toolName}: ${verdict(updated)}`);
      removeCard(e.pendingId);
      if (state.history) { state.history.set(updated.pendingId, updated); renderHistory(); }
    } catch (ex) {
      delete card.dataset.deciding;
      setBusy(card, false);
      if (ex.status === 401) { showSignIn('Your token is no longer accepted. Sign in again.'); return; }
      if (ex.status === 409 && ex.entry) {
        state.pending.delete(e.pendingId);
        if (state.history) { state.history.set(ex.entry.pendingId, ex.entry); renderHistory(); }
        showCardError(card, describeError(ex), ex.entry);
        renderInbox();
        return;
      }
      showCardError(card, describeError(ex));
    }
  }

  function updateCard(card, e) {
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

  // ---- time -----------------------------------------------------------------

  function span(ms) {
    const s = Math.max(0, Math.floor(ms / 1000));
    const d = Math.floor(s / 86400), hh = Math.floor((s % 86400) / 3600), m = Math.floor((s % 3600) / 60), ss = s % 60;
    if (d) return `${d}d ${hh}h`;
    if (hh) return `${hh}h ${String(m).padStart(2, '0')}m`;
    return `${m}:${String(ss).padStart(2, '0')}`;
  }

  function ago(t) {
    const s = Math.max(0, Math.round((Date.now() - t) / 1000));
    if (s < 10) return 'just now';
    if (s < 60) return `${s}s ago`;
    if (s < 3600) return `${Math.floor(s / 60)} min ago`;
    if (s < 86400) return `${Math.floor(s / 3600)} h ago`;
    return new Date(t).toLocaleDateString(undefined, { month: 'short', day: 'numeric' });
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

  setInterval(() => {
    for (const el of document.querySelectorAll('.deadline[data-deadline]')) tickDeadline(el);
    for (const el of document.querySelectorAll('time[data-since]')) el.textContent = (el.dataset.prefix || '') + ago(Number(el.dataset.since));
  }, 1000);

  // ---- the inbox view -------------------------------------------------------

  const filters = () => ({
    conversation: $('f-conversation').value.trim(),
    tool: $('f-tool').value.trim(),
    status: $('f-status').value,
  });

  function matches(e, f) {
    return (!f.conversation || e.conversationId === f.conversation) && (!f.tool || e.toolName === f.tool);
  }

  // urgency orders cards: the soonest deadline first, then the oldest.
  function urgency(a, b) {
    const da = a.approvalTimeoutAt || Infinity, db = b.approvalTimeoutAt || Infinity;
    if (a.overdue !== b.overdue) return a.overdue ? -1 : 1;
    if (da !== db) return da - db;
    return a.requestedAt - b.requestedAt || (a.pendingId < b.pendingId ? -1 : 1);
  }

  function renderInbox() {
    const f = filters();
    const container = $('cards');
    // Every card, including those just decided elsewhere and those
    // showing an error, keeps its place: ordered by the entry it was
    // built from.
    const order = [...state.cards.values()].filter((c) => matches(c.entry, f)).sort((a, b) => urgency(a.entry, b.entry));
    const shown = [...state.pending.values()].filter((e) => matches(e, f));
    const n = state.pending.size;
    let i = 0;
    for (const card of order) {
      if (container.children[i] !== card) container.insertBefore(card, container.children[i] || null);
      i++;
    }
    for (const card of [...container.children].slice(i)) card.remove();

    $('pending-count').textContent = String(n);
    $('pending-count').dataset.zero = n ? '' : '1';
    document.title = n ? `(${n}) toolgate inbox` : 'toolgate inbox';

    const filtered = f.conversation || f.tool;
    $('inbox-note').hidden = !filtered || !n;
    $('inbox-note').textContent = filtered ? `Showing ${shown.length} of ${n} waiting calls.` : '';
    const empty = state.listed && i === 0;
    $('empty').hidden = !empty;
    $('empty-title').textContent = filtered && n ? 'No waiting calls match these filters' : 'Nothing waiting for you';
    $('empty-text').textContent = filtered && n
      ? `${n} waiting ${n === 1 ? 'call is' : 'calls are'} hidden by the filters.`
      : 'When an agent asks to run a tool that needs a human, it appears here at once.';
    $('empty-clear').hidden = !(filtered && n);
    $('f-clear').hidden = !(filtered || f.status);
    renderBatch();
  }

  function renderDatalists() {
    const fill = (id, values) => $(id).replaceChildren(...[...values].sort().map((v) => h('option', { value: v })));
    fill('conversations', state.seenConversations);
    fill('tools', state.seenTools);
  }

  function announce(text) {
    $('announce').textContent = '';
    requestAnimationFrame(() => { $('announce').textContent = text; });
  }

  // ---- deciding several calls at once ----------------------------------------

  // The selected calls are decided in one request (POST /v1/decisions with
  // their ids): each is still its own decision, and the answer says per
  // call what was decided and what was skipped and why, which the page
  // lists until dismissed.

  function shownCards() {
    const f = filters();
    return [...state.cards.values()].filter((c) => matches(c.entry, f) && c.querySelector('input.select'));
  }

  function renderBatch() {
    const n = state.selected.size;
    const selectable = canDecide() && shownCards().length > 0;
    $('batch').hidden = !selectable && n === 0;
    $('batch-count').textContent = n ? `${n} selected` : 'Select calls to decide them together';
    $('batch-approve').disabled = !n || state.batching;
    $('batch-reject').disabled = !n || state.batching;
    $('batch-confirm-reject').disabled = !n || state.batching;
    $('batch-clear').hidden = !n;
    $('select-all').hidden = !selectable;
    if (!n) $('batch-reject-form').hidden = true;
    for (const [id, card] of state.cards) {
      const box = card.querySelector('input.select');
      if (box) box.checked = state.selected.has(id);
      card.classList.toggle('card-selected', state.selected.has(id));
    }
  }

  $('select-all').addEventListener('click', () => {
    for (const card of shownCards()) state.selected.add(card.dataset.id);
    renderBatch();
  });
  $('batch-clear').addEventListener('click', () => { state.selected.clear(); renderBatch(); });
  $('batch-approve').addEventListener('click', () => decideSelected(true, ''));
  $('batch-reject').addEventListener('click', () => {
    $('batch-reject-form').hidden = false;
    $('batch-reason').focus();
  });
  $('batch-cancel-reject').addEventListener('click', () => { $('batch-reject-form').hidden = true; });
  $('batch-reject-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    decideSelected(false, $('batch-reason').value.trim());
  });
  $('batch-result-dismiss').addEventListener('click', () => { $('batch-result').hidden = true; });

  async function decideSelected(approved, reason) {
    const ids = [...state.selected];
    if (!ids.length || state.batching) return;
    state.batching = true;
    renderBatch();
    const cards = ids.map((id) => state.cards.get(id)).filter(Boolean);
    for (const card of cards) { setBusy(card, true); card.dataset.deciding = ''; }
    let reply;
    try {
      const body = { ids, approved };
      if (reason) body.reason = reason;
      reply = await api('POST', 'v1/decisions', body);
    } catch (ex) {
      state.batching = false;
      for (const card of cards) { delete card.dataset.deciding; setBusy(card, false); }
      if (ex.status === 401) { showSignIn('Your token is no longer accepted. Sign in again.'); return; }
      showBatchResult(approved, null, ex.message);
      renderBatch();
      return;
    }
    state.batching = false;
    state.selected.clear();
    $('batch-reason').value = '';
    $('batch-reject-form').hidden = true;
    for (const m of reply.decided) {
      removeCard(m.pendingId);
      if (state.history && m.entry) state.history.set(m.pendingId, m.entry);
    }
    for (const m of reply.skipped) {
      const card = state.cards.get(m.pendingId);
      if (!card) continue;
      delete card.dataset.deciding;
      setBusy(card, false);
      if (m.entry && m.entry.status !== PENDING) {
        state.pending.delete(m.pendingId);
        if (state.history) state.history.set(m.pendingId, m.entry);
        showCardError(card, skipText(m), m.entry);
      } else {
        showCardError(card, skipText(m));
      }
    }
    for (const card of cards) {
      if (state.cards.get(card.dataset.id) === card) { delete card.dataset.deciding; setBusy(card, false); }
    }
    if (state.history) renderHistory();
    showBatchResult(approved, reply);
    announce(`${approved ? 'Approved' : 'Rejected'} ${reply.decided.length}, skipped ${reply.skipped.length}`);
    renderInbox();
  }

  // skipText says why a selected call was not decided, as an approver
  // needs it.
  function skipText(m) {
    if (m.code === 'conflict' && m.entry && m.entry.status !== PENDING) return `Already ${verdict(m.entry)}.`;
    if (m.code === 'not_found') return 'No such call any more.';
    if (m.code === 'expired') return 'Too late: its deadline passed.';
    if (m.code === 'forbidden' || m.code === 'edit_denied') return `Not yours to decide: ${m.reason}`;
    return m.reason || m.code;
  }

  function showBatchResult(approved, reply, error) {
    const verb = approved ? 'Approved' : 'Rejected';
    const box = $('batch-result');
    box.hidden = false;
    box.dataset.state = error ? 'error' : 'done';
    if (error) {
      $('batch-result-title').textContent = `Nothing was decided: ${error}`;
      $('batch-items').replaceChildren();
      return;
    }
    $('batch-result-title').textContent = `${verb} ${reply.decided.length}, skipped ${reply.skipped.length}`;
    const item = (m, outcome) => {
      const e = m.entry || {};
      return h('li', { class: `batch-item batch-${outcome}`, 'data-id': m.pendingId, 'data-outcome': outcome, 'data-code': m.code || null },
        h('span', { class: `pill pill-tiny ${outcome === 'decided' ? (approved ? 'pill-ok' : 'pill-bad') : 'pill-muted'}` }, outcome === 'decided' ? verb.toLowerCase() : 'skipped'),
        h('span', { class: 'tool mono' }, e.toolName || ''),
        h('span', { class: 'mono batch-id' }, m.pendingId),
        outcome === 'skipped' ? h('span', { class: 'batch-why' }, skipText(m)) : null);
    };
    $('batch-items').replaceChildren(...reply.decided.map((m) => item(m, 'decided')), ...reply.skipped.map((m) => item(m, 'skipped')));
  }

  // ---- the grants view ---------------------------------------------------------

  // The grants in force, from GET /v1/grants: read when the view opens,
  // after each list of the pending calls, and again a moment after a
  // decision that may have recorded or used one. Revoke ends one at once.

  let grantsTicket = null;
  let grantsSoon = 0;

  async function loadGrants() {
    const ticket = {};
    grantsTicket = ticket;
    $('grants-refresh').disabled = true;
    try {
      const grants = await api('GET', 'v1/grants');
      if (grantsTicket !== ticket) return;
      state.grants = grants;
      $('grants-error').hidden = true;
    } catch (err) {
      if (grantsTicket !== ticket) return;
      if (err.status === 401) return showSignIn('Your token is no longer accepted. Sign in again.');
      $('grants-error').textContent = 'Could not load the grants: ' + err.message;
      $('grants-error').hidden = false;
    } finally {
      if (grantsTicket === ticket) $('grants-refresh').disabled = false;
    }
    if (grantsTicket === ticket) grantsTicket = null;
    renderGrants();
  }

  function loadGrantsSoon() {
    clearTimeout(grantsSoon);
    grantsSoon = setTimeout(loadGrants, 400);
  }

  $('grants-refresh').addEventListener('click', () => loadGrants());

  // grantReach says what bounds a grant, in words.
  function grantReach(g) {
    if (g.taskId) return ['Task', `task ${g.taskId} of conversation ${g.conversationId}`];
    if (g.conversationId) return ['Session', `conversation ${g.conversationId}`];
    return ['Always', g.team ? `team ${g.team}’s calls` : 'every team’s calls'];
  }

  function renderGrants() {
    const grants = state.grants;
    const list = $('grant-rows');
    $('grants').dataset.state = grants ? 'ready' : 'loading';
    $('grants-count').textContent = grants ? String(grants.length) : '0';
    $('grants-count').dataset.zero = grants && grants.length ? '' : '1';
    if (!grants) return;
    $('grants-empty').hidden = grants.length > 0;
    list.replaceChildren(...grants.map(buildGrantRow));
  }

  function buildGrantRow(g) {
    const [scope, reach] = grantReach(g);
    const expires = g.expiresAt
      ? h('span', { class: 'grant-expiry', 'data-deadline': g.expiresAt, title: 'Ends ' + new Date(g.expiresAt).toLocaleString() }, 'ends ' + new Date(g.expiresAt).toLocaleString())
      : h('span', { class: 'grant-expiry' }, 'until revoked');
    const revoke = canDecide()
      ? h('button', { type: 'button', class: 'btn btn-reject btn-small', 'data-action': 'revoke', title: 'End this grant now: calls it covers are asked about again' }, 'Revoke')
      : null;
    const err = h('p', { class: 'field-error grant-error', role: 'alert', hidden: true });
    // Not a .row: those are the history's.
    const row = h('li', { class: 'grant', 'data-id': g.id, 'data-pattern': g.pattern },
      h('div', { class: 'row-main' },
        h('span', { class: `pill ${scope === 'Always' ? 'pill-info' : 'pill-muted'}` }, scope),
        h('div', { class: 'row-what' },
          h('div', { class: 'row-title' },
            h('span', { class: 'grant-matches' }, 'matches ', h('code', { class: 'tool mono grant-pattern' }, g.pattern)),
            g.singleUse ? h('span', { class: 'pill pill-wait pill-tiny grant-single' }, 'single use') : null),
          h('div', { class: 'row-sub' },
            h('span', { class: 'grant-reach' }, reach),
            h('span', {}, 'granted by ', h('span', { class: 'row-who grant-by' }, g.by),
              g.at ? ' ' + ago(g.at) : ''),
            g.pendingId ? h('span', {}, 'from call ', h('a', { class: 'mono grant-call', href: `#/calls/${encodeURIComponent(g.pendingId)}` }, g.pendingId)) : null,
            expires),
          err),
        h('div', { class: 'row-end' }, revoke)));
    if (revoke) {
      revoke.addEventListener('click', async () => {
        revoke.disabled = true;
        err.hidden = true;
        try {
          await api('POST', `v1/grants/${encodeURIComponent(g.id)}/revoke`, {});
        } catch (ex) {
          if (ex.status === 401) { showSignIn('Your token is no longer accepted. Sign in again.'); return; }
          if (ex.status !== 404) {
            revoke.disabled = false;
            err.textContent = 'Could not revoke it: ' + ex.message;
            err.hidden = false;
            return;
          }
          // Revoked or expired already: it is not in force either way.
        }
        announce(`Revoked the grant ${g.pattern}`);
        if (state.grants) state.grants = state.grants.filter((x) => x.id !== g.id);
        renderGrants();
        loadGrantsSoon();
      });
    }
    return row;
  }

  // ---- the history view ------------------------------------------------------

  async function loadHistory() {
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

  function renderHistory() {
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
    const [label, tone] = OUTCOMES[e.status] || [e.status, 'muted'];
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
            e.decisionScope && e.decisionScope !== 'once' ? h('span', { class: 'pill pill-muted pill-tiny' }, SCOPES[e.decisionScope] || e.decisionScope) : null),
          h('div', { class: 'row-sub' },
            who ? h('span', {}, 'by ', h('span', { class: 'row-who' }, who)) : null,
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
    frag.append(h('ol', { class: 'timeline' }, items.map((it) => h('li', {},
      h('time', { datetime: new Date(it.at).toISOString() }, new Date(it.at).toLocaleString()),
      h('span', { class: 'tl-event' }, it.event),
      h('span', { class: 'tl-to mono' }, it.to),
      it.actor ? h('span', { class: 'tl-actor' }, it.actor) : null,
      it.decidedBy ? h('span', { class: 'tl-decided pill pill-muted', title: 'what decided' }, it.decidedBy) : null,
      it.reason ? h('span', { class: 'tl-reason' }, it.reason) : null))));
    const argBlock = (label, raw) => h('div', { class: 'args' }, h('div', { class: 'args-label' }, label), jsonView(prettyArgs(raw)));
    if (e.originalArguments) {
      frag.append(h('div', { class: 'args-pair' },
        argBlock('Asked with', e.originalArguments),
        argBlock('Ran with (edited)', e.toolArguments)));
    } else {
      frag.append(argBlock('Arguments', e.toolArguments));
    }
    if (e.error) frag.append(h('p', { class: 'field-error' }, e.error));
    return frag;
  }

  // ---- the analytics view -------------------------------------------------------

  // The analytics are toolgate's aggregates, read from /v1/analytics: the
  // tables are since the analytics began, the charts over a window. The
  // page reads them again when the view opens, when calls change while it
  // is open, and while the aggregates are catching up (lag), so what it
  // shows settles on the server's numbers without a reload.
  const SERIES = {
    hour: { query: 'hours=24', text: 'the last 24 hours, per hour', stepMs: 3600000 },
    minute: { query: 'resolution=minute&hours=3', text: 'the last 2 to 3 hours, per minute', stepMs: 60000 },
  };
  const REFRESH_MS = 60000;

  const an = {
    res: 'hour',
    data: null,
    error: '',
    off: false,
    ticket: null,
    timer: 0,
    soon: 0,
    lagTries: 0,
    dirty: false, // calls changed while a read was under way
    width: 0,
    shadow: null, // the shadow policy's report (loadShadow)
  };

  async function loadAnalytics() {
    clearTimeout(an.timer);
    clearTimeout(an.soon);
    const ticket = {};
    an.ticket = ticket;
    an.dirty = false;
    const res = an.res;
    if (!an.data) $('analytics').dataset.state = 'loading';
    $('an-refresh').disabled = true;
    let next = REFRESH_MS;
    try {
      const r = await api('GET', 'v1/analytics?' + SERIES[res].query);
      if (an.ticket !== ticket) return;
      an.data = r;
      an.res = res;
      an.error = '';
      an.off = false;
      // Counting recent events: look again soon, then less often.
      if (r.lag > 0) next = Math.min(10000, 1000 * 2 ** an.lagTries++);
      else an.lagTries = 0;
    } catch (err) {
      if (an.ticket !== ticket) return;
      if (err.status === 401) return showSignIn('Your token is no longer accepted. Sign in again.');
      if (err.status === 404) {
        an.off = true;
        next = 0;
      } else {
        an.error = 'Could not load the analytics: ' + err.message;
        next = 15000;
      }
    }
    $('an-refresh').disabled = false;
    an.ticket = null;
    renderAnalytics();
    loadShadow();
    if (an.dirty && next) next = Math.min(next, 1500);
    if (next && state.view === 'analytics') an.timer = setTimeout(loadAnalytics, next);
  }

  function stopAnalytics() {
    clearTimeout(an.timer);
    clearTimeout(an.soon);
    an.ticket = null;
    $('an-refresh').disabled = false;
  }

  // refreshAnalyticsSoon reads the analytics again a moment after calls
  // change, once for a burst of changes.
  function refreshAnalyticsSoon() {
    if (an.off) return;
    if (an.ticket) {
      an.dirty = true;
      return;
    }
    clearTimeout(an.soon);
    an.soon = setTimeout(loadAnalytics, 1500);
  }

  $('an-refresh').addEventListener('click', () => loadAnalytics());
  for (const b of document.querySelectorAll('.seg[data-res]')) {
    b.addEventListener('click', () => {
      if (an.res === b.dataset.res && an.data) return;
      an.res = b.dataset.res;
      for (const o of document.querySelectorAll('.seg[data-res]')) o.setAttribute('aria-pressed', String(o === b));
      loadAnalytics();
    });
  }

  function renderAnalytics() {
    const r = an.data;
    const view = $('analytics');
    $('an-off').hidden = !an.off;
    $('an-error').hidden = !an.error || an.off;
    $('an-error').textContent = an.error;
    const empty = !an.off && r && r.totals.calls === 0 && r.tools.length === 0;
    $('an-empty').hidden = !empty;
    $('an-body').hidden = an.off || !r || empty;
    $('an-lag').hidden = an.off || !r || !r.lag;
    view.dataset.state = an.off ? 'off' : !r ? (an.error ? 'error' : 'loading') : empty ? 'empty' : 'ready';
    view.dataset.resolution = r ? r.series.resolution : '';
    if (an.off || !r) {
      $('an-sub').textContent = '';
      return;
    }
    $('an-lag').textContent = `Counting ${r.lag} recent ${r.lag === 1 ? 'event' : 'events'}: the numbers are catching up.`;
    $('an-sub').textContent = `Totals since the analytics began; charts over ${SERIES[r.series.resolution === 'minute' ? 'minute' : 'hour'].text}. Updated ${clock(r.generatedAt, true)}.`;
    if (empty) return;
    renderKPIs(r);
    renderCharts();
    renderRecommendations(r);
    $('an-tools').replaceChildren(statsTable(r.tools, 'Tool', 'tool'));
    $('an-teams').replaceChildren(statsTable(r.teams, 'Team', 'team'));
    $('an-approvers').replaceChildren(approversTable(r.approvers));
    renderReasons(r);
  }

  // ---- the shadow policy ----

  // The shadow policy's report, from /v1/policy/shadow/report: how many
  // submits were compared against the candidate and how many it would
  // decide otherwise, per change of verdict. Shown while there is one to
  // report on; a failure to read it hides it.
  async function loadShadow() {
    try {
      an.shadow = await api('GET', 'v1/policy/shadow/report?examples=1');
    } catch (err) {
      an.shadow = null;
    }
    renderShadow();
  }

  function renderShadow() {
    const s = an.shadow;
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

  // ---- numbers as people read them ----

  const pct = (rate, of) => (of ? `${Math.round(rate * 100)}%` : '—');

  // dur renders milliseconds: 850 ms, 4.2 s, 3m 05s, 1h 20m.
  function dur(ms) {
    if (!(ms > 0)) return '—';
    if (ms < 1000) return `${Math.round(ms)} ms`;
    if (ms < 10000) return `${(ms / 1000).toFixed(1)} s`;
    const t = Math.round(ms / 1000);
    if (t < 60) return `${t} s`;
    const m = Math.floor(t / 60);
    if (m < 60) return `${m}m ${String(t % 60).padStart(2, '0')}s`;
    const hh = Math.floor(m / 60);
    if (hh < 48) return `${hh}h ${String(m % 60).padStart(2, '0')}m`;
    return `${Math.floor(hh / 24)}d ${hh % 24}h`;
  }

  // durTick labels a time axis, whose steps are round: 30 s, 5 min, 2 h.
  function durTick(ms) {
    if (!ms) return '0';
    if (ms % 3600000 === 0) return `${ms / 3600000} h`;
    if (ms % 60000 === 0) return `${ms / 60000} min`;
    if (ms % 1000 === 0) return `${ms / 1000} s`;
    return dur(ms);
  }

  const money = (n) => (n ? formatCost(n) : '—');
  const num = (n) => (n || 0).toLocaleString();
  const pad2 = (n) => String(n).padStart(2, '0');

  // clock is a time of day, 24-hour, whatever the locale: 14:05.
  function clock(t, withDay) {
    const d = new Date(t);
    const hm = `${pad2(d.getHours())}:${pad2(d.getMinutes())}`;
    return withDay ? `${d.toLocaleDateString(undefined, { month: 'short', day: 'numeric' })} ${hm}` : hm;
  }

  function intervalText(t, res) {
    const step = SERIES[res].stepMs;
    return res === 'minute' ? clock(t, true) : `${clock(t, true)}–${clock(t + step)}`;
  }

  function renderKPIs(r) {
    const t = r.totals;
    const kpi = (key, label, value, sub, title) => h('div', { class: 'kpi', 'data-kpi': key, title },
      h('div', { class: 'kpi-label' }, label),
      h('div', { class: 'kpi-value' }, value),
      h('div', { class: 'kpi-sub' }, sub));
    const late = t.timedOut + t.overdue;
    $('an-kpis').replaceChildren(
      kpi('calls', 'Calls', num(t.calls), [[t.asked, 'asked'], [t.ranUnasked, 'ran unasked'], [t.policyDenied, 'denied by policy']]
        .filter(([n], i) => n || i === 0).map(([n, what]) => `${num(n)} ${what}`).join(' · ')),
      kpi('approval', 'Approved', pct(t.approvalRate, t.decided), `${num(t.approved)} of ${num(t.decided)} decided`),
      kpi('decide', 'Time to decide', dur(t.timeToDecide.p50Ms), `median · p90 ${dur(t.timeToDecide.p90Ms)}`),
      kpi('timeout', 'Timed out', pct(t.timeoutRate, t.asked), `${num(late)} of ${num(t.asked)} asked`, 'Rejected by the timeout, or left overdue'),
      kpi('cost', 'Cost', money(t.cost), `estimated ${money(t.estimatedCost)}`, 'What the calls that ran reported, and what the agents estimated when asking'));
  }

  // ---- tables ----

  // table builds a table of rows; each column reads a row. Cells carry
  // their column's key, and their raw value where the text rounds it.
  function table(cols, rows, caption) {
    return h('table', { class: 'data' },
      h('caption', { class: 'visually-hidden' }, caption),
      h('thead', {}, h('tr', {}, cols.map((c) => h('th', { scope: 'col', class: c.num ? 'num' : '', title: c.title }, c.label)))),
      h('tbody', {}, rows.map((row) => h('tr', { 'data-name': row.name },
        cols.map((c, i) => {
          const v = c.value(row);
          const attrs = { class: (c.num ? 'num' : '') + (c.mono ? ' mono' : ''), 'data-col': c.key, title: c.cellTitle && c.cellTitle(row) };
          if (c.raw) attrs['data-raw'] = c.raw(row);
          return i === 0 ? h('th', { scope: 'row', ...attrs }, v) : h('td', attrs, v);
        })))));
  }

  const byCalls = (a, b) => b.calls - a.calls || (a.name < b.name ? -1 : 1);

  function statsTable(rows, label, kind) {
    if (!rows.length) return h('p', { class: 'muted' }, 'Nothing yet.');
    const cols = [
      { key: 'name', label, mono: kind === 'tool', value: (t) => t.name || '(no team)' },
      { key: 'calls', label: 'Calls', num: true, value: (t) => num(t.calls), raw: (t) => t.calls, cellTitle: (t) => `${t.asked} asked, ${t.ranUnasked} ran unasked, ${t.policyDenied} denied by policy` },
      { key: 'approved', label: 'Approved', num: true, value: (t) => num(t.approved), raw: (t) => t.approved },
      { key: 'rejected', label: 'Rejected', num: true, value: (t) => num(t.rejected), raw: (t) => t.rejected },
      { key: 'approvalRate', label: 'Approval rate', num: true, value: (t) => pct(t.approvalRate, t.decided), raw: (t) => t.approvalRate, cellTitle: (t) => `${t.approved} approved of ${t.decided} decided` },
      { key: 'p50', label: 'Decide p50', num: true, title: 'Median time from the request to a decision', value: (t) => dur(t.timeToDecide.p50Ms), raw: (t) => t.timeToDecide.p50Ms },
      { key: 'p90', label: 'Decide p90', num: true, title: '90th percentile of the time to decide', value: (t) => dur(t.timeToDecide.p90Ms), raw: (t) => t.timeToDecide.p90Ms },
      { key: 'timeoutRate', label: 'Timeout rate', num: true, value: (t) => pct(t.timeoutRate, t.asked), raw: (t) => t.timeoutRate, cellTitle: (t) => `${t.timedOut} timed out, ${t.overdue} overdue, of ${t.asked} asked` },
      { key: 'cost', label: 'Cost', num: true, title: 'Reported by the runs', value: (t) => money(t.cost), raw: (t) => t.cost },
      { key: 'estimatedCost', label: 'Est. cost', num: true, title: 'Estimated by the agents when asking', value: (t) => money(t.estimatedCost), raw: (t) => t.estimatedCost },
    ];
    return table(cols, [...rows].sort(byCalls), `Per ${kind}`);
  }

  function approversTable(rows) {
    if (!rows.length) return h('p', { class: 'muted' }, 'Nobody has decided anything yet.');
    const cols = [
      { key: 'name', label: 'Approver', value: (a) => a.name },
      { key: 'decisions', label: 'Decisions', num: true, value: (a) => num(a.decisions), raw: (a) => a.decisions,
        cellTitle: (a) => `${a.approved} approved, ${a.rejected} rejected` + ((a.mostRejectedTools || []).length ? `; rejects ${a.mostRejectedTools.map((n) => `${n.name} (${n.count})`).join(', ')} most` : '') },
      { key: 'approvalRate', label: 'Approved', num: true, value: (a) => pct(a.approvalRate, a.decisions), raw: (a) => a.approvalRate },
      { key: 'p50', label: 'Response p50', num: true, value: (a) => dur(a.responseTime.p50Ms), raw: (a) => a.responseTime.p50Ms },
      { key: 'p90', label: 'Response p90', num: true, value: (a) => dur(a.responseTime.p90Ms), raw: (a) => a.responseTime.p90Ms },
    ];
    return table(cols, [...rows].sort((a, b) => b.decisions - a.decisions || (a.name < b.name ? -1 : 1)), 'Per approver');
  }

  // renderReasons lists the reasons approvers gave most, with their tool.
  function renderReasons(r) {
    const all = r.tools.flatMap((t) => (t.topRejectionReasons || []).map((x) => ({ tool: t.name, reason: x.name, count: x.count })))
      .sort((a, b) => b.count - a.count || (a.reason < b.reason ? -1 : 1))
      .slice(0, 8);
    if (!all.length) {
      $('an-reasons').replaceChildren(h('p', { class: 'muted' }, 'No rejections yet.'));
      return;
    }
    const most = all[0].count;
    $('an-reasons').replaceChildren(h('ol', { class: 'reasons' }, all.map((x) => h('li', { class: 'reason', 'data-tool': x.tool },
      h('div', { class: 'reason-line' },
        h('span', { class: 'reason-text' + (x.reason.startsWith('(') ? ' muted' : '') }, x.reason.startsWith('(') ? x.reason : `“${x.reason}”`),
        h('span', { class: 'reason-count' }, num(x.count))),
      h('div', { class: 'reason-line' },
        h('span', { class: 'mono reason-tool' }, x.tool),
        meter(x.count / most))))));
  }

  // meter is a small bar, drawn in SVG: the page may not set a width in
  // a style attribute.
  function meter(frac) {
    return svg('svg', { class: 'meter', viewBox: '0 0 100 6', preserveAspectRatio: 'none', 'aria-hidden': 'true' },
      svg('rect', { class: 'meter-bg', x: 0, y: 0, width: 100, height: 6, rx: 3 }),
      svg('rect', { class: 'meter-fg', x: 0, y: 0, width: Math.max(3, 100 * frac).toFixed(1), height: 6, rx: 3 }));
  }

  // ---- recommendations ----

  const KINDS = {
    allow_rule: ['Allow rule', 'ok'],
    approval_timeout: ['Approval timeout', 'wait'],
    review_rejections: ['Review rejections', 'bad'],
  };

  function renderRecommendations(r) {
    const recs = r.recommendations || [];
    if (!recs.length) {
      $('an-recs').replaceChildren(h('p', { class: 'muted' }, 'Nothing to change yet: a recommendation needs a tool approved every time, rejected mostly, or often timing out, over enough calls.'));
      return;
    }
    // A rule to paste first, then a timeout to raise, then what needs a look.
    const order = Object.keys(KINDS);
    const rank = (k) => (order.includes(k) ? order.indexOf(k) : order.length);
    const sorted = [...recs].sort((a, b) => rank(a.kind) - rank(b.kind));
    $('an-recs').replaceChildren(h('div', { class: 'recs' }, sorted.map(buildRecommendation)));
  }

  function buildRecommendation(rec) {
    const [label, tone] = KINDS[rec.kind] || [rec.kind, 'muted'];
    const ev = rec.evidence || {};
    const fact = (k, v) => (v === '' || v === undefined || v === null ? null : h('div', { class: 'fact' }, h('dt', {}, k), h('dd', {}, v)));
    const reasons = (ev.topRejectionReasons || []).map((x) => `“${x.name}” (${x.count})`).join(', ');
    return h('article', { class: 'rec', 'data-kind': rec.kind, 'data-tool': rec.tool },
      h('header', { class: 'rec-head' },
        h('span', { class: `pill pill-${tone}` }, label),
        h('h3', { class: 'tool' }, rec.tool),
        h('span', { class: 'muted rec-scope' }, 'in ', h('span', { class: 'mono' }, rec.scope))),
      h('p', { class: 'rec-summary' }, rec.summary),
      h('dl', { class: 'facts' },
        fact('Asked', num(ev.asked)),
        fact('Approved', num(ev.approved)),
        fact('Rejected', num(ev.rejected)),
        fact('Timed out', num(ev.timedOut + (ev.overdue || 0))),
        fact('Approval rate', pct(ev.approvalRate, ev.decided)),
        fact('Decide p50 / p90', ev.timeToDecide && ev.timeToDecide.count ? `${dur(ev.timeToDecide.p50Ms)} / ${dur(ev.timeToDecide.p90Ms)}` : ''),
        fact('Approval timeout', ev.approvalTimeoutMs ? dur(ev.approvalTimeoutMs) : ''),
        fact('Top reasons', reasons),
        fact('Fastest approvers', (ev.fastestApprovers || []).join(', ')),
        fact('Last asked', ev.lastAskedAt ? clock(ev.lastAskedAt, true) : '')),
      rec.rule ? snippet('rule', `Rule to add to rules.allow in ${rec.scope}`, rec.rule) : null,
      rec.policy ? snippet('policy', 'Policy to merge into the one in force', rec.policy) : null);
  }

  // snippet is text to paste into a policy, with a button that copies it.
  function snippet(kind, label, text) {
    const id = `s-${Math.random().toString(36).slice(2)}`;
    const pre = h('pre', { class: 'snippet mono', id }, text.replace(/\n$/, ''));
    const btn = h('button', { type: 'button', class: 'btn btn-secondary btn-small', 'data-action': 'copy', 'aria-controls': id }, 'Copy');
    btn.addEventListener('click', () => copyText(text, pre, btn));
    return h('div', { class: `snippet-box snippet-${kind}` },
      h('div', { class: 'snippet-head' }, h('span', { class: 'snippet-label' }, label), btn),
      pre);
  }

  async function copyText(text, pre, btn) {
    let ok = false;
    try {
      await navigator.clipboard.writeText(text);
      ok = true;
    } catch {
      // No clipboard API (a page not served over https, say): select the
      // text, and copy as the browser still allows.
      const range = document.createRange();
      range.selectNodeContents(pre);
      const sel = getSelection();
      sel.removeAllRanges();
      sel.addRange(range);
      try { ok = document.execCommand('copy'); } catch { ok = false; }
    }
    btn.textContent = ok ? 'Copied' : 'Press Ctrl+C';
    btn.dataset.copied = ok ? '1' : '';
    announce(ok ? 'Copied to the clipboard' : 'Selected: press Ctrl+C to copy');
    setTimeout(() => { btn.textContent = 'Copy'; delete btn.dataset.copied; }, 2500);
  }

  // ---- charts ----

  const SVG_NS = 'http://www.w3.org/2000/svg';

  // svg builds an SVG element as h builds HTML ones.
  function svg(tag, attrs, ...children) {
    const el = document.createElementNS(SVG_NS, tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      el.setAttribute(k, String(v));
    }
    for (const c of children.flat()) {
      if (c === null || c === undefined || c === false) continue;
      el.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return el;
  }

  // shownPoints drops the intervals still to come: the window runs to the
  // end of the current hour.
  function shownPoints(r) {
    const now = Math.max(Date.now(), r.generatedAt);
    return r.series.points.filter((p) => p.t <= now);
  }

  function renderCharts() {
    const r = an.data;
    if (!r || $('an-body').hidden) return;
    const res = r.series.resolution === 'minute' ? 'minute' : 'hour';
    const points = shownPoints(r);
    an.width = $('chart-decisions-plot').clientWidth;
    drawDecisions($('chart-decisions-plot'), points, res);
    drawResponse($('chart-response-plot'), points, res);
    legend('legend-decisions', [['approved', 'Approved'], ['rejected', 'Rejected'], ['timedout', 'Timed out']]);
    legend('legend-response', res === 'hour'
      ? [['p50', 'Median (p50)'], ['p90', 'p90']]
      : [['mean', 'Mean (per minute)']]);
  }

  function legend(id, items) {
    $(id).replaceChildren(...items.map(([k, label]) => h('li', {}, h('span', { class: `swatch swatch-${k}`, 'aria-hidden': 'true' }), label)));
  }

  // frame is a chart's drawing area, sized to its container so that text
  // is drawn at its real size.
  function frame(el, points) {
    const W = Math.max(280, Math.floor(el.clientWidth || 600));
    const H = W < 520 ? 190 : 230;
    const m = { top: 14, right: 10, bottom: 26, left: 48 };
    const iw = W - m.left - m.right, ih = H - m.top - m.bottom;
    const band = iw / Math.max(1, points.length);
    return { W, H, m, iw, ih, band, x: (i) => m.left + i * band };
  }

  // niceStep is a round step that cuts max into about n parts.
  function niceStep(max, n, steps) {
    const raw = max / n;
    if (steps) return steps.find((s) => s >= raw) || steps[steps.length - 1] * Math.ceil(raw / steps[steps.length - 1]);
    const mag = 10 ** Math.floor(Math.log10(raw));
    return [1, 2, 5, 10].map((k) => k * mag).find((s) => s >= raw);
  }

  // axes draws the value grid with its labels, and the time labels,
  // spaced so that they do not collide.
  function axes(f, points, res, top, step, fmt) {
    const g = svg('g', { class: 'axes' });
    for (let v = 0; v <= top + step / 2; v += step) {
      const y = f.m.top + f.ih - (v / top) * f.ih;
      g.append(svg('line', { class: v ? 'grid' : 'baseline', x1: f.m.left, x2: f.W - f.m.right, y1: y, y2: y }));
      g.append(svg('text', { class: 'tick', x: f.m.left - 6, y: y + 4, 'text-anchor': 'end' }, fmt(v)));
    }
    const every = (res === 'minute' ? [1, 2, 5, 10, 15, 30, 60] : [1, 2, 3, 4, 6, 12, 24]).find((k) => k * f.band >= 52) || 60;
    points.forEach((p, i) => {
      const d = new Date(p.t);
      const unit = res === 'minute' ? d.getHours() * 60 + d.getMinutes() : d.getHours();
      if (unit % every !== 0) return;
      const label = res === 'hour' && d.getHours() === 0
        ? d.toLocaleDateString(undefined, { month: 'short', day: 'numeric' })
        : clock(p.t);
      const x = f.x(i) + f.band / 2;
      if (x < f.m.left + 14 || x > f.W - f.m.right - 14) return;
      g.append(svg('text', { class: 'tick', x, y: f.H - 8, 'text-anchor': 'middle' }, label));
    });
    return g;
  }

  function emptyChart(f, text) {
    return svg('text', { class: 'chart-empty', x: f.m.left + f.iw / 2, y: f.m.top + f.ih / 2, 'text-anchor': 'middle' }, text);
  }

  // drawDecisions is a stacked bar per interval: approved at the bottom,
  // then rejected, then timed out.
  function drawDecisions(el, points, res) {
    const f = frame(el, points);
    const total = (p) => p.approved + p.rejected + p.timedOut;
    const max = Math.max(0, ...points.map(total));
    const step = Math.max(1, niceStep(Math.max(max, 1), 4));
    const top = Math.max(step, Math.ceil(max / step) * step);
    const decided = points.reduce((n, p) => n + total(p), 0);
    const root = svg('svg', { class: 'plot', viewBox: `0 0 ${f.W} ${f.H}`, width: f.W, height: f.H, role: 'img',
      'aria-label': `Decisions over ${SERIES[res].text}: ${decided} in all, ${points.filter((p) => total(p) > 0).length} ${res === 'hour' ? 'hours' : 'minutes'} with any.` });
    root.append(axes(f, points, res, top, step, (v) => num(v)));
    const w = Math.max(1, Math.min(f.band * 0.72, 42));
    const bars = svg('g', { class: 'bars' });
    points.forEach((p, i) => {
      const n = total(p);
      const col = svg('g', { class: 'col', 'data-t': p.t, 'data-decisions': n },
        svg('title', {}, `${intervalText(p.t, res)}: ${p.approved} approved, ${p.rejected} rejected, ${p.timedOut} timed out`),
        svg('rect', { class: 'hit', x: f.x(i), y: f.m.top, width: f.band, height: f.ih }));
      let y = f.m.top + f.ih;
      for (const [k, v] of [['approved', p.approved], ['rejected', p.rejected], ['timedout', p.timedOut]]) {
        if (!v) continue;
        const hgt = (v / top) * f.ih;
        y -= hgt;
        col.append(svg('rect', { class: `seg seg-${k}`, 'data-count': v, x: (f.x(i) + (f.band - w) / 2).toFixed(2), y: y.toFixed(2), width: w.toFixed(2), height: Math.max(0.5, hgt).toFixed(2) }));
      }
      bars.append(col);
    });
    root.append(bars);
    if (!decided) root.append(emptyChart(f, `No decisions in ${SERIES[res].text.split(',')[0]}`));
    el.replaceChildren(root);
  }

  // Steps for a time axis, in milliseconds: whole seconds, minutes, hours.
  const TIME_STEPS = [100, 200, 500, 1e3, 2e3, 5e3, 1e4, 15e3, 3e4, 6e4, 12e4, 3e5, 6e5, 9e5, 18e5, 36e5, 72e5, 108e5, 216e5, 432e5, 864e5];

  // drawResponse is the time to decide per interval: the median and p90
  // of the hour, or the mean of the minute (the only figure kept per
  // minute). Intervals without decisions have no point.
  function drawResponse(el, points, res) {
    const f = frame(el, points);
    const lines = res === 'hour'
      ? [['p50', (p) => p.p50ResponseMs], ['p90', (p) => p.p90ResponseMs]]
      : [['mean', (p) => p.meanResponseMs]];
    const has = (p) => p.decisions > 0;
    const max = Math.max(0, ...points.filter(has).flatMap((p) => lines.map(([, v]) => v(p) || 0)));
    const step = niceStep(Math.max(max, 1000), 4, TIME_STEPS);
    const top = Math.max(step, Math.ceil(max / step) * step);
    const y = (v) => f.m.top + f.ih - (v / top) * f.ih;
    const cx = (i) => f.x(i) + f.band / 2;
    const root = svg('svg', { class: 'plot', viewBox: `0 0 ${f.W} ${f.H}`, width: f.W, height: f.H, role: 'img',
      'aria-label': `Time to decide over ${SERIES[res].text}.` });
    root.append(axes(f, points, res, top, step, durTick));
    for (const [k, v] of lines) {
      // A line joins neighbouring intervals only: a gap is a time nobody
      // decided anything, not a time decisions were quick.
      let d = '';
      points.forEach((p, i) => {
        if (!has(p) || !(v(p) >= 0)) return;
        const joined = i > 0 && has(points[i - 1]);
        d += `${joined ? 'L' : 'M'}${cx(i).toFixed(2)},${y(v(p)).toFixed(2)}`;
      });
      if (d) root.append(svg('path', { class: `line line-${k}`, d }));
    }
    const dots = svg('g', { class: 'points' });
    points.forEach((p, i) => {
      if (!has(p)) return;
      const what = res === 'hour'
        ? `median ${dur(p.p50ResponseMs)}, p90 ${dur(p.p90ResponseMs)}`
        : `mean ${dur(p.meanResponseMs)}`;
      const g = svg('g', { class: 'pt', 'data-t': p.t },
        svg('title', {}, `${intervalText(p.t, res)}: ${what} over ${p.decisions} ${p.decisions === 1 ? 'decision' : 'decisions'}`),
        svg('rect', { class: 'hit', x: f.x(i), y: f.m.top, width: f.band, height: f.ih }));
      for (const [k, v] of lines) g.append(svg('circle', { class: `dot dot-${k}`, cx: cx(i).toFixed(2), cy: y(v(p) || 0).toFixed(2), r: f.band < 6 ? 2 : 3.5 }));
      dots.append(g);
    });
    root.append(dots);
    if (!points.some(has)) root.append(emptyChart(f, `No decisions in ${SERIES[res].text.split(',')[0]}`));
    el.replaceChildren(root);
  }

  // The charts are drawn at their container's width: again when it changes.
  new ResizeObserver(() => {
    if (state.view !== 'analytics' || !an.data) return;
    const w = $('chart-decisions-plot').clientWidth;
    if (w && Math.abs(w - an.width) > 2) renderCharts();
  }).observe($('an-body'));

  // ---- views and filters ------------------------------------------------------

  const VIEWS = ['inbox', 'history', 'grants', 'analytics'];

  // setView shows a view. push puts it in the address (a tab's click);
  // load (re)reads what the view lists.
  function setView(view, push = true, load = true) {
    if (state.view !== view || push) clearLink();
    state.view = view;
    for (const v of VIEWS) {
      $(v).hidden = v !== view;
      if (v === view) $('tab-' + v).setAttribute('aria-current', 'page');
      else $('tab-' + v).removeAttribute('aria-current');
    }
    $('filters').hidden = view === 'analytics' || view === 'grants';
    $('f-status-field').hidden = view !== 'history';
    if (push) history.replaceState(null, '', '#' + view);
    if (load && view === 'history' && state.listed) loadHistory();
    if (view === 'analytics') loadAnalytics();
    else stopAnalytics();
    if (view === 'grants' && load && state.me) { renderGrants(); loadGrants(); }
    renderInbox();
  }

  for (const v of VIEWS) $('tab-' + v).addEventListener('click', (ev) => { ev.preventDefault(); setView(v); });

  // route reads the address: a view (#inbox, #history, #analytics), or a
  // call the notifications link to: #/calls/<pendingId>, with
  // ?decision=approve or reject for their buttons.
  function route() {
    const m = /^#\/calls\/([^?]+)(?:\?(.*))?$/.exec(location.hash);
    if (m) {
      let id = m[1];
      try { id = decodeURIComponent(id); } catch { /* as it came */ }
      const decision = new URLSearchParams(m[2] || '').get('decision');
      return { link: { id, decision: decision === 'approve' || decision === 'reject' ? decision : '' } };
    }
    const v = location.hash.slice(1);
    return { view: VIEWS.includes(v) ? v : 'inbox' };
  }

  window.addEventListener('hashchange', () => {
    if (!state.me) return;
    const r = route();
    if (r.link) openLink(r.link);
    else setView(r.view, false);
  });

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
  // clearFilters empties them without reloading: a link shows its call
  // whatever they said.
  function clearFilters() {
    $('f-conversation').value = '';
    $('f-tool').value = '';
    $('f-status').value = '';
    saveFilters();
  }
  $('empty-clear').addEventListener('click', clear);

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

  function loadFilters() {
    const q = new URLSearchParams(location.search);
    $('f-conversation').value = q.get('conversation') || '';
    $('f-tool').value = q.get('tool') || '';
    $('f-status').value = q.get('status') || '';
  }

  // ---- links to a call ---------------------------------------------------------

  // openLink shows the call a notification links to: its card when it
  // waits, with the button the link named ready (the reject panel open, or
  // Approve focused) but never pressed; else its row in the history, with
  // its timeline open.
  async function openLink({ id, decision }) {
    clearLink();
    let e = state.pending.get(id);
    if (!e) {
      try {
        e = await api('GET', `v1/tool-calls/${encodeURIComponent(id)}`);
      } catch (err) {
        if (err.status === 401) return showSignIn('Your token is no longer accepted. Sign in again.');
        setView('inbox', false);
        return showLinkNote(err.status === 404
          ? `The linked call ${id} does not exist here. It may belong to another toolgate, or the link may be cut short.`
          : `Could not open the linked call: ${err.message}`);
      }
    }
    if (!matches(e, filters()) || $('f-status').value) clearFilters();
    if (e.status === PENDING) {
      // Listed after this page's list, and the stream not yet caught up.
      if (!state.cards.has(id)) upsertPending(e, false);
      setView('inbox', false, false);
      state.linked = { id, entry: e };
      const card = state.cards.get(id);
      card.classList.add('card-target');
      card.scrollIntoView({ block: 'center' });
      announce(`Opened the linked call: ${e.toolName}`);
      const can = card.querySelector('.actions');
      if (decision === 'reject' && can) {
        openReject(card, card.entry);
      } else if (decision === 'approve' && can) {
        card.querySelector('button[data-action="approve"]').focus({ preventScroll: true });
      } else {
        card.tabIndex = -1;
        card.focus({ preventScroll: true });
      }
      return;
    }
    setView('history', false, false);
    state.linked = { id, entry: e };
    if (decision) showLinkNote(`This call needs no decision any more: ${verdict(e).replace(': ', ', ')}.`);
    await loadHistory();
    // Without the list (it failed), the linked call alone.
    if (!state.history) state.history = new Map();
    renderHistory();
  }

  function clearLink() {
    $('link-note').hidden = true;
    if (!state.linked) return;
    const card = state.cards.get(state.linked.id);
    if (card) card.classList.remove('card-target');
    for (const row of $('rows').querySelectorAll('.row-target')) row.classList.remove('row-target');
    state.linked = null;
  }

  function showLinkNote(text) {
    $('link-note').textContent = text;
    $('link-note').hidden = false;
  }

  // Back to the page after a while away: make sure it is current.
  document.addEventListener('visibilitychange', () => {
    if (document.visibilityState === 'visible' && state.me && !state.es) sync();
  });

  loadFilters();
  boot();
})();
