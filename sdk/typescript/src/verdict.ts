// submitAndWait: the one wait of a caller that must answer within its own
// deadline (a tool wrapper, an approval hook), as client.SubmitAndWait:
// it withdraws a call nobody decided in time and returns a typed verdict.

import { answer, runnable, type Client, type Outcome } from "./client.js";
import { ConflictError, ExecutionError, InvalidError, NotFoundError, RejectedError, UnavailableError } from "./errors.js";
import { pendingId as pendingIdOf } from "./names.js";
import type { Call, Entry } from "./types.js";

/** How long a call waits for a verdict and how it is withdrawn when the wait ends. */
export interface WaitOptions {
  /**
   * How long whoever waits on the caller waits, in ms from asked. What it keeps back from the wait (waitMargin) is the time to withdraw the call and answer.
   * Absent: waitMs and the margin (timeoutFor), or with no waitMs either, the call's own wait and the margin, as toolgate answers the submit (defaultTimeoutMs).
   */
  timeoutMs?: number;
  /** How long to wait for a decision, in ms from asked; 0 or absent: the most timeoutMs allows (waitWithin). */
  waitMs?: number;
  /** When the caller was asked about the call (epoch ms); default: now. */
  asked?: number;
  /** Ends the wait early: the caller stopped waiting. The call is withdrawn, saying why. */
  signal?: AbortSignal;
  /** Who withdraws a call ("" or absent: the credential's name). */
  by?: string;
  /** Added to the reason a withdrawn call records, after "withdrawn: <why>". */
  withdrawNote?: string;
  /** Called once the call is submitted and waits for a human (PENDING_APPROVAL). */
  onPending?: (e: Entry) => void;
}

/** What became of a call submitAndWait waited for. */
export type VerdictKind =
  /** Toolgate let the call run: outcome holds the arguments to run (started first). */
  | "run"
  /** The call will not run: error is the RejectedError saying who and why. */
  | "refused"
  /** Nobody decided by the call's approval deadline and its policy rejects it then. */
  | "expired"
  /** The call is past running, not through this caller: outcome (executed), or error (an ExecutionError). */
  | "ranElsewhere"
  /** Nobody decided within the wait: the call was withdrawn (error set: withdrawing failed). */
  | "timedOut"
  /** The caller stopped waiting (the signal): the call was withdrawn, saying why. */
  | "withdrawn"
  /** Toolgate could not be asked, or refused the request: error says why. */
  | "unreachable";

/** What became of a call submitAndWait submitted and waited for. Only kind "run" lets it run. */
export interface Verdict {
  kind: VerdictKind;
  /** The call's ("" when the submit failed). */
  pendingId: string;
  outcome?: Outcome;
  error?: Error;
  /** Why the call was withdrawn (timedOut, withdrawn). */
  why?: string;
  /** The call as submitted, and how long it waited for a human (expired). */
  entry?: Entry;
  approvalTimeoutMs?: number;
}

/** The most waitMargin keeps back. */
const maxWaitMarginMs = 10_000;

/** What a caller's timeout keeps back from the wait for withdrawing the call and answering: 10 s, or half a timeout shorter than 20 s. */
export function waitMargin(timeoutMs: number): number {
  return Math.min(maxWaitMarginMs, timeoutMs / 2);
}

/** The timeout that allows a wait of waitMs and no more (waitWithin(0, timeoutFor(w)) is w): waitMs and the margin kept back from it. */
export function timeoutFor(waitMs: number): number {
  return waitMs + Math.min(maxWaitMarginMs, waitMs);
}

/**
 * The timeout of a caller that names neither a timeout nor a wait: the
 * call's own wait, as toolgate recorded it in e, and the margin
 * (timeoutFor). A call that waits for a human waits its approval timeout
 * (approvalTimeoutAt less requestedAt), a scheduled call its delay; one
 * that waits for neither (toolgate answered it, or it runs elsewhere),
 * or one not yet recorded (no e), is given the margin's most, 10 s.
 */
export function defaultTimeoutMs(e?: Entry): number {
  let wait = 0;
  if (e?.status === "PENDING_APPROVAL" && e.approvalTimeoutAt) {
    wait = e.approvalTimeoutAt - e.requestedAt;
  } else if (e?.status === "SCHEDULED_FOR_EXECUTION" && e.scheduledExecutionTime) {
    wait = e.scheduledExecutionTime - e.requestedAt;
  }
  return timeoutFor(wait > 0 ? wait : maxWaitMarginMs);
}

