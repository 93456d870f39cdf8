// Executor: hosts tool handlers. It takes the runnable calls of its tools
// from toolgate (toolgate.work), which claims each for it by
// compare-and-set before answering; heartbeats from the claim until the
// outcome is recorded; retries a failed attempt with backoff while the
// call's attempts last; and records the outcome, as client.Executor does.

import { hostname } from "node:os";
import { randomBytes } from "node:crypto";

import type { Client } from "./client.js";
import { ConflictError, ForbiddenError, InvalidError, NotFoundError, ToolgateError } from "./errors.js";
import { cancelSubject } from "./names.js";
import { outcomeState, sendReport } from "./report.js";
import type { CancelConversationReply, Entry, JSONValue, WorkClaim } from "./types.js";

/** A claimed call handed to a handler: no other executor runs it while this one holds its lease. */
export interface ExecutorCall {
  pendingId: string;
  /** The agent's id for the call: the idempotency key of whatever the tool changes, since a call whose executor died runs again elsewhere. */
  toolCallId: string;
  toolName: string;
  /** Approved, possibly edited by the approver. */
  arguments: JSONValue;
  conversationId: string;
  callerBotId: string;
  /** 1 for the first run. */
  attempt: number;
  entry: Entry;
  /** Since when the call was runnable (epoch ms, toolgate's clock). */
  queued: number;
}

/** What a handler returns: output is any JSON. */
export interface ExecutorResult {
  output?: JSONValue;
  cost?: number;
}

/**
 * Runs one tool. It ends when signal aborts: the executor stops, the
 * call's conversation is cancelled, or its lease is lost. A thrown error
 * fails the attempt; the call is tried again, with backoff, until its
 * policy's attempts run out, unless the error is permanent().
 */
export type Handler = (call: ExecutorCall, signal: AbortSignal) => Promise<ExecutorResult> | ExecutorResult;

const permanentMark = Symbol("toolgate.permanent");

/** Marks a handler's error that trying again cannot fix: the call fails at once. */
export function permanent<E extends Error>(err: E): E {
  (err as E & { [permanentMark]?: boolean })[permanentMark] = true;
  return err;
}

function isPermanent(err: unknown): boolean {
  return err instanceof Error && (err as Error & { [permanentMark]?: boolean })[permanentMark] === true;
}

/** Options of an Executor. */
export interface ExecutorOptions {
  /** Names this executor as the holder of its leases (default host-pid-random). Two executors running at once must not share one. */
  id?: string;
  /** How long a claim lasts without a heartbeat, in ms (default 30 s); heartbeats renew it every third of that. */
  leaseMs?: number;
  /** The wait before each retry, in ms; the last repeats (default 1 s, 2 s, 4 s). */
  backoffMs?: number[];
  /** How many calls of one tool run at once (default 8). */
  concurrency?: number;
  /** Told what goes wrong that the executor works around (default: nothing). */
  log?: (msg: string, fields?: Record<string, unknown>) => void;
}

/** How many attempts toolgate allows a call when its policy does not say (machine.DefaultMaxExecutionAttempts). */
export const defaultMaxExecutionAttempts = 3;

/** How many more times a call may be claimed (machine.Entry.AttemptsLeft). */
function attemptsLeft(e: Entry): number {
  const limit = e.maxExecutionAttempts && e.maxExecutionAttempts > 0 ? e.maxExecutionAttempts : defaultMaxExecutionAttempts;
  return Math.max(limit - e.executionAttempts, 0);
}

/** How long an executor remembers the attempts it ran: longer than a claim it had in hand is handed to it again. */
const ranForMs = 60_000;

/** How long a request for work waits at toolgate for a call when there is none. */
const takeWaitMs = 15_000;

/**
 * Executor hosts tool handlers: handle each tool, then run until the
 * signal aborts. A call that is not approved or due, or already decided,
 * cancelled, finished or claimed by a live executor, is never handed to
 * it; one it claimed runs again elsewhere only when it stops (or is cut
 * off from toolgate for longer than a lease) before recording it.
 */
export class Executor {
  readonly id: string;
  private readonly leaseMs: number;
  private readonly backoffMs: number[];
  private readonly concurrency: number;
  private readonly log: (msg: string, fields?: Record<string, unknown>) => void;
  private readonly handlers = new Map<string, Handler>();
  /** The calls in hand, from the claim until the outcome is recorded, and how to stop each. */
  private readonly busy = new Map<string, AbortController>();
  /** The last attempt of each call this executor ran lately, and when it ended. */
  private readonly ran = new Map<string, { attempt: number; ended: number }>();
  private ranPruned = 0;

  constructor(private readonly c: Client, opts: ExecutorOptions = {}) {
    this.id = opts.id ?? `${hostname()}-${process.pid}-${randomBytes(3).toString("hex")}`;
    this.leaseMs = opts.leaseMs && opts.leaseMs > 0 ? opts.leaseMs : 30_000;
    this.backoffMs = opts.backoffMs?.length ? opts.backoffMs : [1_000, 2_000, 4_000];
    this.concurrency = opts.concurrency && opts.concurrency > 0 ? opts.concurrency : 8;
    this.log = opts.log ?? (() => undefined);
  }

