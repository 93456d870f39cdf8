// The LangChain/LangGraph JS adapter (@toolgate/client/langchain):
// LangChain's humanInTheLoopMiddleware interrupts exactly the calls
// toolgate asks a person about, toolgate's decisions become the
// middleware's approve / edit / reject decisions, and a middleware runs a
// gated tool only as toolgate's entry allows, so it runs once and its
// outcome is recorded.

import { Command } from "@langchain/langgraph";
import { createMiddleware, humanInTheLoopMiddleware, ToolMessage, type AgentMiddleware, type Decision, type HITLRequest, type HITLResponse, type InterruptOnConfig } from "langchain";

import { ApprovalRefusedError, ask, canonical, decision, pendingIdOf, runApproved, type AdapterOptions } from "./adapter.js";
import type { Client } from "./client.js";
import { NotFoundError, RejectedError } from "./errors.js";

export { ApprovalRefusedError, type ApprovalRefusal } from "./adapter.js";

/** How the agent's calls reach toolgate. */
export type ToolgateLangChainOptions = AdapterOptions;

/** A tool call as the agent's messages hold it. */
interface ToolCall {
  id?: string;
  name: string;
  args: Record<string, unknown>;
}

/** What an agent's invoke returns that resolving its interrupt reads: its messages, and the interrupt. */
export interface Interrupted {
  messages: { content?: unknown; tool_calls?: ToolCall[] }[];
  __interrupt__?: { value?: unknown }[];
}

/** The agent this adapter runs: a createAgent agent (with a checkpointer). */
interface Invokable {
  invoke(input: any, config?: any): Promise<any>;
}

/**
 * Toolgate for a LangChain agent (createAgent): add middleware(tools) to
 * the agent's middleware, give it a checkpointer and a thread_id, and run
 * it with run(...), which answers each interrupt with toolgate's
 * decisions; or invoke it yourself and resume with
 * new Command({ resume: await gate.decisions(result) }).
 */
export class ToolgateLangChain {
  private readonly c: Client;

  constructor(private readonly opts: ToolgateLangChainOptions) {
    this.c = opts.client;
  }

  /** The pendingId toolgate gives the agent's tool call id. */
  pendingIdOf(toolCallId: string): string {
    return pendingIdOf(this.opts, toolCallId);
  }

  /**
   * Whether toolgate asks a person about call (or refuses it): each call
   * is submitted to toolgate under its tool call id; only a call toolgate
   * lets run without a person's decision goes on without an interrupt. A
   * call a person decided stays one to interrupt, so that the middleware,
   * which asks again when the run resumes, finds the calls it stopped for.
   */
  async interrupts(call: ToolCall): Promise<boolean> {
    if (!call.id) {
      return true; // no id to name the call in toolgate: decisions refuses it
    }
    const v = await ask(this.opts, call.id, call.name, call.args);
    return !(v.kind === "run" && !v.entry.approvedOrRejectedByUserId);
  }

  /**
   * The middleware for an agent whose tools named tools toolgate gates:
   * LangChain's humanInTheLoopMiddleware, interrupting the calls toolgate
   * asks about (interrupts) with approve, edit and reject allowed and the
   * call's pendingId in the description; and a middleware that runs each
   * of those tools only as toolgate's entry allows: the call's arguments
   * must be those toolgate holds (or its approver's edit), the call
   * approved or allowed in toolgate and not yet run; then it is claimed
   * (so it runs once), run with toolgate's arguments, and its outcome
   * (the tool message's content) recorded. Anything else is an
   * ApprovalRefusedError (or the RejectedError of a refused call), which
   * the model sees as the tool's error message.
   */
  middleware(tools: string[]): AgentMiddleware[] {
    const gated = new Set(tools);
    const interruptOn: Record<string, InterruptOnConfig> = {};
    for (const name of tools) {
      interruptOn[name] = {
        allowedDecisions: ["approve", "edit", "reject"],
        when: (request) => this.interrupts(request.toolCall as ToolCall),
        description: (toolCall) => `${toolCall.name}: waiting in toolgate as ${this.pendingIdOf(toolCall.id ?? "")}`,
      };
    }
    const run = createMiddleware({
      name: "ToolgateMiddleware",
      wrapToolCall: async (request, handler) => {
        const call = request.toolCall as ToolCall;
        if (!gated.has(call.name)) {
          return handler(request);
        }
        let out: ToolMessage | Command | undefined;
        try {
          await runApproved(this.c, this.pendingIdOf(call.id ?? ""), call.args, async (args) => {
            out = await handler({ ...request, toolCall: { ...request.toolCall, args: args as Record<string, unknown> } });
            if (ToolMessage.isInstance(out) && out.status === "error") {
              throw new Error(String(out.content)); // recorded as the call's failure; the model sees the tool message
            }
            return ToolMessage.isInstance(out) ? out.content : undefined;
          });
        } catch (err) {
          if (out !== undefined) {
            return out;
          }
          if (err instanceof ApprovalRefusedError || err instanceof RejectedError) {
            return new ToolMessage({ content: err.message, name: call.name, tool_call_id: call.id ?? "", status: "error" });
          }
          throw err;
        }
        return out!;
      },
    });
    return [humanInTheLoopMiddleware({ interruptOn }) as AgentMiddleware, run as AgentMiddleware];
  }

