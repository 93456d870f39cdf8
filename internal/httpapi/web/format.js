// Numbers and times as people read them.

// costText is a cost with its currency, when the policy names one.
export const costText = (n, currency) => (n ? `${formatCost(n)}${currency ? ` ${currency}` : ''}` : '');

export function formatCost(n) {
  if (!n) return '';
  return n.toLocaleString(undefined, n < 1 ? { maximumSignificantDigits: 3 } : { minimumFractionDigits: 2, maximumFractionDigits: 2 });
}

export function prettyArgs(raw) {
  try { return JSON.stringify(raw === undefined || raw === null ? {} : raw, null, 2); } catch { return String(raw); }
}

// span renders a duration: 4:05, 1h 05m, 2d 3h.
export function span(ms) {
  const s = Math.max(0, Math.floor(ms / 1000));
  const d = Math.floor(s / 86400), hh = Math.floor((s % 86400) / 3600), m = Math.floor((s % 3600) / 60), ss = s % 60;
  if (d) return `${d}d ${hh}h`;
  if (hh) return `${hh}h ${String(m).padStart(2, '0')}m`;
  return `${m}:${String(ss).padStart(2, '0')}`;
}

// ago says how long ago t was: just now, 12s ago, 5 min ago, Mar 3.
export function ago(t) {
  const s = Math.max(0, Math.round((Date.now() - t) / 1000));
  if (s < 10) return 'just now';
  if (s < 60) return `${s}s ago`;
  if (s < 3600) return `${Math.floor(s / 60)} min ago`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ago`;
  return new Date(t).toLocaleDateString(undefined, { month: 'short', day: 'numeric' });
}

export const pct = (rate, of) => (of ? `${Math.round(rate * 100)}%` : '—');

// dur renders milliseconds: 850 ms, 4.2 s, 3m 05s, 1h 20m.
export function dur(ms) {
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
export function durTick(ms) {
  if (!ms) return '0';
  if (ms % 3600000 === 0) return `${ms / 3600000} h`;
  if (ms % 60000 === 0) return `${ms / 60000} min`;
  if (ms % 1000 === 0) return `${ms / 1000} s`;
  return dur(ms);
}

export const money = (n) => (n ? formatCost(n) : '—');
export const num = (n) => (n || 0).toLocaleString();
const pad2 = (n) => String(n).padStart(2, '0');

// clock is a time of day, 24-hour, whatever the locale: 14:05.
export function clock(t, withDay) {
  const d = new Date(t);
  const hm = `${pad2(d.getHours())}:${pad2(d.getMinutes())}`;
  return withDay ? `${d.toLocaleDateString(undefined, { month: 'short', day: 'numeric' })} ${hm}` : hm;
}
