// The client: toolgate's request API over one NATS connection, as the Go
// client (package client) speaks it: the same subjects, requests, replies
// and error codes, and the same wait on a call's own subject.

import { connect, type Msg, type NatsConnection, type Status } from "@nats-io/transport-node";

import { readCredential, type Credential } from "./creds.js";
import {
  ExecutionError,
  ForbiddenError,
  NotFoundError,
  StorageFullError,
  ToolgateError,
  UnavailableError,
  refusal,
  refusalError,
} from "./errors.js";
import {
  apiSubject,
  entrySubject,
  errorCodeHeader,
  errorHeader,
  revisionHeader,
  validPendingId,
} from "./names.js";
import type {
  Call,
  CancelConversationReply,
  Decision,
  Entry,
  Event,
  JSONValue,
  ListRequest,
  Scope,
} from "./types.js";

/** How long a request waits for toolgate when no signal bounds it: a little longer than the 30 s toolgate gives a request. */
export const defaultRequestTimeoutMs = 35_000;
/** How long a request that is safe to repeat is tried again while toolgate does not answer. */
export const defaultUnavailableWaitMs = 10_000;
/** Bounds one attempt of a repeatable request, so that a request lost with a dying server is sent again. */
const attemptTimeoutMs = 5_000;

/** The endpoints a request may be sent to again when its answer did not come. */
const repeatable = new Set(["submit", "get", "list", "budgets", "rate_limits", "analytics", "policy_get", "denied_tools", "grants_preview"]);

/** Options of Client.connect. */
export interface ConnectOptions {
  /** The NATS servers toolgate uses, e.g. "nats://127.0.0.1:4222". */
  servers: string | string[];
  /** The path of a .creds file toolgate issued. */
  creds: string;
  /** How long a request waits for toolgate when no signal bounds it (default 35 s). */
  requestTimeoutMs?: number;
  /** How long a repeatable request (submit, get, list) is tried again while toolgate does not answer (default 10 s; 0 tries once). */
  unavailableWaitMs?: number;
}

/** Options of a request: a signal that ends the wait for its answer. */
export interface RequestOptions {
  signal?: AbortSignal;
}

/** What an Outcome lets the agent do. */
export type OutcomeKind = "approved" | "scheduled" | "executed" | "failed";

/** What became of a call that was not refused. */
export interface Outcome {
  /**
   * approved: a human approved it, run it now with arguments (started
   * first); scheduled: nobody had to approve it and its time has come, run
   * it now; executed: it ran and succeeded (result, cost); failed: it ran
   * and failed (comes with an ExecutionError).
   */
  kind: OutcomeKind;
  pendingId: string;
  /** What to run: the approver's arguments when they edited the agent's (then edited is true). */
  arguments: JSONValue;
  edited: boolean;
  /** Who let the call run: the approving user, or "policy". */
  by: string;
  /** The approver's reason, or the rule or grant that let the call run without asking. */
  reason: string;
  scope?: Scope;
  result?: JSONValue;
  cost: number;
  /** The entry as await last saw it. */
  entry: Entry;
}

/** Whether the agent should run the tool now: approved, or scheduled and due. */
export function runnable(o: Outcome): boolean {
  return o.kind === "approved" || o.kind === "scheduled";
}

/** Options of await. */
export interface AwaitOptions extends RequestOptions {
  /** Wait past the approval until the call has run: for calls that executors run rather than the agent. */
  untilFinished?: boolean;
}

/** What await makes of an entry: an answer, a time to look again, or neither. */
interface Step {
  done: boolean;
  outcome?: Outcome;
  error?: Error;
  wake?: number;
}

