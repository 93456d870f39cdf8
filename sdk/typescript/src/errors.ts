// Typed errors: toolgate's refusals by their wire code, a call that will
// not run (RejectedError), a call that ran and failed (ExecutionError),
// and toolgate not answering (UnavailableError).

import type { Entry, State } from "./types.js";

/** The codes of toolgate's refusals (wire.ErrorStatus). */
export type ErrorCode =
  | "invalid"
  | "forbidden"
  | "edit_denied"
  | "not_found"
  | "conflict"
  | "expired"
  | "idempotency_conflict"
  | "storage_full"
  | "internal";

/**
 * A refusal received from toolgate: its code, an HTTP-like status, what
 * was wrong, and the entry as it is now when the refusal is a conflict
 * with it. Each code has its subclass, so `instanceof ConflictError` tells
 * one from another.
 */
export class ToolgateError extends Error {
  override name = "ToolgateError";
  constructor(
    readonly code: ErrorCode,
    readonly status: number,
    message: string,
    readonly entry?: Entry,
  ) {
    super(message);
  }
}

/** The request was malformed: a field out of bounds, a missing id. */
export class InvalidError extends ToolgateError {
  override name = "InvalidError";
}
/** The credential may not do this (its role, or the call is not its own). */
export class ForbiddenError extends ToolgateError {
  override name = "ForbiddenError";
}
/** An approver's edit of the arguments is not allowed by the policy. */
export class EditDeniedError extends ToolgateError {
  override name = "EditDeniedError";
}
/** No such call. */
export class NotFoundError extends ToolgateError {
  override name = "NotFoundError";
}
/** The call is not in a state that allows this: decided, claimed, finished. The error's entry says how it is. */
export class ConflictError extends ToolgateError {
  override name = "ConflictError";
}
/** The call's approval deadline has passed. */
export class ExpiredError extends ToolgateError {
  override name = "ExpiredError";
}
/** The toolCallId was submitted before with other arguments. */
export class IdempotencyConflictError extends ToolgateError {
  override name = "IdempotencyConflictError";
}
/** Toolgate's store is full (507): nothing was written, and asking again changes nothing until someone makes room. */
export class StorageFullError extends ToolgateError {
  override name = "StorageFullError";
}
/** Toolgate failed to do what it was asked (a 5xx): it may be asked again. */
export class InternalError extends ToolgateError {
  override name = "InternalError";
}

/** Every ErrorCode. */
export const errorCodes = Object.keys({
  invalid: 1, forbidden: 1, edit_denied: 1, not_found: 1, conflict: 1, expired: 1, idempotency_conflict: 1, storage_full: 1, internal: 1,
} satisfies Record<ErrorCode, 1>) as ErrorCode[];

const byCode: Record<ErrorCode, typeof ToolgateError> = {
  invalid: InvalidError,
  forbidden: ForbiddenError,
  edit_denied: EditDeniedError,
  not_found: NotFoundError,
  conflict: ConflictError,
  expired: ExpiredError,
  idempotency_conflict: IdempotencyConflictError,
  storage_full: StorageFullError,
  internal: InternalError,
};

/** The typed error of a refusal with code (an unknown code is an InternalError). */
export function refusalError(code: string, status: number, message: string, entry?: Entry): ToolgateError {
  const known = (byCode as Record<string, typeof ToolgateError>)[code];
  const E = known ?? InternalError;
  return new E(known ? (code as ErrorCode) : "internal", status, message, entry);
}

/** Nothing answered a request: no toolgate serves its request API on this NATS, or the connection is down. */
export class UnavailableError extends Error {
  override name = "UnavailableError";
}

/** Why a call will not run, one per state it ends in. */
export type Rejection = "rejected" | "timed_out" | "cancelled" | "denied";

const rejections: Partial<Record<State, Rejection>> = {
  REJECTED_BY_USER: "rejected",
  REJECTED_BY_TIMEOUT: "timed_out",
  CANCELLED_BY_SYSTEM: "cancelled",
  REJECTED_BY_POLICY: "denied",
};

/**
 * A call that will not run: a human rejected it, nobody answered in time,
 * it was cancelled, or the policy denied it. It is an error, never a
 * result, so that a refusal cannot be passed on as if the tool had run.
 */
export class RejectedError extends Error {
  override name = "RejectedError";
  /** Which refusal. */
  readonly kind: Rejection;
  /** Who refused: the user who rejected or cancelled it, "timer" for a timeout, "policy" for a denial. */
  readonly by: string;
  /** Why, as they said it (the entry's statusReason). */
  readonly reason: string;
  /** The policy rule or field that denied the call (kind "denied" only). */
  readonly rule: string;
  constructor(readonly entry: Entry) {
    const kind = rejections[entry.status];
    if (!kind) {
      throw new TypeError(`RejectedError: ${entry.status} is no refusal`);
    }
    let by = entry.lastTransition?.actor ?? "";
    let rule = "";
    const reason = entry.statusReason ?? "";
    if (kind === "rejected" && entry.approvedOrRejectedByUserId) {
      by = entry.approvedOrRejectedByUserId;
    }
    if (kind === "denied") {
      by = "policy";
      rule = reason;
    }
    super(rejectionMessage(entry, kind, by, reason, rule));
    this.kind = kind;
    this.by = by;
    this.reason = reason;
    this.rule = rule;
  }
}

function rejectionMessage(e: Entry, kind: Rejection, by: string, reason: string, rule: string): string {
  const head = `tool call ${e.pendingId} (${e.toolName}) `;
  switch (kind) {
    case "rejected":
      return head + `rejected by ${by}` + (reason ? `: ${reason}` : "");
    case "timed_out": {
      let m = head + "timed out: nobody decided";
      if (e.approvalTimeoutAt) {
        m += " by " + new Date(e.approvalTimeoutAt).toISOString().replace(/\.\d+Z$/, "Z");
      }
      const again = reason.indexOf("; ");
      return again >= 0 ? m + reason.slice(again) : m;
    }
    case "cancelled":
      return head + "cancelled" + (by ? ` by ${by}` : "") + (reason ? `: ${reason}` : "");
    case "denied":
      return head + `denied by policy: ${rule}`;
  }
}

/**
 * A rejection that also asks the agent to stop its turn (a human's
 * reject --interrupt): stop, and hand back to the user, rather than go on
 * to other calls. It is a RejectedError too.
 */
export class InterruptedError extends RejectedError {
  override name = "InterruptedError";
  constructor(entry: Entry) {
    super(entry);
    this.message += "; stop this turn and hand back to the user";
  }
}

/** The RejectedError (an InterruptedError when it stops the turn) of an entry in a refusing state, or undefined for any other. */
export function refusal(e: Entry): RejectedError | undefined {
  if (!rejections[e.status]) {
    return undefined;
  }
  return e.interrupt ? new InterruptedError(e) : new RejectedError(e);
}

/** A call that ran and failed. It is not a rejection: the call was allowed, and the tool's own error is in message. */
export class ExecutionError extends Error {
  override name = "ExecutionError";
  /** The tool's error, as reported. */
  readonly toolError: string;
  readonly cost: number;
  constructor(readonly entry: Entry) {
    const msg = entry.error || "no error message reported";
    super(`tool call ${entry.pendingId} (${entry.toolName}) failed: ${msg}`);
    this.toolError = entry.error ?? "";
    this.cost = entry.cost ?? 0;
  }
}