/** How long a call waits for a verdict when its caller gives up after timeoutMs: waitMs, or when 0 the most it allows. A longer wait is refused. */
export function waitWithin(waitMs: number, timeoutMs: number): number {
  if (!(timeoutMs > 0)) {
    throw new InvalidError("invalid", 400, `timeoutMs: must be > 0, got ${timeoutMs}`);
  }
  const margin = waitMargin(timeoutMs);
  const most = timeoutMs - margin;
  if (waitMs < 0) {
    throw new InvalidError("invalid", 400, `waitMs: must be >= 0, got ${waitMs}`);
  }
  if (waitMs === 0) {
    return most;
  }
  if (waitMs > most) {
    throw new InvalidError("invalid", 400,
      `waitMs: ${waitMs} leaves no time to answer within the caller's timeout ${timeoutMs}: at most ${most} (the timeout less ${margin}, to withdraw the call and answer before it gives up)`);
  }
  return waitMs;
}

/** The verdict of what await returned or threw, when it is one: a decision, or a run. */
function decided(id: string, o: Outcome | undefined, err: unknown): Verdict | undefined {
  if (err instanceof RejectedError) {
    return { kind: "refused", pendingId: id, error: err };
  }
  if (err instanceof ExecutionError) {
    return { kind: "ranElsewhere", pendingId: id, error: err, ...(o ? { outcome: o } : {}) };
  }
  if (err !== undefined || o === undefined) {
    return undefined;
  }
  return runnable(o) ? { kind: "run", pendingId: id, outcome: o } : { kind: "ranElsewhere", pendingId: id, outcome: o };
}

async function settle(p: Promise<Outcome>): Promise<{ o?: Outcome; err?: unknown }> {
  try {
    return { o: await p };
  } catch (err) {
    const o = err instanceof ExecutionError ? answer(err.entry, false, Date.now()).outcome : undefined;
    return { err, ...(o ? { o } : {}) };
  }
}

/**
 * Submits call and waits for its verdict within opts.waitMs, for a caller
 * that must answer before opts.timeoutMs (absent: see WaitOptions, and
 * defaultTimeoutMs for a caller that names no wait: it waits until the
 * call's approval deadline). The call needs its toolCallId: a
 * submit cut short is withdrawn by it. When the call's approval deadline
 * comes within the wait and its policy rejects unanswered calls then, the
 * deadline decides (expired); otherwise, at the end of the wait, the call
 * is withdrawn (CANCELLED_BY_SYSTEM, "withdrawn: no decision within ...")
 * and the verdict is timedOut. When opts.signal aborts first, the call is
 * withdrawn too (withdrawn). A decision that lands while the call is being
 * withdrawn stands, and is the verdict. It never fails open: only "run"
 * lets the call run.
 */
export async function submitAndWait(c: Client, call: Call, opts: WaitOptions): Promise<Verdict> {
  const asked = opts.asked ?? Date.now();
  // A caller that names no timeout but a wait gives up the margin after
  // it; one that names neither waits as long as the call does, which only
  // toolgate's answer to the submit says: until then, the submit is
  // bounded by the client's own request timeout.
  let timeoutMs = callerTimeout(opts);
  let wait: number | undefined;
  try {
    wait = timeoutMs === undefined ? undefined : waitWithin(opts.waitMs ?? 0, timeoutMs);
  } catch (err) {
    return { kind: "unreachable", pendingId: "", error: err as Error };
  }
  if (!call.toolCallId) {
    return { kind: "unreachable", pendingId: "", error: new InvalidError("invalid", 400, "toolCallId: required, to withdraw a call whose submit is cut short") };
  }
  const id = pendingIdOf(call.conversationId, call.toolCallId);
  const waitOver = (ms: number): string => `no decision within ${ms} ms`;
  const caller = opts.signal;
  const waitEnd = wait === undefined ? undefined : AbortSignal.timeout(Math.max(asked + wait - Date.now(), 0));
  const sSignal = caller && waitEnd ? AbortSignal.any([caller, waitEnd]) : caller ?? waitEnd;

  let e: Entry;
  try {
    e = await c.submit(call, sSignal ? { signal: sSignal } : {});
  } catch (err) {
    if (err instanceof UnavailableError) {
      return { kind: "unreachable", pendingId: "", error: err };
    }
    const w = new Withdrawer(c, opts, timeoutMs ?? defaultTimeoutMs());
    if (caller?.aborted) {
      return w.withdraw(id, "withdrawn", w.stopped());
    }
    if (waitEnd?.aborted && wait !== undefined) {
      return w.withdraw(id, "timedOut", waitOver(wait));
    }
    return { kind: "unreachable", pendingId: "", error: err as Error };
  }
  if (timeoutMs === undefined || wait === undefined) {
    timeoutMs = defaultTimeoutMs(e);
    wait = waitWithin(0, timeoutMs);
  }
  const w = new Withdrawer(c, opts, timeoutMs);

  let until = asked + wait;
  let deadlineDecides = false;
  if (e.status === "PENDING_APPROVAL") {
    opts.onPending?.(e);
    if (e.autoRejectOnTimeout && e.approvalTimeoutAt) {
      const t = e.approvalTimeoutAt - e.requestedAt;
      const d = Date.now() + t;
      if (t <= wait && d <= asked + wait + w.spare()) {
        until = d;
        deadlineDecides = true;
      }
    }
  }
  const awaitEnd = AbortSignal.timeout(Math.max(until - Date.now(), 0));
  const aSignal = caller ? AbortSignal.any([caller, awaitEnd]) : awaitEnd;
  const { o, err } = await settle(c.await(e.pendingId, { signal: aSignal, start: e }));
  const v = decided(e.pendingId, o, err);
  if (v) {
    return v;
  }
  if (caller?.aborted) {
    return w.withdraw(e.pendingId, "withdrawn", w.stopped());
  }
  if (awaitEnd.aborted && deadlineDecides) {
    return w.expired(e);
  }
  if (awaitEnd.aborted) {
    return w.withdraw(e.pendingId, "timedOut", waitOver(wait));
  }
  return { kind: "unreachable", pendingId: e.pendingId, error: err as Error };
}