/** Reads an entry as await reads it, at now. */
export function answer(e: Entry, untilFinished: boolean, now: number): Step {
  const rej = refusal(e);
  if (rej) {
    return { done: true, error: rej };
  }
  const o: Outcome = {
    kind: "approved",
    pendingId: e.pendingId,
    arguments: e.toolArguments,
    edited: e.originalArguments !== undefined && e.originalArguments !== null,
    by: e.approvedOrRejectedByUserId || "policy",
    reason: "",
    ...(e.decisionScope ? { scope: e.decisionScope } : {}),
    cost: 0,
    entry: e,
  };
  switch (e.status) {
    case "COMPLETED_SUCCESS":
      return { done: true, outcome: { ...o, kind: "executed", result: e.result ?? null, cost: e.cost ?? 0 } };
    case "COMPLETED_FAILURE":
      return {
        done: true,
        outcome: { ...o, kind: "failed", result: e.result ?? null, cost: e.cost ?? 0 },
        error: new ExecutionError(e),
      };
    case "APPROVED_READY_FOR_EXECUTION":
      if (untilFinished) {
        return { done: false };
      }
      return { done: true, outcome: { ...o, kind: "approved", reason: e.statusReason ?? "" } };
    case "SCHEDULED_FOR_EXECUTION": {
      if (untilFinished) {
        return { done: false };
      }
      const due = e.scheduledExecutionTime ?? 0;
      if (now < due) {
        return { done: false, wake: due };
      }
      return { done: true, outcome: { ...o, kind: "scheduled", by: "policy", reason: e.statusReason ?? "" } };
    }
    default:
      // Pending approval, or running: the answer is still to come.
      return { done: false };
  }
}

/** How often await reads the entry again in case it missed an announcement: soon at first, then less often. */
const awaitResyncFirstMs = 1_000;
const awaitResyncMaxMs = 30_000;
/** How long after a submit a read that does not find the call is taken for a read from behind the write. */
const readYourWritesMs = 5_000;

/** An error saying that signal ended what, with signal's reason as its cause. */
export function abortError(signal: AbortSignal, what: string): Error {
  const reason: unknown = signal.reason;
  const err = new Error(`${what}: ${reason instanceof Error ? reason.message : String(reason ?? "aborted")}`, { cause: reason });
  err.name = reason instanceof Error && reason.name === "TimeoutError" ? "TimeoutError" : "AbortError";
  return err;
}

/** Resolves when signal aborts (never without one). */
function aborted(signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve) => {
    if (!signal) {
      return;
    }
    if (signal.aborted) {
      resolve();
      return;
    }
    signal.addEventListener("abort", () => resolve(), { once: true });
  });
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const t = setTimeout(resolve, ms);
    signal?.addEventListener("abort", () => {
      clearTimeout(t);
      resolve();
    }, { once: true });
  });
}

/** Wakes whoever waits whenever something changed. */
class Changes {
  private waiters: (() => void)[] = [];
  notify(): void {
    const w = this.waiters;
    this.waiters = [];
    for (const f of w) f();
  }
  next(): Promise<void> {
    return new Promise((resolve) => this.waiters.push(resolve));
  }
}

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/**
 * Client talks to toolgate over one NATS connection, with a credential
 * toolgate issued: the caller of the calls it submits is the credential's
 * name. connect makes one; close ends its connection.
 */
export class Client {
  /** The name toolgate knows this client's credential by. */
  readonly name: string;
  private readonly requestTimeoutMs: number;
  private readonly unavailableWaitMs: number;
  /** The calls submitted lately, for await's read-your-writes. */
  private readonly submitted = new Map<string, number>();
  /** Whoever waits for the connection to come back (await reads again then). */
  private readonly reconnects = new Set<() => void>();
  private readonly closedOnce: Promise<void>;

  /** A client over a connection made with cred's authenticator and inbox prefix. */
  constructor(readonly nc: NatsConnection, cred: Pick<Credential, "name">, opts: Omit<ConnectOptions, "servers" | "creds"> = {}) {
    this.name = cred.name;
    this.requestTimeoutMs = opts.requestTimeoutMs ?? defaultRequestTimeoutMs;
    this.unavailableWaitMs = Math.max(opts.unavailableWaitMs ?? defaultUnavailableWaitMs, 0);
    this.closedOnce = nc.closed().then(() => undefined);
    void this.watchStatus();
  }

  /** Connects to toolgate's NATS with a .creds file. It does not wait for toolgate itself: an agent may start before it does. */
  static async connect(opts: ConnectOptions): Promise<Client> {
    const cred = readCredential(opts.creds);
    const nc = await connect({
      servers: opts.servers,
      authenticator: cred.authenticator,
      inboxPrefix: cred.inboxPrefix,
      maxReconnectAttempts: -1,
      name: cred.name,
    });
    return new Client(nc, cred, opts);
  }

