// The contract's types: what toolgate's request API and events carry, as
// wire/event.schema.json and the HTTP API's OpenAPI document describe
// them. Times are epoch milliseconds. test/contract.test.ts holds every
// field list below to both documents, so a field added, removed or made
// optional on one side fails a test.

/** A JSON value: tool arguments and results are any JSON. */
export type JSONValue = null | boolean | number | string | JSONValue[] | { [key: string]: JSONValue };

/** The states of a call (machine.State). */
export const states = [
  "PENDING_APPROVAL",
  "SCHEDULED_FOR_EXECUTION",
  "APPROVED_READY_FOR_EXECUTION",
  "REJECTED_BY_USER",
  "REJECTED_BY_TIMEOUT",
  "REJECTED_BY_POLICY",
  "EXECUTING",
  "COMPLETED_SUCCESS",
  "COMPLETED_FAILURE",
  "CANCELLED_BY_SYSTEM",
] as const;

/** A state of a call. */
export type State = (typeof states)[number];

/** How far an approval reaches. */
export type Scope = "once" | "task" | "session" | "always";

/** What decided a call (machine.Decider), on a transition that decides it. */
export type Decider = "rule" | "grant" | "policy" | "human" | "quorum" | "timeout" | "classifier" | "channel" | "reviewer";

/** Who a person is at the OpenID provider that signed them in (docs/approvers.md). */
export interface Identity {
  iss: string;
  sub: string;
  name?: string;
  email?: string;
}

/** One move of an entry: the event, where from, who made it and why. */
export interface Transition {
  event: string;
  from?: State;
  to: State;
  actor?: string;
  reason?: string;
  /** On a decision: what decided (a rule, a grant, a human, a timeout…). */
  decidedBy?: Decider;
  at: number;
  /** Set on an approval that edited the call's arguments. */
  edit?: Edit;
  /** Set on a rejection that asks the agent to stop its turn. */
  interrupt?: boolean;
  write?: string;
  /** Who the actor is at the OpenID provider that signed them in, on a decision or vote made signed in so. */
  identity?: Identity;
  /** The group of the call's approvers (group:NAME) that let the actor decide or vote, when no entry named them. */
  viaGroup?: string;
}

/** What an approver changed of a call's arguments. */
export interface Edit {
  /** argumentsDigest before the edit. */
  from: string;
  /** argumentsDigest after the edit. */
  to: string;
  /** The top-level arguments that differ, sorted. */
  changed: string[];
}

/** An executor's claim on a running call. */
export interface Lease {
  holder: string;
  expiresAt: number;
}

/** How many distinct approvals a call needs (policy quorum). */
export interface Quorum {
  required: number;
  of?: string[];
  rejectWhen?: "any" | "majority";
}

/** One approver's say on a call under a quorum. */
export interface Vote {
  by: string;
  approve: boolean;
  at: number;
  reason?: string;
  /** The group that let the approver vote, when no name of the call's approvers did. */
  viaGroup?: string;
}

/** What an automated reviewer said of a call it left to humans: an escalation, or an approval refused as beyond its reach. */
export interface Review {
  /** reviewer:<name> */
  by: string;
  /** escalate, or approve when refused */
  answer: string;
  /** approve or reject: what it would have decided, when it says */
  lean?: string;
  reason?: string;
  /** why its approval was refused */
  refused?: string;
  at: number;
}

/** An escalation tier: at its time, if nobody decided, its users may decide too. */
export interface Escalation {
  at: number;
  to: string[];
}

/** A signed record of one transition (docs/receipts.md). */
export interface Receipt {
  vote?: boolean;
  seq: number;
  pendingId: string;
  toolName: string;
  caller: string;
  event: string;
  from?: State;
  to: State;
  actor: string;
  at: number;
  reason?: string;
  decidedBy?: Decider;
  scope?: Scope;
  argumentsDigest: string;
  resultDigest?: string;
  prev?: string;
  key: string;
  sig?: string;
  identity?: Identity;
  viaGroup?: string;
}