/** Withdraws the call pendingId as submitAndWait does when it stops waiting; a decision that landed first stands, and is the verdict. */
export async function withdraw(c: Client, pendingId: string, why: string, opts: WaitOptions): Promise<Verdict> {
  return new Withdrawer(c, opts, callerTimeout(opts) ?? defaultTimeoutMs()).withdraw(pendingId, "withdrawn", why);
}

/** The caller's timeout as opts give it: timeoutMs, or waitMs and the margin; undefined when they name neither. */
function callerTimeout(opts: WaitOptions): number | undefined {
  return opts.timeoutMs ?? (opts.waitMs ? timeoutFor(opts.waitMs) : undefined);
}

/** Ends a wait through a client. */
class Withdrawer {
  constructor(
    private readonly c: Client,
    private readonly opts: WaitOptions,
    /** The caller's timeout, opts.timeoutMs or its default. */
    private readonly timeoutMs: number,
  ) {}

  /** What withdrawing a call, or reading a decision that came first, may take. */
  spare(): number {
    return waitMargin(this.timeoutMs) / 2;
  }

  /** Why the caller stopped waiting. */
  stopped(): string {
    const reason: unknown = this.opts.signal?.reason;
    return reason instanceof Error ? reason.message : String(reason ?? "the caller stopped waiting");
  }

  async withdraw(pendingId: string, kind: "timedOut" | "withdrawn", why: string): Promise<Verdict> {
    const signal = AbortSignal.timeout(this.spare());
    try {
      await this.c.cancel(pendingId, { by: this.opts.by ?? "", reason: `withdrawn: ${why}${this.opts.withdrawNote ?? ""}`, signal });
      return { kind, pendingId, why };
    } catch (err) {
      if (err instanceof NotFoundError) {
        return { kind, pendingId, why }; // the submit never landed
      }
      if (err instanceof ConflictError) {
        // Decided (or denied, or claimed) just as it was withdrawn.
        const { o, err: aerr } = await settle(this.c.await(pendingId, { signal }));
        return decided(pendingId, o, aerr) ?? { kind: "unreachable", pendingId, why, error: aerr as Error };
      }
      // The call may still be pending in toolgate, and be decided later.
      return { kind, pendingId, why, error: err as Error };
    }
  }

  async expired(e: Entry): Promise<Verdict> {
    const signal = AbortSignal.timeout(this.spare());
    const v: Verdict = { kind: "expired", pendingId: e.pendingId, entry: e, approvalTimeoutMs: (e.approvalTimeoutAt ?? 0) - e.requestedAt };
    let cur: Entry;
    try {
      cur = await this.c.get(e.pendingId, { signal });
    } catch {
      return v;
    }
    if (cur.status === "PENDING_APPROVAL") {
      return v;
    }
    const { o, err } = await settle(this.c.await(e.pendingId, { signal }));
    const d = decided(e.pendingId, o, err);
    return d && (d.error === undefined || d.kind === "refused") ? d : v;
  }
}

