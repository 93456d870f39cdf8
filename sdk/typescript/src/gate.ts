// gate: a tool function that runs only when toolgate lets it, with the
// arguments toolgate approved, and whose outcome toolgate records: the
// path of an agent that runs its own tools (submit, wait, claim, run,
// report), as the Go SDK and the Claude Code hooks take it.

import { randomUUID } from "node:crypto";

import type { Client } from "./client.js";
import { ConflictError, type ExecutionError } from "./errors.js";
import { outcomeState, sendReport } from "./report.js";
import type { Entry, JSONValue } from "./types.js";
import { submitAndWait, type Verdict } from "./verdict.js";

/** How a gated tool is submitted and waited for. */
export interface GateOptions {
  client: Client;
  /** The conversation the calls belong to (a gated call may name another). */
  conversationId: string;
  /**
   * How long the caller waits for the tool at most, in ms: the wait for a decision is this less the time to withdraw the call (waitMargin).
   * Default: waitMs and that margin, or, with no waitMs either, the call's own approval timeout and the margin (defaultTimeoutMs), so that a call waits as long as toolgate lets a human decide it.
   */
  timeoutMs?: number;
  /** How long to wait for a decision, in ms (default: the most timeoutMs allows). */
  waitMs?: number;
  team?: string;
  taskId?: string;
  estimatedCost?: number;
  /**
   * What a call that already ran (its toolCallId submitted and run before)
   * gives: "result" (default), the result toolgate recorded, without
   * running it again; "refuse", an AlreadyRanError.
   */
  ranBefore?: "result" | "refuse";
}

/** Options of one gated call. */
export interface GateCallOptions {
  /** The agent's id for the call (default: a new one). The same id again is the same call: it is not run twice. */
  toolCallId?: string;
  /** The caller stops waiting: a call not yet decided is withdrawn; a running tool sees it in its context. */
  signal?: AbortSignal;
  conversationId?: string;
}

/** What a gated tool function is handed besides its arguments. */
export interface GateContext {
  pendingId: string;
  /** The entry as the claim left it. */
  entry: Entry;
  /** Whether the approver edited the agent's arguments: the function gets the edited ones. */
  edited: boolean;
  /** Who let it run: the approving user, or "policy". */
  by: string;
  signal: AbortSignal;
  /** What the run cost, recorded with its outcome: set it before returning. */
  cost: number;
}

/** A gated tool: called with the agent's arguments, it runs the function with the approved ones. */
export type GatedTool<A extends JSONValue, R> = (args: A, opts?: GateCallOptions) => Promise<R>;

/** A call whose wait ended without a decision: withdrawn when the wait or the caller's signal ended, or past its approval deadline. It did not run. */
export class NotDecidedError extends Error {
  override name = "NotDecidedError";
  constructor(readonly verdict: Verdict) {
    const why = verdict.kind === "expired" ? `nobody decided by its approval deadline (${verdict.approvalTimeoutMs} ms)` : verdict.why ?? verdict.kind;
    const failed = verdict.error ? `; withdrawing it failed, it may still be pending: ${verdict.error.message}` : "";
    super(`tool call ${verdict.pendingId} not decided: ${why}${failed}`, verdict.error ? { cause: verdict.error } : undefined);
  }
}

/** A call that had run already, refused rather than run again (ranBefore "refuse", a replayed approval). */
export class AlreadyRanError extends Error {
  override name = "AlreadyRanError";
  constructor(readonly entry: Entry, why = "it ran already") {
    super(`tool call ${entry.pendingId} (${entry.toolName}) refused: ${why} (${entry.status})`);
  }
}

/**
 * gate wraps fn, the tool named tool, so that a call is submitted to
 * toolgate, waited for within the caller's deadline (options.timeoutMs,
 * by default the call's approval timeout and a margin, and the call's
 * signal), and run only when toolgate lets it run: with
 * the approved arguments (an approver's edit, if any), claimed first (so
 * no executor runs it too), and its outcome recorded (COMPLETED_SUCCESS
 * with the result fn returns, COMPLETED_FAILURE with the error it
 * throws, which is thrown on). A refusal throws a RejectedError naming
 * who refused and why; a call nobody decided in time is withdrawn and
 * throws a NotDecidedError. It never returns a result fn did not make.
 */
export function gate<A extends JSONValue, R>(tool: string, fn: (args: A, ctx: GateContext) => Promise<R> | R, options: GateOptions): GatedTool<A, R> {
  const c = options.client;
  return async (args: A, call: GateCallOptions = {}): Promise<R> => {
    const toolCallId = call.toolCallId ?? `tg_${randomUUID()}`;
    const v = await submitAndWait(c, {
      toolCallId, toolName: tool, toolArguments: args, conversationId: call.conversationId ?? options.conversationId,
      ...(options.team ? { team: options.team } : {}),
      ...(options.taskId ? { taskId: options.taskId } : {}),
      ...(options.estimatedCost ? { estimatedCost: options.estimatedCost } : {}),
    }, { timeoutMs: options.timeoutMs, ...(options.waitMs ? { waitMs: options.waitMs } : {}), ...(call.signal ? { signal: call.signal } : {}) });
    switch (v.kind) {
      case "run":
        return runClaimed(c, v.outcome!.entry, fn, call.signal, v.outcome!.by);
      case "refused":
      case "unreachable":
        throw v.error;
      case "ranElsewhere": {
        const e = v.outcome?.entry ?? (v.error as ExecutionError).entry;
        if (options.ranBefore === "refuse") {
          throw new AlreadyRanError(e);
        }
        if (v.error) {
          throw v.error;
        }
        return v.outcome!.result as R;
      }
      default:
        throw new NotDecidedError(v);
    }
  };
}

/**
 * Claims the runnable call e for this client (started), runs fn with its
 * approved arguments, and records the outcome. A claim someone else got
 * first is an AlreadyRanError.
 */
export async function runClaimed<A, R>(c: Client, e: Entry, fn: (args: A, ctx: GateContext) => Promise<R> | R, signal: AbortSignal | undefined, by: string): Promise<R> {
  let claimed: Entry;
  try {
    claimed = await c.started(e.pendingId, c.name, signal ? { signal } : {});
  } catch (err) {
    if (err instanceof ConflictError) {
      throw new AlreadyRanError(err.entry ?? e, "someone else claimed it, or it ran already");
    }
    throw err;
  }
  const ctx: GateContext = {
    pendingId: e.pendingId, entry: claimed, edited: claimed.originalArguments !== undefined && claimed.originalArguments !== null,
    by, signal: signal ?? new AbortController().signal, cost: 0,
  };
  const mine = (x: Entry, endpoint: "succeeded" | "failed"): boolean =>
    x.status === outcomeState(endpoint) && (x.lastTransition?.actor === c.name || (x.lastTransition?.actor ?? "").endsWith("/" + c.name));
  let result: R;
  try {
    result = await fn(claimed.toolArguments as A, ctx);
  } catch (err) {
    const message = err instanceof Error ? err.message : String(err);
    await sendReport(c, "failed", { pendingId: e.pendingId, by: c.name, error: message, cost: ctx.cost }, (x) => mine(x, "failed")).catch(() => undefined);
    throw err;
  }
  const body: Record<string, unknown> & { pendingId: string } = { pendingId: e.pendingId, by: c.name, cost: ctx.cost };
  if (result !== undefined) {
    body.result = result;
  }
  await sendReport(c, "succeeded", body, (x) => mine(x, "succeeded"));
  return result;
}