  /** Hosts tool with h. Call it before run. */
  handle(tool: string, h: Handler): this {
    this.handlers.set(tool, h);
    return this;
  }

  /**
   * Takes the hosted tools' calls from toolgate until signal aborts, then
   * withdraws its requests for work and waits for the handlers running.
   * It throws when toolgate refuses the credential work (its role).
   */
  async run(signal: AbortSignal): Promise<void> {
    if (this.handlers.size === 0) {
      throw new Error("executor: no tools to host");
    }
    const sub = this.c.nc.subscribe(cancelSubject, {
      callback: (err, msg) => {
        if (err) return;
        try {
          const reply = JSON.parse(new TextDecoder().decode(msg.data)) as CancelConversationReply;
          for (const e of reply.running ?? []) {
            this.busy.get(e.pendingId)?.abort(new Error("conversation cancelled"));
          }
        } catch {
          // not a cancel: ignore it
        }
      },
    });
    const stop = new AbortController();
    const both = AbortSignal.any([signal, stop.signal]);
    const runs = new Set<Promise<void>>();
    try {
      await Promise.all([...this.handlers].map(([tool, h]) => this.take(both, tool, h, runs).catch((err) => {
        stop.abort(err);
        throw err;
      })));
    } finally {
      sub.unsubscribe();
      await Promise.allSettled([...runs]);
    }
  }

  /**
   * Asks toolgate for calls of tool, one a request, with up to 4 requests
   * (and no more than its free slots) at once, and runs each it gets. Idle,
   * it keeps one request waiting. A refusal no retry changes (a credential
   * that may not run tools) ends it, thrown.
   */
  private async take(signal: AbortSignal, tool: string, h: Handler, runs: Set<Promise<void>>): Promise<void> {
    let free = this.concurrency;
    let out = 0;
    let idle = false;
    let fatal: unknown;
    let wakeup: (() => void) | undefined;
    const notify = (): void => wakeup?.();
    const stopped = new Promise<void>((r) => signal.addEventListener("abort", () => r(), { once: true }));
    const inflight = new Set<Promise<void>>();
    try {
      while (!signal.aborted && fatal === undefined) {
        if (free === 0 || out >= 4 || (idle && out > 0)) {
          await Promise.race([new Promise<void>((r) => (wakeup = r)), stopped]);
          continue;
        }
        free--;
        out++;
        const p: Promise<void> = this.takeWork(signal, tool).then(
          (calls) => {
            idle = calls.length === 0;
            if (calls.length === 0) free++;
            calls.forEach((claim, i) => {
              const r: Promise<void> = this.runClaimed(signal, claim, h).finally(() => {
                runs.delete(r);
                if (i === 0) free++;
                notify();
              });
              runs.add(r);
            });
          },
          async (err: unknown) => {
            free++;
            if (err instanceof ForbiddenError || err instanceof InvalidError) {
              fatal = err;
              return;
            }
            if (!signal.aborted) {
              this.log("taking work failed, asking again", { tool, err: String(err) });
              await new Promise((r) => setTimeout(r, 1_000));
            }
          },
        ).finally(() => {
          out--;
          inflight.delete(p);
          notify();
        });
        inflight.add(p);
      }
      if (fatal !== undefined) {
        throw new Error(`executor: taking work for ${tool}: ${String(fatal instanceof Error ? fatal.message : fatal)}`, { cause: fatal });
      }
    } finally {
      await this.withdraw(tool);
      await Promise.allSettled([...inflight]);
    }
  }

  /** Sends one request for work, which waits at toolgate up to 15 s (or a third of the lease). */
  private async takeWork(signal: AbortSignal, tool: string): Promise<WorkClaim[]> {
    const waitMs = Math.min(takeWaitMs, Math.floor(this.leaseMs / 3));
    const { value } = await this.c.request<{ calls: WorkClaim[] | null }>("work", {
      tools: [tool], max: 1, waitMs, leaseMs: this.leaseMs, by: this.id, running: [...this.busy.keys()],
    }, { signal: AbortSignal.any([signal, AbortSignal.timeout(waitMs + 2_000)]) });
    return value.calls ?? [];
  }

  /** Ends this executor's requests for work of tool that wait at toolgate: nobody would hear their answer. */
  private async withdraw(tool: string): Promise<void> {
    if (this.c.nc.isClosed()) return;
    try {
      await this.c.request("work", { tools: [tool], leaseMs: this.leaseMs, by: this.id, withdraw: true }, { signal: AbortSignal.timeout(2_000) });
    } catch (err) {
      if (!(err instanceof ForbiddenError)) {
        this.log("withdrawing the requests for work failed: a call claimed for this executor meanwhile waits out its lease", { tool, err: String(err) });
      }
    }
  }

  /** Whether a lease holder or a transition's actor is this executor: its id, or its id under its credential's name. */
  private is(name: string | undefined): boolean {
    return name === this.id || (name ?? "").endsWith("/" + this.id);
  }