/** One tool call and everything that has happened to it. */
export interface Entry {
  pendingId: string;
  toolCallId: string;
  toolName: string;
  /** The arguments that run: an approver's edit when there was one. */
  toolArguments: JSONValue;
  /** The agent's arguments, when an approver edited them. */
  originalArguments?: JSONValue;
  /** Set when the arguments are shown with secrets masked as "[redacted]" (a person's view; an executor and the agent that asked get them as they are). */
  secretsMasked?: boolean;
  argumentsDigest?: string;
  risk?: "high" | "medium" | "low";
  policyRevision?: number;
  callerBotId: string;
  conversationId: string;
  requestedAt: number;
  status: State;
  statusReason?: string;
  executionAttempts: number;
  lastAttemptTime?: number;
  scheduledExecutionTime?: number;
  approvalTimeoutAt?: number;
  reminderAt?: number;
  reminded?: boolean;
  overdue?: boolean;
  autoRejectOnTimeout?: boolean;
  userIdToApprove?: string;
  approvers?: string[];
  quorum?: Quorum;
  votes?: Vote[];
  escalations?: Escalation[];
  escalated?: number;
  approvedOrRejectedByUserId?: string;
  /** Who approvedOrRejectedByUserId is at the OpenID provider that signed them in, when they decided signed in so. */
  deciderIdentity?: Identity;
  /** The group of the call's approvers (group:NAME) that let approvedOrRejectedByUserId decide, when no entry named them. */
  deciderViaGroup?: string;
  decisionTime?: number;
  /** What made the call's latest decision: the policy at submit, then an approval, rejection or timeout. */
  decidedBy?: Decider;
  decisionScope?: Scope;
  result?: JSONValue;
  error?: string;
  cost?: number;
  team?: string;
  taskId?: string;
  estimatedCost?: number;
  /** The ISO 4217 code the call's costs are counted in (policy currency). */
  currency?: string;
  /** Its estimated cost is above the policy's requireApprovalAboveCost. */
  overCostLimit?: boolean;
  permissionMode?: string;
  description?: string;
  maxExecutionAttempts?: number;
  /** The policy declares the call's tool safe to run twice: only then is a call whose executor was lost run again by another executor. */
  idempotent?: boolean;
  /** It ended COMPLETED_FAILURE because its executor was lost while the tool may have run: whether it ran is not known; a person may run it again (rerun). */
  outcomeUnknown?: boolean;
  /** The call whose outcome was unknown that a person had run again as this one. */
  rerunOf?: string;
  costReserved?: number;
  costDay?: string;
  lease?: Lease;
  receipts?: Receipt[];
  lastTransition?: Transition;
  priorTransition?: Transition;
  /** What the timer does at the deadline when it does not reject the call (policy onTimeout). */
  onTimeout?: "cancel" | "approve";
  /** An approver may answer the call with the tool's result instead of running it (policy respondable). */
  respondable?: boolean;
  /** No approver may edit the call's arguments (policy editable: false). */
  notEditable?: boolean;
  /** The approver who answered the call with its result: result is theirs, not the tool's. */
  respondedBy?: string;
  /** The call's rejection asked its agent to stop its turn. */
  interrupt?: boolean;
  /** What automated reviewers said of the call that left it to humans. */
  reviews?: Review[];
}

/** The envelope published for every transition (wire.Event). */
export interface Event {
  v: number;
  id: string;
  type: string;
  event: string;
  from?: State;
  to: State;
  actor?: string;
  reason?: string;
  decidedBy?: Decider;
  /** Set on a rejection that asks the agent to stop its turn. */
  interrupt?: boolean;
  at: number;
  revision: number;
  receipt?: Receipt;
  entry: Entry;
}

/** What an agent asks to run (machine.Call). */
export interface Call {
  /** The agent's id for the call; toolgate makes one when it is empty. Submitting the same one in the same conversation again returns the entry already there. */
  toolCallId?: string;
  toolName: string;
  /** A JSON object; {} when absent. */
  toolArguments?: JSONValue;
  /** Ignored for an agent's credential: the caller is the credential's name. */
  callerBotId?: string;
  conversationId: string;
  team?: string;
  taskId?: string;
  estimatedCost?: number;
  permissionMode?: string;
}

/** Filters of list; every field is optional. */
export interface ListRequest {
  conversationId?: string;
  toolName?: string;
  callerBotId?: string;
  status?: State;
  limit?: number;
  cursor?: string;
}

/** A human's answer to a pending call. */
export interface Decision {
  approve: boolean;
  /** Who decides: toolgate records the credential's name, with this under it. */
  by?: string;
  reason?: string;
  scope?: Scope;
  /** On an approval: the arguments to run instead of the agent's. */
  arguments?: JSONValue;
  /** Bounds the grant a session or always approval records, in ms. */
  forMs?: number;
  persistRule?: boolean;
  singleUse?: boolean;
  /** Narrows the grant a task, session or always approval records to the later calls whose argument this covers ("*@acme-corp.com" for send_email's to). */
  grantMatch?: string;
  /** Answers a respondable call with the tool's result instead (approve false): it ends COMPLETED_SUCCESS and never runs. */
  result?: JSONValue;
  /** On a rejection: asks the agent to stop its turn, not only this call. */
  interrupt?: boolean;
}