  /**
   * Waits for toolgate's decision on each call an interrupted invoke's
   * result stops for, and returns them as the middleware's resume value:
   * approved → approve, approved with edited arguments → edit (with
   * toolgate's arguments), rejected, denied, timed out or cancelled →
   * reject with who refused and why, the tool message the model sees. The
   * interrupt's action requests are the last AI message's tool calls that
   * toolgate asked about, in order; a request toolgate has no call for is
   * rejected, saying so. It throws the signal's abort; the calls stay
   * pending in toolgate.
   */
  async decisions(result: Interrupted, opts: { signal?: AbortSignal } = {}): Promise<HITLResponse> {
    const request = result.__interrupt__?.[0]?.value as HITLRequest | undefined;
    if (!request) {
      return { decisions: [] };
    }
    const calls = [...result.messages].reverse().find((m) => m.tool_calls?.length)?.tool_calls ?? [];
    let next = 0;
    const ids = request.actionRequests.map((a) => {
      while (next < calls.length) {
        const c = calls[next++]!;
        if (c.name === a.name && canonical(c.args) === canonical(a.args)) return c.id;
      }
      return undefined;
    });
    const decisions = await Promise.all(ids.map(async (id): Promise<Decision> => {
      if (!id) {
        return { type: "reject", message: "toolgate has no call for this action request: its tool call is not in the agent's last message" };
      }
      let d;
      try {
        d = await decision(this.c, this.pendingIdOf(id), opts.signal);
      } catch (err) {
        if (err instanceof NotFoundError) {
          return { type: "reject", message: `toolgate has no call ${this.pendingIdOf(id)}: it was not asked through toolgate` };
        }
        throw err;
      }
      if (!d.approved) {
        return { type: "reject", message: d.reason };
      }
      const call = calls.find((c) => c.id === id)!;
      return d.outcome.edited
        ? { type: "edit", editedAction: { name: call.name, args: d.outcome.arguments as Record<string, unknown> } }
        : { type: "approve" };
    }));
    return { decisions };
  }

  /**
   * Invokes agent with input under the thread conversationId (its
   * checkpointer keeps the run) until it ends, answering each interrupt
   * with toolgate's decisions (decisions).
   */
  async run<R extends Interrupted>(agent: Invokable, input: unknown, opts: { signal?: AbortSignal; config?: Record<string, unknown> } = {}): Promise<R> {
    const config = { ...opts.config, configurable: { thread_id: this.opts.conversationId }, ...(opts.signal ? { signal: opts.signal } : {}) };
    let result = (await agent.invoke(input, config)) as R;
    while (result.__interrupt__?.length) {
      const resume = await this.decisions(result, opts.signal ? { signal: opts.signal } : {});
      result = (await agent.invoke(new Command({ resume }), config)) as R;
    }
    return result;
  }
}

/** Toolgate for a LangChain agent (see ToolgateLangChain). */
export function toolgate(opts: ToolgateLangChainOptions): ToolgateLangChain {
  return new ToolgateLangChain(opts);
}
