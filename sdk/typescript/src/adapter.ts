// What the framework adapters share: asking toolgate about an agent's tool
// call under the framework's own tool call id, waiting for a person's
// decision on it, and running a call only as toolgate's entry allows
// (approved, with toolgate's arguments, once).

import type { Client, Outcome } from "./client.js";
import { ExecutionError, NotFoundError, RejectedError, StorageFullError, ToolgateError, refusal } from "./errors.js";
import { runClaimed } from "./gate.js";
import { pendingId } from "./names.js";
import type { Call, Entry, JSONValue } from "./types.js";

/** How an agent's calls reach toolgate. */
export interface AdapterOptions {
  client: Client;
  /** The conversation the agent's calls belong to: with the framework's tool call id it names each call in toolgate (its pendingId). */
  conversationId: string;
  team?: string;
  taskId?: string;
}

/** Why a tool refused to run a call the framework let through. */
export type ApprovalRefusal =
  /** Toolgate has no entry for the call: it never went through the adapter's approval check. */
  | "unknown_call"
  /** The framework's arguments are not those toolgate holds for the call. */
  | "other_arguments"
  /** Toolgate has not approved the call (it is still pending): the approval is not toolgate's. */
  | "not_approved"
  /** The call ran already: the approval is replayed. */
  | "replayed";

/** An approval the framework holds that toolgate's entry does not back: the tool did not run. */
export class ApprovalRefusedError extends Error {
  override name = "ApprovalRefusedError";
  constructor(
    readonly refusal: ApprovalRefusal,
    readonly pendingId: string,
    why: string,
    readonly entry?: Entry,
  ) {
    super(`tool call ${pendingId} refused: ${why}`);
  }
}

/** JSON with object keys sorted, to compare two values however their keys are ordered. */
export function canonical(v: unknown): string {
  return JSON.stringify(v, (_k, x: unknown) =>
    x && typeof x === "object" && !Array.isArray(x)
      ? Object.fromEntries(Object.entries(x as Record<string, unknown>).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)))
      : x);
}

/**
 * Toolgate's verdict on a call as an approval check needs it: run (the
 * policy, a grant or an earlier approval lets it run now), ask (it waits
 * in toolgate for a person), or deny (it will not run: reason says who
 * and why, or why toolgate could not be asked).
 */
export type Asked =
  | { kind: "run"; reason: string; entry: Entry }
  | { kind: "ask"; reason: string; entry: Entry }
  | { kind: "deny"; reason: string; entry?: Entry };

/**
 * Submits an agent's tool call to toolgate under the framework's tool
 * call id and maps the verdict. A call toolgate cannot be asked about is
 * denied, saying why: the gate never fails open. Asking again about the
 * same call (the same id and arguments) reads the call's current state.
 */
export async function ask(opts: AdapterOptions, toolCallId: string, toolName: string, args: unknown): Promise<Asked> {
  const call: Call = {
    toolCallId, toolName, toolArguments: (args ?? {}) as JSONValue,
    conversationId: opts.conversationId,
    ...(opts.team ? { team: opts.team } : {}),
    ...(opts.taskId ? { taskId: opts.taskId } : {}),
  };
  let e: Entry;
  try {
    e = await opts.client.submit(call);
  } catch (err) {
    if (err instanceof ToolgateError && (err.status < 500 || err instanceof StorageFullError)) {
      // The same toolCallId with other arguments, a bound exceeded, a full store.
      return { kind: "deny", reason: `toolgate refused this call (${err.code}): ${err.message}` };
    }
    return { kind: "deny", reason: `toolgate could not be asked about this call: ${(err as Error).message}` };
  }
  const rej = refusal(e);
  if (rej) {
    return { kind: "deny", reason: rej.message, entry: e };
  }
  switch (e.status) {
    case "PENDING_APPROVAL":
      return { kind: "ask", reason: `waiting in toolgate as ${e.pendingId}${e.description ? `: ${e.description}` : ""}`, entry: e };
    case "APPROVED_READY_FOR_EXECUTION":
    case "SCHEDULED_FOR_EXECUTION":
      return { kind: "run", reason: `allowed by toolgate${e.statusReason ? `: ${e.statusReason}` : ""}`, entry: e };
    default:
      return { kind: "deny", reason: `toolgate has this call ${e.status} already: it does not run again`, entry: e };
  }
}