/** What a conversation's cancel did. */
export interface CancelConversationReply {
  cancelled: Entry[];
  /** Running calls cannot be cancelled; their executors see the cancel and stop them. */
  running: Entry[];
}

/** One claimed call of a work request (wire.WorkClaim). */
export interface WorkClaim {
  entry: Entry;
  runnableSince: number;
  again?: boolean;
}

// The field lists the contract test compares with the schemas. Each is
// checked by the compiler to name every field of its type (fieldsOf) or
// every field the type requires (requiredOf), and no other.

type RequiredKeys<T> = { [K in keyof T]-?: object extends Pick<T, K> ? never : K }[keyof T];

/** Every field of Entry. */
export const entryFields = Object.keys({
  pendingId: 1, toolCallId: 1, toolName: 1, toolArguments: 1, originalArguments: 1, secretsMasked: 1, argumentsDigest: 1, risk: 1,
  policyRevision: 1, callerBotId: 1, conversationId: 1, requestedAt: 1, status: 1, statusReason: 1,
  executionAttempts: 1, lastAttemptTime: 1, scheduledExecutionTime: 1, approvalTimeoutAt: 1, reminderAt: 1,
  reminded: 1, overdue: 1, autoRejectOnTimeout: 1, userIdToApprove: 1, approvers: 1, quorum: 1, votes: 1,
  escalations: 1, escalated: 1, approvedOrRejectedByUserId: 1, deciderIdentity: 1, deciderViaGroup: 1, decisionTime: 1, decidedBy: 1, decisionScope: 1, result: 1,
  error: 1, cost: 1, team: 1, taskId: 1, estimatedCost: 1, currency: 1, overCostLimit: 1, permissionMode: 1, description: 1,
  maxExecutionAttempts: 1, idempotent: 1, outcomeUnknown: 1, rerunOf: 1, costReserved: 1, costDay: 1, lease: 1, receipts: 1, lastTransition: 1, priorTransition: 1,
  onTimeout: 1, respondable: 1, notEditable: 1, respondedBy: 1, interrupt: 1,
  reviews: 1,
} satisfies Record<keyof Entry, 1>);

/** The fields every Entry has. */
export const entryRequired = Object.keys({
  pendingId: 1, toolCallId: 1, toolName: 1, toolArguments: 1, callerBotId: 1, conversationId: 1, requestedAt: 1,
  status: 1, executionAttempts: 1,
} satisfies Record<RequiredKeys<Entry>, 1>);

/** Every field of Event. */
export const eventFields = Object.keys({
  v: 1, id: 1, type: 1, event: 1, from: 1, to: 1, actor: 1, reason: 1, decidedBy: 1, interrupt: 1, at: 1, revision: 1, receipt: 1, entry: 1,
} satisfies Record<keyof Event, 1>);

/** The fields every Event has. */
export const eventRequired = Object.keys({
  v: 1, id: 1, type: 1, event: 1, to: 1, at: 1, revision: 1, entry: 1,
} satisfies Record<RequiredKeys<Event>, 1>);

/** Every field of Transition. */
export const transitionFields = Object.keys({
  event: 1, from: 1, to: 1, actor: 1, reason: 1, decidedBy: 1, at: 1, edit: 1, interrupt: 1, write: 1, identity: 1, viaGroup: 1,
} satisfies Record<keyof Transition, 1>);

/** The fields every Transition has. */
export const transitionRequired = Object.keys({ event: 1, to: 1, at: 1 } satisfies Record<RequiredKeys<Transition>, 1>);

/** Every field of Receipt. */
export const receiptFields = Object.keys({
  vote: 1, seq: 1, pendingId: 1, toolName: 1, caller: 1, event: 1, from: 1, to: 1, actor: 1, at: 1, reason: 1,
  decidedBy: 1, scope: 1, argumentsDigest: 1, resultDigest: 1, prev: 1, key: 1, sig: 1, identity: 1, viaGroup: 1,
} satisfies Record<keyof Receipt, 1>);

/** The fields every Receipt has. */
export const receiptRequired = Object.keys({
  seq: 1, pendingId: 1, toolName: 1, caller: 1, event: 1, to: 1, actor: 1, at: 1, argumentsDigest: 1, key: 1,
} satisfies Record<RequiredKeys<Receipt>, 1>);

/** Every field of Call. */
export const callFields = Object.keys({
  toolCallId: 1, toolName: 1, toolArguments: 1, callerBotId: 1, conversationId: 1, team: 1, taskId: 1,
  estimatedCost: 1, permissionMode: 1,
} satisfies Record<keyof Call, 1>);

/** The fields every Call has. */
export const callRequired = Object.keys({ toolName: 1, conversationId: 1 } satisfies Record<RequiredKeys<Call>, 1>);
