import { Agent, Runner, RunState, type Model } from "@openai/agents";
import { z } from "zod";

import type { Client } from "../src/index.js";
import { toolgate } from "../src/openai-agents.js";

/**
 * runAgent runs an OpenAI Agents JS agent whose send_email tool toolgate
 * gates: a call the policy allows runs at once; a call it asks about
 * stops the run, waits in toolgate (toolgate pending, the inbox, Slack)
 * until someone decides, and the run resumes with the decision: the tool
 * runs with the approved (possibly edited) arguments, or the model is
 * told who rejected it and why. saveState gets the serialized run each
 * time it stops for approval; resumeFrom resumes one, in this process or
 * a new one, and the tool still runs at most once.
 */
export async function runAgent(opts: {
  client: Client; // Client.connect({ servers, creds: "agent.creds" })
  conversationId: string;
  model: Model;
  sendEmail: (args: { to: string; subject: string }) => Promise<string>;
  prompt: string;
  saveState?: (state: string) => Promise<void>;
  resumeFrom?: string;
  signal?: AbortSignal;
}): Promise<string> {
  const gate = toolgate({ client: opts.client, conversationId: opts.conversationId });
  const sendEmail = gate.tool({
    name: "send_email",
    description: "Send an email",
    parameters: z.object({ to: z.string(), subject: z.string() }),
    execute: (args) => opts.sendEmail(args),
  });
  const agent = new Agent({ name: "assistant", instructions: "Help with email.", model: opts.model, tools: [sendEmail] });
  const input = opts.resumeFrom ? await RunState.fromString(agent, opts.resumeFrom) : opts.prompt;
  const result = await gate.run(agent, input, {
    runner: new Runner({ tracingDisabled: true }),
    onInterruption: (state) => opts.saveState?.(state.toString()),
    ...(opts.signal ? { signal: opts.signal } : {}),
  });
  return String(result.finalOutput);
}