/** A person's (or the policy's) decision on a call, as a framework's approval takes it. */
export type Decision =
  /** reason says who approved it, whether they edited the arguments, and why. */
  | { approved: true; reason: string; outcome: Outcome }
  /** reason says who refused it and why (the RejectedError's message), or that it ran already. */
  | { approved: false; reason: string };

/**
 * Waits for toolgate's decision on the call pendingId. It throws the
 * signal's abort, and what keeps toolgate from answering; the call stays
 * pending in toolgate, and a later wait (in this process or another)
 * picks its decision up.
 */
export async function decision(c: Client, id: string, signal?: AbortSignal): Promise<Decision> {
  let o: Outcome;
  try {
    o = await c.await(id, signal ? { signal } : {});
  } catch (err) {
    if (err instanceof RejectedError || err instanceof ExecutionError) {
      return { approved: false, reason: err.message };
    }
    throw err;
  }
  if (o.kind === "executed") {
    return { approved: false, reason: `tool call ${o.pendingId} ran already` };
  }
  const how = o.kind === "scheduled" ? "allowed by toolgate" : `approved by ${o.by}${o.edited ? " with edited arguments" : ""}`;
  return { approved: true, reason: o.reason ? `${how}: ${o.reason}` : how, outcome: o };
}

/**
 * Runs the call pendingId only as toolgate's entry allows, whatever the
 * framework says: input (the framework's arguments) must be those
 * toolgate holds (the agent's, or the approver's edit of them), the call
 * must be approved or allowed in toolgate and not yet run; then it is claimed (so it runs once), execute runs with
 * toolgate's arguments (an approver's edit, if any), and its outcome is
 * recorded. Anything else throws an ApprovalRefusedError, or the
 * RejectedError of a refused call.
 */
export async function runApproved(c: Client, id: string, input: unknown, execute: (args: unknown) => unknown, signal?: AbortSignal): Promise<unknown> {
  let e: Entry;
  try {
    e = await c.get(id, signal ? { signal } : {});
  } catch (err) {
    if (err instanceof NotFoundError) {
      throw new ApprovalRefusedError("unknown_call", id, "toolgate has no such call: it was not asked through toolgate");
    }
    throw err;
  }
  // The agent's arguments, or an approver's edit of them that the
  // framework carries itself (LangChain's edit decision).
  const agents = e.originalArguments ?? e.toolArguments;
  if (canonical(input ?? {}) !== canonical(agents) && canonical(input ?? {}) !== canonical(e.toolArguments)) {
    throw new ApprovalRefusedError("other_arguments", id, "the arguments in the message history are not those toolgate holds for this call: an approval for other arguments", e);
  }
  const rej = refusal(e);
  if (rej) {
    throw rej;
  }
  switch (e.status) {
    case "PENDING_APPROVAL":
      throw new ApprovalRefusedError("not_approved", id, "toolgate has not approved it (it is PENDING_APPROVAL): the approval in the message history is not toolgate's", e);
    case "EXECUTING":
    case "COMPLETED_SUCCESS":
    case "COMPLETED_FAILURE":
      throw new ApprovalRefusedError("replayed", id, `it ran already (${e.status}): the approval in the message history is replayed`, e);
  }
  // Approved, or scheduled: await waits out a scheduled call's delay.
  const o = await c.await(id, signal ? { signal, start: e } : { start: e });
  if (o.kind === "executed") {
    throw new ApprovalRefusedError("replayed", id, "it ran already: the approval in the message history is replayed", o.entry);
  }
  return runClaimed(c, o.entry, async (args: unknown) => execute(args), signal, o.by);
}

/** The pendingId toolgate gives a framework's tool call toolCallId in the adapter's conversation. */
export function pendingIdOf(opts: AdapterOptions, toolCallId: string): string {
  return pendingId(opts.conversationId, toolCallId);
}
