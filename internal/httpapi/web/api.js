// toolgate's API, as the signed-in user.

import { saved } from './state.js';

const LIST_PAGES = 20;

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

export async function api(method, path, body) {
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
export async function list(params) {
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

// throttled runs at most a few requests of a kind at once, so that a
// page of many cards does not starve the event stream of connections.
const throttle = { running: 0, queue: [] };
export function throttled(f) {
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