  /** Runs a claimed call until it succeeds, fails for good, or this executor stops or loses the lease. */
  private async runClaimed(stopping: AbortSignal, claim: WorkClaim, h: Handler): Promise<void> {
    let e = claim.entry;
    const id = e.pendingId;
    // A call running here already is not run again (its lease ran out under
    // load and toolgate offered it again), nor one whose attempt ran here
    // already (a claim handed again because toolgate did not know).
    if (this.busy.has(id) || (this.ran.get(id)?.attempt ?? 0) >= e.executionAttempts) {
      this.log("claimed again while running here, or after", { pendingId: id, attempt: e.executionAttempts });
      return;
    }
    const run = new AbortController();
    this.busy.set(id, run);
    const lease = this.keepLease(id, run);
    const signal = AbortSignal.any([stopping, run.signal]);
    try {
      for (;;) {
        let res: ExecutorResult = {};
        let failure: unknown;
        try {
          res = await h({
            pendingId: id, toolCallId: e.toolCallId, toolName: e.toolName, arguments: e.toolArguments,
            conversationId: e.conversationId, callerBotId: e.callerBotId, attempt: e.executionAttempts, entry: e, queued: claim.runnableSince,
          }, signal);
        } catch (err) {
          failure = err;
        }
        const body: Record<string, unknown> & { pendingId: string } = { pendingId: id, by: this.id, cost: res.cost };
        if (res.output !== undefined) body.result = res.output;
        if (failure === undefined) {
          // Done, even if this executor is stopping: recorded, it does not run again elsewhere.
          await this.record("succeeded", body);
          return;
        }
        if (run.signal.aborted && String(run.signal.reason).includes("conversation cancelled")) {
          await this.record("failed", { ...body, error: `cancelled: ${String(failure instanceof Error ? failure.message : failure)}` });
          return;
        }
        if (signal.aborted) {
          this.log("stopped running", { pendingId: id, cause: String(signal.reason) });
          return; // leave it to the lease
        }
        if (isPermanent(failure) || attemptsLeft(e) <= 0) {
          await this.record("failed", { ...body, error: failure instanceof Error ? failure.message : String(failure) });
          return;
        }
        this.log("attempt failed, retrying", { pendingId: id, attempt: e.executionAttempts, err: String(failure) });
        await new Promise((r) => setTimeout(r, this.backoffMs[Math.min(e.executionAttempts, this.backoffMs.length) - 1]));
        if (signal.aborted) return;
        const failed = e.executionAttempts;
        try {
          e = await sendReport(this.c, "retry", { pendingId: id, by: this.id, attempt: failed, leaseMs: this.leaseMs },
            (x) => x.status === "EXECUTING" && this.is(x.lease?.holder) && x.executionAttempts === failed + 1, Math.max(this.leaseMs, 30_000));
        } catch (err) {
          this.log("could not claim again", { pendingId: id, err: String(err) });
          return;
        }
      }
    } finally {
      lease.stop();
      this.busy.delete(id);
      this.noteRan(id, e.executionAttempts);
    }
  }

  /** Records that this executor ran attempt of pendingId, and forgets what it ran longer than a minute ago. */
  private noteRan(pendingId: string, attempt: number): void {
    const now = Date.now();
    if (now - this.ranPruned > ranForMs) {
      for (const [id, r] of this.ran) {
        if (now - r.ended > ranForMs) this.ran.delete(id);
      }
      this.ranPruned = now;
    }
    this.ran.set(pendingId, { attempt, ended: now });
  }

  /** Records a finished run, sent again while toolgate does not answer for as long as a lease. */
  private async record(endpoint: "succeeded" | "failed", body: Record<string, unknown> & { pendingId: string }): Promise<void> {
    try {
      await sendReport(this.c, endpoint, body, (x) => x.status === outcomeState(endpoint) && this.is(x.lastTransition?.actor), Math.max(this.leaseMs, 30_000));
    } catch (err) {
      this.log(err instanceof ToolgateError ? "outcome refused" : "recording the outcome failed; the lease runs out and the call may run again",
        { pendingId: body.pendingId, err: String(err) });
    }
  }

  /** Renews the lease on a call every third of the lease until stopped; a refused renewal (run out, reclaimed) aborts the run. */
  private keepLease(pendingId: string, run: AbortController): { stop(): void } {
    const every = Math.floor(this.leaseMs / 3);
    let timer: ReturnType<typeof setTimeout> | undefined;
    let stopped = false;
    const beat = async (): Promise<void> => {
      try {
        await this.c.heartbeat(pendingId, this.id, { leaseMs: this.leaseMs, signal: AbortSignal.timeout(Math.max(every, 2_000)) });
        if (!stopped) timer = setTimeout(() => void beat(), every);
      } catch (err) {
        if (err instanceof ConflictError || err instanceof NotFoundError) {
          run.abort(new Error("lease lost"));
          return;
        }
        if (!stopped) timer = setTimeout(() => void beat(), Math.min(every, 1_000));
      }
    };
    timer = setTimeout(() => void beat(), every);
    return {
      stop: () => {
        stopped = true;
        clearTimeout(timer);
      },
    };
  }
}
