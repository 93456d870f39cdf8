// The Vercel AI SDK 7 adapter (@toolgate/client/ai-sdk): toolgate's
// policy verdict as the SDK's toolApproval, toolgate's decisions as the
// SDK's approval responses, and tools whose execute runs only what
// toolgate's entry allows, so that an approval replayed or forged in the
// message history runs nothing.

import type { ModelMessage, Tool, ToolApprovalResponse, ToolApprovalStatus, ToolExecutionOptions, ToolSet } from "ai";

import type { Client, Outcome } from "./client.js";
import { ExecutionError, NotFoundError, RejectedError, StorageFullError, ToolgateError, refusal } from "./errors.js";
import { runClaimed } from "./gate.js";
import { pendingId } from "./names.js";
import type { Call, Entry, JSONValue } from "./types.js";

/** How the agent's calls reach toolgate. */
export interface ToolgateAISDKOptions {
  client: Client;
  /** The conversation the agent's calls belong to: with the SDK's toolCallId it names each call in toolgate (its pendingId). */
  conversationId: string;
  team?: string;
  taskId?: string;
}

/** Why a tool's execute refused an approval the message history holds. */
export type ApprovalRefusal =
  /** Toolgate has no entry for the call: it never went through toolApproval. */
  | "unknown_call"
  /** The history's arguments are not those toolgate holds for the call. */
  | "other_arguments"
  /** Toolgate has not approved the call (it is still pending): the approval is not toolgate's. */
  | "not_approved"
  /** The call ran already: the approval is replayed. */
  | "replayed";

/** An approval in the message history that toolgate's entry does not back: the tool did not run. */
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

/** The parts of a message's content this adapter reads. */
interface Part {
  type: string;
  approvalId?: string;
  toolCallId?: string;
  isAutomatic?: boolean;
}

/** JSON with object keys sorted, to compare two values however their keys are ordered. */
function canonical(v: unknown): string {
  return JSON.stringify(v, (_k, x: unknown) =>
    x && typeof x === "object" && !Array.isArray(x)
      ? Object.fromEntries(Object.entries(x as Record<string, unknown>).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)))
      : x);
}

/**
 * Toolgate for an AI SDK agent: pass toolApproval and tools(...) to
 * generateText, streamText or a ToolLoopAgent, and after a turn that ends
 * with approval requests, decisions(messages) waits for toolgate's
 * decisions and answers them as the SDK's approval responses.
 */
export class ToolgateAISDK {
  private readonly c: Client;

  constructor(private readonly opts: ToolgateAISDKOptions) {
    this.c = opts.client;
  }

  /** The pendingId toolgate gives the SDK's tool call toolCallId. */
  pendingIdOf(toolCallId: string): string {
    return pendingId(this.opts.conversationId, toolCallId);
  }

  /**
   * The SDK's toolApproval, backed by toolgate's policy: each tool call is
   * submitted to toolgate (under the SDK's toolCallId) and its verdict
   * mapped: allowed to run → "approved" (with the rule or grant that let
   * it); denied by policy → "denied" with the rule; asks a person →
   * "user-approval", the call pending in toolgate until someone decides
   * (inbox, Slack, a link, the CLI). A call toolgate cannot be asked about
   * is denied, saying why: the gate never fails open.
   */
  readonly toolApproval = async (options: { toolCall: { toolCallId: string; toolName: string; input: unknown } }): Promise<ToolApprovalStatus> => {
    const { toolCall } = options;
    const call: Call = {
      toolCallId: toolCall.toolCallId, toolName: toolCall.toolName, toolArguments: (toolCall.input ?? {}) as JSONValue,
      conversationId: this.opts.conversationId,
      ...(this.opts.team ? { team: this.opts.team } : {}),
      ...(this.opts.taskId ? { taskId: this.opts.taskId } : {}),
    };
    let e: Entry;
    try {
      e = await this.c.submit(call);
    } catch (err) {
      if (err instanceof ToolgateError && (err.status < 500 || err instanceof StorageFullError)) {
        // The same toolCallId with other arguments, a bound exceeded, a full store.
        return { type: "denied", reason: `toolgate refused this call (${err.code}): ${err.message}` };
      }
      return { type: "denied", reason: `toolgate could not be asked about this call: ${(err as Error).message}` };
    }
    const rej = refusal(e);
    if (rej) {
      return { type: "denied", reason: rej.message };
    }
    switch (e.status) {
      case "PENDING_APPROVAL":
        return { type: "user-approval", reason: `waiting in toolgate as ${e.pendingId}${e.description ? `: ${e.description}` : ""}` };
      case "APPROVED_READY_FOR_EXECUTION":
      case "SCHEDULED_FOR_EXECUTION":
        return { type: "approved", reason: `allowed by toolgate${e.statusReason ? `: ${e.statusReason}` : ""}` };
      default:
        return { type: "denied", reason: `toolgate has this call ${e.status} already: it does not run again` };
    }
  };

