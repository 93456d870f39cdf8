// The OpenAI Agents JS adapter (@toolgate/client/openai-agents): tools whose
// needsApproval is toolgate's policy verdict, a run's interruptions
// resolved from toolgate's decisions (approve, or reject with the
// approver's reason), and tools that run only what toolgate's entry
// allows, with toolgate's arguments, so that an approver's edit is what
// runs although the SDK's own approvals carry no edits.

import { Runner, tool, type Agent, type FunctionTool, type RunResult, type RunState, type RunToolApprovalItem, type ToolOptions } from "@openai/agents";

import { ask, decision, pendingIdOf, runApproved, type AdapterOptions } from "./adapter.js";
import type { Client } from "./client.js";
import { NotFoundError } from "./errors.js";

export { ApprovalRefusedError, type ApprovalRefusal } from "./adapter.js";

/** How the agent's calls reach toolgate. */
export type ToolgateOpenAIAgentsOptions = AdapterOptions;

/** What a run of run() may be given. */
export interface RunOptions {
  /** The runner to run the agent with (its model provider, tracing); default: a new Runner(). */
  runner?: Runner;
  /** Ends the run and the wait for decisions; the calls stay pending in toolgate. */
  signal?: AbortSignal;
  /**
   * Called with the run's state each time the run stops for approvals,
   * before it waits for toolgate's decisions: store state.toString() to
   * resume the run in another process (RunState.fromString) if this one
   * stops while it waits.
   */
  onInterruption?: (state: RunState<any, any>) => Promise<void> | void;
}

/**
 * Toolgate for an OpenAI Agents JS agent: make its tools with tool(...),
 * and run it with run(...), which waits for toolgate's decisions each time
 * the run stops for approvals and resumes it; or run it yourself and call
 * resolve(state) on a result with interruptions.
 */
export class ToolgateOpenAIAgents {
  private readonly c: Client;

  constructor(private readonly opts: ToolgateOpenAIAgentsOptions) {
    this.c = opts.client;
  }

  /** The pendingId toolgate gives the SDK's tool call callId. */
  pendingIdOf(callId: string): string {
    return pendingIdOf(this.opts, callId);
  }

  /**
   * The SDK's needsApproval for the tool toolName, backed by toolgate's
   * policy: each call is submitted to toolgate (under the SDK's callId)
   * and needs no approval only when toolgate lets it run now; a call that
   * waits for a person, or that toolgate denies or cannot be asked about,
   * needs approval, and resolve answers it from toolgate. The SDK asks
   * again when a run resumes, which reads the call's state in toolgate.
   */
  needsApproval(toolName: string): (runContext: unknown, input: unknown, callId?: string) => Promise<boolean> {
    return async (_runContext: unknown, input: unknown, callId?: string) => {
      if (!callId) {
        return true; // no id to name the call in toolgate: resolve refuses it
      }
      const v = await ask(this.opts, callId, toolName, input);
      return v.kind !== "run";
    };
  }

  /**
   * The SDK's tool(options), gated: needsApproval is toolgate's verdict
   * (needsApproval), and execute runs only what toolgate's entry for the
   * call allows: the SDK's arguments must be those toolgate holds, the
   * call approved or allowed in toolgate and not yet run; then it is
   * claimed (so it runs once, also when a run is resumed twice), execute
   * runs with toolgate's arguments (an approver's edit, which toolgate's
   * edit rules checked), and its outcome is recorded. Anything else throws
   * an ApprovalRefusedError (or the RejectedError of a refused call),
   * which the SDK reports to the model as the tool's error.
   */
  tool<P extends Parameters<typeof tool>[0]>(options: P & { name: string }): FunctionTool<any, any, any> {
    const o = options as unknown as ToolOptions<any, any> & { name: string; execute: (input: unknown, context?: unknown, details?: { toolCall?: { callId: string }; signal?: AbortSignal }) => unknown };
    const execute = o.execute;
    return tool({
      ...o,
      needsApproval: this.needsApproval(o.name),
      execute: async (input: unknown, context?: unknown, details?: { toolCall?: { callId: string }; signal?: AbortSignal }) => {
        const callId = details?.toolCall?.callId ?? "";
        return runApproved(this.c, this.pendingIdOf(callId), input, (args) => execute(args, context, details), details?.signal);
      },
    } as ToolOptions<any, any>);
  }

  /**
   * Waits for toolgate's decision on each of state's interruptions and
   * hands it to the SDK: approved → state.approve; rejected, denied, timed
   * out or cancelled → state.reject with who refused and why, the message
   * the model sees. An interruption toolgate has no call for is rejected,
   * saying so. It throws the signal's abort; the calls stay pending in
   * toolgate, and a later resolve (in this process or another, from the
   * serialized state) picks their decisions up.
   */
  async resolve(state: RunState<any, any>, opts: { signal?: AbortSignal } = {}): Promise<void> {
    const items = state.getInterruptions();
    const decided = await Promise.all(items.map(async (item: RunToolApprovalItem) => {
      const callId = (item.rawItem as { callId?: string }).callId;
      if (!callId) {
        return { item, approved: false, reason: `toolgate has no call for this ${item.rawItem.type}: it gates function tools only` };
      }
      try {
        return { item, ...(await decision(this.c, this.pendingIdOf(callId), opts.signal)) };
      } catch (err) {
        if (err instanceof NotFoundError) {
          return { item, approved: false, reason: `toolgate has no call ${this.pendingIdOf(callId)}: it was not asked through toolgate` };
        }
        throw err;
      }
    }));
    for (const d of decided) {
      if (d.approved) {
        state.approve(d.item);
      } else {
        state.reject(d.item, { message: d.reason });
      }
    }
  }

  /**
   * Runs agent from input (a prompt, items, or a RunState restored with
   * RunState.fromString) to its end: each time the run stops for
   * approvals it calls opts.onInterruption, waits for toolgate's
   * decisions (resolve) and resumes the run.
   */
  async run<A extends Agent<any, any>>(agent: A, input: Parameters<Runner["run"]>[1], opts: RunOptions = {}): Promise<RunResult<any, A>> {
    const runner = opts.runner ?? new Runner();
    const signal = opts.signal ? { signal: opts.signal } : {};
    let result = (await runner.run(agent, input as never, signal)) as RunResult<any, A>;
    while (result.interruptions.length > 0) {
      await opts.onInterruption?.(result.state);
      await this.resolve(result.state, signal);
      result = (await runner.run(agent, result.state as never, signal)) as RunResult<any, A>;
    }
    return result;
  }
}

/** Toolgate for an OpenAI Agents JS agent (see ToolgateOpenAIAgents). */
export function toolgate(opts: ToolgateOpenAIAgentsOptions): ToolgateOpenAIAgents {
  return new ToolgateOpenAIAgents(opts);
}