  /** Closes the connection (after what it sent has gone). */
  async close(): Promise<void> {
    if (!this.nc.isClosed()) {
      await this.nc.drain().catch(() => this.nc.close());
    }
  }

  private async watchStatus(): Promise<void> {
    const statuses: AsyncIterable<Status> = this.nc.status();
    const done = this.closedOnce.then(() => ({ done: true as const, value: undefined }));
    const it = statuses[Symbol.asyncIterator]();
    for (;;) {
      const r = await Promise.race([it.next(), done]);
      if (r.done) {
        break;
      }
      if (r.value.type === "reconnect") {
        for (const f of this.reconnects) f();
      }
    }
    for (const f of this.reconnects) f();
  }

  /**
   * Sends body to an endpoint and returns the reply's JSON and the message.
   * A repeatable request is sent again while nothing answers it or
   * toolgate fails it (5xx; not storage_full, which waits for someone to
   * make room), for up to the unavailable wait, each attempt bounded,
   * within the signal.
   */
  async request<T>(endpoint: string, body: unknown, opts: RequestOptions = {}): Promise<{ value: T; msg: Msg }> {
    const data = encoder.encode(JSON.stringify(body));
    const signal = opts.signal ? AbortSignal.any([opts.signal, AbortSignal.timeout(this.requestTimeoutMs)]) : AbortSignal.timeout(this.requestTimeoutMs);
    if (!repeatable.has(endpoint)) {
      return this.attempt<T>(endpoint, data, this.requestTimeoutMs, signal);
    }
    const giveUp = Date.now() + this.unavailableWaitMs;
    for (let wait = 20; ; wait = Math.min(2 * wait, 1000)) {
      try {
        return await this.attempt<T>(endpoint, data, attemptTimeoutMs, signal);
      } catch (err) {
        // A full store is an answer: it stays full until someone makes room.
        const failed = err instanceof UnavailableError || (err instanceof ToolgateError && err.status >= 500 && !(err instanceof StorageFullError));
        const unanswered = failed || (err instanceof Error && err.name === "TimeoutError" && !signal.aborted);
        if (!unanswered || signal.aborted || (failed && Date.now() > giveUp)) {
          throw err;
        }
      }
      await sleep(wait, signal);
      if (signal.aborted) {
        throw abortError(signal, endpoint);
      }
    }
  }

  /** Sends a request once. */
  private async attempt<T>(endpoint: string, data: Uint8Array, timeoutMs: number, signal: AbortSignal): Promise<{ value: T; msg: Msg }> {
    if (signal.aborted) {
      throw abortError(signal, endpoint);
    }
    const subject = apiSubject(endpoint);
    let msg: Msg;
    try {
      msg = await Promise.race([
        this.nc.request(subject, data, { timeout: timeoutMs }),
        aborted(signal).then(() => {
          throw abortError(signal, `${endpoint}: no answer from toolgate on NATS ${this.nc.getServer()}`);
        }),
      ]);
    } catch (err) {
      throw this.requestError(endpoint, subject, err);
    }
    const code = msg.headers?.get(errorCodeHeader);
    if (code) {
      const status = Number.parseInt(code, 10) || 500;
      let detail: { code?: string; message?: string; entry?: Entry } | undefined;
      try {
        detail = (JSON.parse(decoder.decode(msg.data)) as { error?: typeof detail }).error;
      } catch {
        detail = undefined;
      }
      if (!detail?.message) {
        detail = { code: "internal", message: msg.headers?.get(errorHeader) ?? "" };
      }
      throw refusalError(detail.code ?? "internal", status, detail.message ?? "", detail.entry);
    }
    let value: T;
    try {
      value = JSON.parse(decoder.decode(msg.data)) as T;
    } catch (err) {
      throw new Error(`${endpoint}: decode reply: ${(err as Error).message}`, { cause: err });
    }
    return { value, msg };
  }