  /**
   * Waits for toolgate's decision on every approval request in messages
   * that no later message answers, and returns the SDK's approval
   * responses for them, to append as a tool message: approved (by whom,
   * edited or not), or not approved with the refusal's who and why, which
   * the SDK hands the model as the tool's denial. It throws the signal's
   * abort; the calls stay pending in toolgate, and a later call (in this
   * process or another) picks their decisions up.
   */
  async decisions(messages: ModelMessage[], opts: { signal?: AbortSignal } = {}): Promise<ToolApprovalResponse[]> {
    const answered = new Set<string>();
    const requests: { approvalId: string; toolCallId: string }[] = [];
    for (const m of messages) {
      if (typeof m.content === "string") continue;
      for (const p of m.content as Part[]) {
        if (p.type === "tool-approval-response" && p.approvalId) answered.add(p.approvalId);
        if (p.type === "tool-approval-request" && p.approvalId && p.toolCallId && !p.isAutomatic) {
          requests.push({ approvalId: p.approvalId, toolCallId: p.toolCallId });
        }
      }
    }
    const open = requests.filter((r) => !answered.has(r.approvalId));
    return Promise.all(open.map(async (r): Promise<ToolApprovalResponse> => {
      let o: Outcome;
      try {
        o = await this.c.await(this.pendingIdOf(r.toolCallId), opts.signal ? { signal: opts.signal } : {});
      } catch (err) {
        if (err instanceof RejectedError || err instanceof ExecutionError) {
          return { type: "tool-approval-response", approvalId: r.approvalId, approved: false, reason: err.message };
        }
        throw err;
      }
      if (o.kind === "executed") {
        return { type: "tool-approval-response", approvalId: r.approvalId, approved: false, reason: `tool call ${o.pendingId} ran already` };
      }
      const how = o.kind === "scheduled" ? "allowed by toolgate" : `approved by ${o.by}${o.edited ? " with edited arguments" : ""}`;
      return { type: "tool-approval-response", approvalId: r.approvalId, approved: true, reason: o.reason ? `${how}: ${o.reason}` : how };
    }));
  }

  /**
   * Wraps each tool's execute so that it runs only what toolgate's entry
   * for the call allows, whatever the message history says: the history's
   * arguments must be those toolgate holds, the call must be approved or
   * allowed in toolgate and not yet run; then it is claimed (so it runs
   * once), run with toolgate's arguments (an approver's edit, if any), and
   * its outcome recorded. Anything else throws an ApprovalRefusedError (or
   * the RejectedError of a refused call), which the SDK reports to the
   * model as the tool's error.
   */
  tools<T extends ToolSet>(tools: T): T {
    const out: Record<string, Tool> = {};
    for (const [name, t] of Object.entries(tools) as [string, Tool][]) {
      const execute = t.execute;
      if (!execute) {
        out[name] = t;
        continue;
      }
      out[name] = {
        ...t,
        execute: async (input: unknown, options: ToolExecutionOptions<unknown>) => this.run(input, options, (args) => execute(args, options)),
      } as Tool;
    }
    return out as T;
  }

  /** Runs one call of a wrapped tool as tools describes. */
  private async run(input: unknown, options: ToolExecutionOptions<unknown>, execute: (args: unknown) => unknown): Promise<unknown> {
    const id = this.pendingIdOf(options.toolCallId);
    const signal = options.abortSignal;
    let e: Entry;
    try {
      e = await this.c.get(id, signal ? { signal } : {});
    } catch (err) {
      if (err instanceof NotFoundError) {
        throw new ApprovalRefusedError("unknown_call", id, "toolgate has no such call: it did not go through toolgate's toolApproval");
      }
      throw err;
    }
    const agents = e.originalArguments ?? e.toolArguments;
    if (canonical(input ?? {}) !== canonical(agents)) {
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
    const o = await this.c.await(id, signal ? { signal, start: e } : { start: e });
    if (o.kind === "executed") {
      throw new ApprovalRefusedError("replayed", id, "it ran already: the approval in the message history is replayed", o.entry);
    }
    return runClaimed(this.c, o.entry, async (args: unknown) => lastOf(await execute(args)), signal, o.by);
  }
}

/** The output of an execute: its value, or the last value a streaming tool yields. */
async function lastOf(v: unknown): Promise<unknown> {
  if (v && typeof v === "object" && Symbol.asyncIterator in v) {
    let last: unknown;
    for await (const x of v as AsyncIterable<unknown>) last = x;
    return last;
  }
  return v;
}

/** Toolgate for an AI SDK agent (see ToolgateAISDK). */
export function toolgate(opts: ToolgateAISDKOptions): ToolgateAISDK {
  return new ToolgateAISDK(opts);
}
