// The Mastra adapter (@toolgate/client/mastra): requireToolApproval for
// the tools toolgate gates, each suspended call answered from toolgate
// under the call's own id (the policy's allow or deny at once, a person's
// decision when toolgate asks one), and tools that run only what
// toolgate's entry allows, with toolgate's arguments, so that an
// approver's edit is what runs although Mastra's approvals carry no
// edits.

import { createTool } from "@mastra/core/tools";

import { ask, decision, pendingIdOf, runApproved, type AdapterOptions, type Decision } from "./adapter.js";
import type { Client } from "./client.js";
import { NotFoundError } from "./errors.js";

export { ApprovalRefusedError, type ApprovalRefusal } from "./adapter.js";

/** How the agent's calls reach toolgate. */
export type ToolgateMastraOptions = AdapterOptions;

/** What a suspended generate returns that resolving it reads. */
export interface Suspended {
  finishReason?: string;
  runId?: string;
  suspendPayload?: { toolCallId?: string; toolName?: string; args?: unknown };
}

/** The agent this adapter runs: a Mastra Agent. */
interface MastraAgent<R extends Suspended> {
  generate(messages: any, options?: any): Promise<R>;
  approveToolCallGenerate(options: { runId: string; toolCallId?: string } & Record<string, unknown>): Promise<R>;
  declineToolCallGenerate(options: { runId: string; toolCallId?: string; reason?: string } & Record<string, unknown>): Promise<R>;
}

/** A suspended run as Mastra's listSuspendedRuns lists it. */
interface SuspendedRun {
  runId: string;
  toolCalls: { toolCallId?: string; toolName?: string; args?: unknown; requiresApproval: boolean }[];
}

/**
 * Toolgate for a Mastra agent: make its gated tools with tool(...), give
 * generate requireToolApproval, and run it with generate(...), which
 * answers each suspended call from toolgate; or call resolve(agent,
 * output) on a suspended output yourself.
 */
export class ToolgateMastra {
  private readonly c: Client;
  private readonly gated = new Set<string>();

  constructor(private readonly opts: ToolgateMastraOptions) {
    this.c = opts.client;
  }

  /** The pendingId toolgate gives Mastra's tool call toolCallId. */
  pendingIdOf(toolCallId: string): string {
    return pendingIdOf(this.opts, toolCallId);
  }

  /**
   * Mastra's requireToolApproval: every call of a tool made with tool()
   * suspends for approval, which toolgate gives (resolve). Mastra's
   * approval check is not told the call's id, so toolgate is asked when
   * the run suspends, under that id.
   */
  readonly requireToolApproval = ({ toolName }: { toolName: string }): boolean => this.gated.has(toolName);

  /**
   * Mastra's createTool(options), gated: its calls need approval
   * (requireToolApproval), and execute runs only what toolgate's entry
   * for the call allows: Mastra's arguments must be those toolgate holds,
   * the call approved or allowed in toolgate and not yet run; then it is
   * claimed (so it runs once), execute runs with toolgate's arguments (an
   * approver's edit, which toolgate's edit rules checked), and its outcome
   * is recorded. Anything else throws an ApprovalRefusedError (or the
   * RejectedError of a refused call), which Mastra reports to the model
   * as the tool's error.
   */
  tool<O extends Parameters<typeof createTool>[0]>(options: O): ReturnType<typeof createTool> {
    const o = options as unknown as { id: string; execute?: (input: unknown, context: { agent?: { toolCallId?: string }; abortSignal?: AbortSignal }) => unknown };
    const execute = o.execute;
    if (!execute) {
      throw new Error(`tool ${o.id}: execute is required, to run it only as toolgate allows`);
    }
    this.gated.add(o.id);
    return createTool({
      ...(options as object),
      execute: async (input: unknown, context: { agent?: { toolCallId?: string }; abortSignal?: AbortSignal }) =>
        runApproved(this.c, this.pendingIdOf(context?.agent?.toolCallId ?? ""), input, (args) => execute(args, context), context?.abortSignal),
    } as never) as ReturnType<typeof createTool>;
  }

