// The Vercel AI SDK 7 adapter (@toolgate/client/ai-sdk): toolgate's
// policy verdict as the SDK's toolApproval, toolgate's decisions as the
// SDK's approval responses, and tools whose execute runs only what
// toolgate's entry allows, so that an approval replayed or forged in the
// message history runs nothing.

import type { ModelMessage, Tool, ToolApprovalResponse, ToolApprovalStatus, ToolExecutionOptions, ToolSet } from "ai";

import type { Client } from "./client.js";
import { ask, decision, pendingIdOf, runApproved, type AdapterOptions } from "./adapter.js";

export { ApprovalRefusedError, type ApprovalRefusal } from "./adapter.js";

/** How the agent's calls reach toolgate. */
export type ToolgateAISDKOptions = AdapterOptions;

/** The parts of a message's content this adapter reads. */
interface Part {
  type: string;
  approvalId?: string;
  toolCallId?: string;
  isAutomatic?: boolean;
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
    return pendingIdOf(this.opts, toolCallId);
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
    const v = await ask(this.opts, toolCall.toolCallId, toolCall.toolName, toolCall.input);
    switch (v.kind) {
      case "run":
        return { type: "approved", reason: v.reason };
      case "ask":
        return { type: "user-approval", reason: v.reason };
      default:
        return { type: "denied", reason: v.reason };
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
      const d = await decision(this.c, this.pendingIdOf(r.toolCallId), opts.signal);
      return { type: "tool-approval-response", approvalId: r.approvalId, approved: d.approved, reason: d.reason };
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
  private run(input: unknown, options: ToolExecutionOptions<unknown>, execute: (args: unknown) => unknown): Promise<unknown> {
    return runApproved(this.c, this.pendingIdOf(options.toolCallId), input, async (args) => lastOf(await execute(args)), options.abortSignal);
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
