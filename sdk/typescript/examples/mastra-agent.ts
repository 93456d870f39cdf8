import { Agent } from "@mastra/core/agent";
import { Mastra } from "@mastra/core/mastra";
import { InMemoryStore } from "@mastra/core/storage";
import { z } from "zod";

import type { Client } from "../src/index.js";
import { toolgate } from "../src/mastra.js";

/**
 * runAgent runs a Mastra agent whose send_email tool toolgate gates: each
 * call suspends the run for approval and toolgate answers it: at once
 * when the policy allows or denies it, and when it asks a person, once
 * someone decides (toolgate pending, the inbox, Slack). The tool runs
 * with the approved (possibly edited) arguments, or the model is told
 * who rejected it and why. Mastra keeps the suspended run in its storage
 * (here in memory; a durable store lets a restarted process resume it).
 */
export async function runAgent(opts: {
  client: Client; // Client.connect({ servers, creds: "agent.creds" })
  conversationId: string;
  model: ConstructorParameters<typeof Agent>[0]["model"];
  sendEmail: (args: { to: string; subject: string }) => Promise<string>;
  prompt: string;
  signal?: AbortSignal;
}): Promise<string> {
  const gate = toolgate({ client: opts.client, conversationId: opts.conversationId });
  const sendEmail = gate.tool({
    id: "send_email",
    description: "Send an email",
    inputSchema: z.object({ to: z.string(), subject: z.string() }),
    execute: (args: { to: string; subject: string }) => opts.sendEmail(args),
  });
  const agent = new Agent({ id: "assistant", name: "assistant", instructions: "Help with email.", model: opts.model, tools: { send_email: sendEmail } });
  new Mastra({ agents: { assistant: agent }, storage: new InMemoryStore(), logger: false });
  const result = await gate.generate(agent, opts.prompt, opts.signal ? { signal: opts.signal } : {});
  return result.text;
}