  /** The typed error of a request that got no reply. */
  private requestError(endpoint: string, subject: string, err: unknown): Error {
    if (!(err instanceof Error)) {
      return new Error(`${endpoint}: ${String(err)}`);
    }
    if (err.name === "AbortError" || (err.name === "TimeoutError" && err.message.startsWith(endpoint))) {
      return err;
    }
    const causes: Error[] = [err];
    for (let c = err.cause; c instanceof Error; c = c.cause) causes.push(c);
    if (causes.some((c) => c.name === "NoRespondersError" || (c as { isNoResponders?: () => boolean }).isNoResponders?.())) {
      return new UnavailableError(
        `toolgate is not reachable: toolgate's request API is not reachable on NATS ${this.nc.getServer()}: nothing answers ${subject} (is \`toolgate serve\` running there, with the intake role?)`,
        { cause: err },
      );
    }
    if (causes.some((c) => c.name === "PermissionViolationError")) {
      return new ForbiddenError("forbidden", 403, `${endpoint}: this credential may not publish to ${subject} (${err.message}): its role does not allow it`);
    }
    if (causes.some((c) => c.name === "TimeoutError")) {
      const t = new Error(`${endpoint}: no answer from toolgate on NATS ${this.nc.getServer()}: ${err.message}`, { cause: err });
      t.name = "TimeoutError";
      return t;
    }
    if (causes.some((c) => c.name === "ClosedConnectionError" || c.name === "DrainingConnectionError")) {
      return new UnavailableError(`${endpoint}: the connection to toolgate's NATS is closed`, { cause: err });
    }
    return new Error(`${endpoint}: ${err.message}`, { cause: err });
  }

  /**
   * Asks toolgate to gate a call and returns its entry: pending approval,
   * scheduled, or already denied by policy (REJECTED_BY_POLICY is an entry
   * here, not an error; await turns it into a RejectedError). Submitting
   * the same toolCallId in the same conversation again returns the entry
   * already there: retrying is safe.
   */
  async submit(call: Call, opts: RequestOptions = {}): Promise<Entry> {
    const { value } = await this.request<Entry>("submit", call, opts);
    this.noteSubmitted(value.pendingId);
    return value;
  }

  private noteSubmitted(id: string): void {
    const now = Date.now();
    if (this.submitted.size >= 1024) {
      for (const [k, at] of this.submitted) {
        if (now - at > readYourWritesMs) this.submitted.delete(k);
      }
    }
    this.submitted.set(id, now);
  }

  /** Returns one entry. */
  async get(pendingId: string, opts: RequestOptions = {}): Promise<Entry> {
    return (await this.read(pendingId, opts)).entry;
  }

  /** Returns one entry and the revision toolgate read it at. */
  async read(pendingId: string, opts: RequestOptions = {}): Promise<{ entry: Entry; revision: number }> {
    const { value, msg } = await this.request<Entry>("get", { pendingId }, opts);
    const revision = Number(msg.headers?.get(revisionHeader) ?? 0) || 0;
    return { entry: value, revision };
  }

  /** Returns the entries matching every field set in r, oldest first, following toolgate's pages. */
  async list(r: ListRequest = {}, opts: RequestOptions = {}): Promise<Entry[]> {
    const entries: Entry[] = [];
    let req = { ...r };
    for (;;) {
      const { value } = await this.request<{ items: Entry[] | null; nextCursor?: string }>("list", req, opts);
      entries.push(...(value.items ?? []));
      if (!value.nextCursor) {
        return entries;
      }
      req = { ...req, cursor: value.nextCursor };
    }
  }

  /**
   * Approves or rejects a pending call (approver credentials). A call
   * someone already decided is refused with a ConflictError saying who; a
   * decider who may not decide it, with a ForbiddenError.
   */
  async decide(pendingId: string, d: Decision, opts: RequestOptions = {}): Promise<Entry> {
    const body = {
      pendingId, approved: d.approve, by: d.by ?? "", reason: d.reason, scope: d.scope, arguments: d.arguments,
      forMs: d.forMs, persistRule: d.persistRule, singleUse: d.singleUse, grantMatch: d.grantMatch, result: d.result, interrupt: d.interrupt,
    };
    return (await this.request<Entry>("decide", body, opts)).value;
  }

  /** Cancels a call that has not started running. */
  async cancel(pendingId: string, opts: RequestOptions & { by?: string; reason?: string } = {}): Promise<Entry> {
    return (await this.request<Entry>("cancel", { pendingId, by: opts.by, reason: opts.reason }, opts)).value;
  }