  /**
   * Answers the call a suspended output waits for from toolgate: the call
   * is submitted under Mastra's toolCallId (so toolgate show, toolgate
   * pending and the inbox see it), and a call the policy lets run is
   * approved at once, one it denies declined naming the rule, and one it
   * asks about waits in toolgate for a person: approved, or declined with
   * who refused and why, the reason the model sees. It returns the
   * resumed run's output (which may be suspended again). It throws the
   * signal's abort; the call stays pending in toolgate.
   */
  async resolve<R extends Suspended>(agent: MastraAgent<R>, output: Suspended, opts: { signal?: AbortSignal; options?: Record<string, unknown> } = {}): Promise<R> {
    const p = output.suspendPayload;
    const runId = output.runId ?? "";
    const toolCallId = p?.toolCallId ?? "";
    let d: Decision;
    if (!toolCallId || !p?.toolName) {
      d = { approved: false, reason: "toolgate cannot ask about this call: Mastra's suspended run names no tool call" };
    } else {
      const v = await ask(this.opts, toolCallId, p.toolName, p.args);
      d = v.kind === "deny" ? { approved: false, reason: v.reason } : await decision(this.c, this.pendingIdOf(toolCallId), opts.signal);
    }
    const resume = { ...opts.options, runId, toolCallId, requireToolApproval: this.requireToolApproval, ...(opts.signal ? { abortSignal: opts.signal } : {}) };
    return d.approved ? agent.approveToolCallGenerate(resume) : agent.declineToolCallGenerate({ ...resume, reason: d.reason });
  }

  /**
   * Resolves the runs of agent that Mastra's storage holds suspended for
   * the approval of a call toolgate has in this conversation, as
   * generate does, and returns their outputs: what a process that
   * restarted (with a durable store) calls to finish the runs it left.
   * A suspended run whose call toolgate has no entry for in this
   * conversation is left alone. threadId narrows the runs to one memory
   * thread.
   */
  async resumeSuspended<R extends Suspended>(
    agent: MastraAgent<R> & { listSuspendedRuns(o?: { threadId?: string }): Promise<{ runs: SuspendedRun[] }> },
    opts: { signal?: AbortSignal; options?: Record<string, unknown>; threadId?: string } = {},
  ): Promise<R[]> {
    const { runs } = await agent.listSuspendedRuns(opts.threadId ? { threadId: opts.threadId } : {});
    const outs: R[] = [];
    for (const run of runs) {
      const call = run.toolCalls.find((c) => c.requiresApproval && c.toolCallId);
      if (!call?.toolCallId) continue;
      try {
        await this.c.get(this.pendingIdOf(call.toolCallId), opts.signal ? { signal: opts.signal } : {});
      } catch (err) {
        if (err instanceof NotFoundError) continue; // not this conversation's, or never asked
        throw err;
      }
      let out = await this.resolve(agent, { runId: run.runId, suspendPayload: call }, opts);
      while (out.finishReason === "suspended") {
        out = await this.resolve(agent, out, opts);
      }
      outs.push(out);
    }
    return outs;
  }

  /**
   * Runs agent.generate(messages) with requireToolApproval, answering
   * each suspended call from toolgate (resolve) until the run ends.
   * options are generate's (memory, maxSteps ...).
   */
  async generate<R extends Suspended>(agent: MastraAgent<R>, messages: unknown, opts: { signal?: AbortSignal; options?: Record<string, unknown> } = {}): Promise<R> {
    let out = await agent.generate(messages, { ...opts.options, requireToolApproval: this.requireToolApproval, ...(opts.signal ? { abortSignal: opts.signal } : {}) });
    while (out.finishReason === "suspended") {
      out = await this.resolve(agent, out, opts);
    }
    return out;
  }
}

/** Toolgate for a Mastra agent (see ToolgateMastra). */
export function toolgate(opts: ToolgateMastraOptions): ToolgateMastra {
  return new ToolgateMastra(opts);
}