  /** Cancels every call of a conversation that has not started running, and lists those running. */
  async cancelConversation(conversationId: string, opts: RequestOptions & { by?: string; reason?: string } = {}): Promise<CancelConversationReply> {
    const { value } = await this.request<CancelConversationReply>("cancel_conversation", { conversationId, by: opts.by, reason: opts.reason }, opts);
    return { cancelled: value.cancelled ?? [], running: value.running ?? [] };
  }

  /**
   * Claims a runnable call (approved, or scheduled and due) for by, an
   * agent about to run it itself, moving it to EXECUTING. The claim is a
   * compare-and-set: of an agent and an executor only one gets it, the
   * other a ConflictError. It is held for an hour, or leaseMs.
   */
  async started(pendingId: string, by: string, opts: RequestOptions & { leaseMs?: number; revision?: number } = {}): Promise<Entry> {
    return this.report("started", { pendingId, by, leaseMs: opts.leaseMs, revision: opts.revision }, opts);
  }

  /** Renews by's claim on a call it runs for leaseMs (an hour when absent). */
  async heartbeat(pendingId: string, by: string, opts: RequestOptions & { leaseMs?: number } = {}): Promise<Entry> {
    return this.report("heartbeat", { pendingId, by, leaseMs: opts.leaseMs }, opts);
  }

  /** Records that the call by claimed ran, with its result (any JSON) and cost. */
  async succeed(pendingId: string, by: string, result: JSONValue | undefined, opts: RequestOptions & { cost?: number } = {}): Promise<Entry> {
    return this.report("succeeded", { pendingId, by, result, cost: opts.cost }, opts);
  }

  /** Records that the call by claimed ran and failed, with the tool's error. */
  async fail(pendingId: string, by: string, error: string, opts: RequestOptions & { cost?: number } = {}): Promise<Entry> {
    return this.report("failed", { pendingId, by, error, cost: opts.cost }, opts);
  }

  /** Sends an agent's or executor's report on a call it runs. */
  async report(endpoint: "started" | "heartbeat" | "retry" | "succeeded" | "failed", body: Record<string, unknown>, opts: RequestOptions = {}): Promise<Entry> {
    return (await this.request<Entry>(endpoint, body, opts)).value;
  }

  /**
   * Waits until the call pendingId reaches a state the agent acts on, and
   * says what that is: an Outcome of kind approved, scheduled or executed;
   * a RejectedError thrown when the call was rejected, timed out,
   * cancelled or denied by policy; an ExecutionError thrown when it ran
   * and failed.
   *
   * It reads the entry, subscribes to the call's own subject (on which
   * toolgate announces every revision) and reads it again; whatever it may
   * have missed (a reconnect, a slow subscription) it reads again, at
   * growing intervals, so a lost announcement costs time, never the
   * answer. A process that restarted calls it again with the same
   * pendingId and gets the answer whenever it came. It never hands back
   * a call that is already running as one to run: it waits for that run
   * to finish. It throws the signal's abort as an AbortError (or
   * TimeoutError), a NotFoundError when there is no such call, and an
   * UnavailableError when toolgate does not serve its request API.
   */
  async await(pendingId: string, opts: AwaitOptions & { start?: Entry } = {}): Promise<Outcome> {
    if (!validPendingId(pendingId)) {
      throw new NotFoundError("not_found", 404, `await ${JSON.stringify(pendingId)}: not a toolgate pendingId`);
    }
    const signal = opts.signal;
    const untilFinished = opts.untilFinished ?? false;
    const changes = new Changes();
    let cur: Entry | undefined = opts.start;
    let rev = 0;
    let sub: { unsubscribe(): void } | undefined;
    let resync: ReturnType<typeof setTimeout> | undefined;
    let wake: ReturnType<typeof setTimeout> | undefined;
    let resyncEvery = awaitResyncFirstMs;
    let ended = false;
    const onReconnect = (): void => {
      resyncEvery = awaitResyncFirstMs;
      void reread();
    };
    this.reconnects.add(onReconnect);
    const onAbort = (): void => changes.notify();
    signal?.addEventListener("abort", onAbort);

    // reread reads the entry again, in case an announcement was missed:
    // at growing intervals while the reads find nothing new, and soon
    // again after one that failed.
    const reread = async (): Promise<void> => {
      if (ended) return;
      clearTimeout(resync);
      try {
        const r = await this.read(pendingId, { signal: AbortSignal.timeout(defaultUnavailableWaitMs + attemptTimeoutMs) });
        if (r.revision > rev || cur === undefined) {
          cur = r.entry;
          rev = r.revision;
        }
        resyncEvery = Math.min(2 * resyncEvery, awaitResyncMaxMs);
      } catch {
        // Toolgate out of reach for now, or a read from a replica behind.
        resyncEvery = awaitResyncFirstMs;
      }
      if (!ended) {
        resync = setTimeout(() => void reread(), resyncEvery);
        changes.notify();
      }
    };

    try {
      if (cur === undefined) {
        try {
          const r = await this.firstRead(pendingId, signal);
          cur = r.entry;
          rev = r.revision;
        } catch (err) {
          const retry = !(signal?.aborted) && !(err instanceof NotFoundError) && !(err instanceof UnavailableError) &&
            !(err instanceof ToolgateError && err.status < 500) && !(err instanceof Error && err.name === "AbortError");
          if (!retry) {
            throw err instanceof Error && err.name === "AbortError" && signal ? abortError(signal, `await ${pendingId} (not read yet)`) : err;
          }
        }
      }
      resync = setTimeout(() => void reread(), resyncEvery);
      for (;;) {
        if (cur !== undefined && sub === undefined && !answer(cur, untilFinished, Date.now()).done) {
          sub = this.nc.subscribe(entrySubject(cur.callerBotId, pendingId), {
            callback: (err, msg) => {
              if (err) return;
              try {
                const ev = JSON.parse(decoder.decode(msg.data)) as Event;
                // Announcements may arrive out of order, and after the read
                // they precede: keep the newest.
                if (ev.entry && ev.revision > rev) {
                  cur = ev.entry;
                  rev = ev.revision;
                  changes.notify();
                }
              } catch {
                // not an event: ignore it
              }
            },
          });
          await this.nc.flush().catch(() => undefined);
          await reread();
        }
        const next = changes.next();
        if (cur !== undefined) {
          const a = answer(cur, untilFinished, Date.now());
          if (a.done) {
            if (a.error) throw a.error;
            return a.outcome as Outcome;
          }
          clearTimeout(wake);
          if (a.wake !== undefined) {
            wake = setTimeout(() => changes.notify(), Math.max(a.wake - Date.now(), 0));
          }
        }
        if (signal?.aborted) {
          throw abortError(signal, `await ${pendingId} (${cur ? "still " + cur.status : "not read yet"})`);
        }
        if (this.nc.isClosed()) {
          throw new UnavailableError(`await ${pendingId}: the connection to toolgate's NATS is closed`);
        }
        await Promise.race([next, this.closedOnce]);
      }
    } finally {
      ended = true;
      clearTimeout(resync);
      clearTimeout(wake);
      sub?.unsubscribe();
      this.reconnects.delete(onReconnect);
      signal?.removeEventListener("abort", onAbort);
    }
  }

  /** Reads the entry await starts from; a call this client submitted lately is looked for again while not found. */
  private async firstRead(pendingId: string, signal?: AbortSignal): Promise<{ entry: Entry; revision: number }> {
    const submitted = this.submitted.get(pendingId) ?? 0;
    for (let wait = 20; ; wait = Math.min(2 * wait, 500)) {
      const bound = AbortSignal.timeout(defaultUnavailableWaitMs + attemptTimeoutMs);
      try {
        return await this.read(pendingId, { signal: signal ? AbortSignal.any([signal, bound]) : bound });
      } catch (err) {
        if (!(err instanceof NotFoundError) || Date.now() + wait > submitted + readYourWritesMs) {
          throw err;
        }
      }
      await sleep(wait, signal);
    }
  }

  /** Submits call and awaits its answer: submit, then await. */
  async requestCall(call: Call, opts: AwaitOptions = {}): Promise<Outcome> {
    const e = await this.submit(call, opts);
    return this.await(e.pendingId, { ...opts, start: e });
  }
}

