import { MemorySaver } from "@langchain/langgraph";
import { createAgent, tool } from "langchain";
import { z } from "zod";

import type { Client } from "../src/index.js";
import { toolgate } from "../src/langchain.js";

/**
 * runAgent runs a LangChain agent whose send_email tool toolgate gates: a
 * call the policy allows runs at once; a call it asks about interrupts
 * the run (humanInTheLoopMiddleware) and waits in toolgate (toolgate
 * pending, the inbox, Slack) until someone decides; toolgate's decision
 * resumes it: the tool runs with the approved (possibly edited)
 * arguments, or the model is told who rejected it and why. The run's
 * thread is the conversation.
 */
export async function runAgent(opts: {
  client: Client; // Client.connect({ servers, creds: "agent.creds" })
  conversationId: string;
  model: Parameters<typeof createAgent>[0]["model"];
  sendEmail: (args: { to: string; subject: string }) => Promise<string>;
  prompt: string;
  signal?: AbortSignal;
}): Promise<string> {
  const gate = toolgate({ client: opts.client, conversationId: opts.conversationId });
  const sendEmail = tool((args) => opts.sendEmail(args), {
    name: "send_email",
    description: "Send an email",
    schema: z.object({ to: z.string(), subject: z.string() }),
  });
  const agent = createAgent({
    model: opts.model,
    tools: [sendEmail],
    middleware: gate.middleware(["send_email"]),
    checkpointer: new MemorySaver(),
  });
  const result = await gate.run(agent, { messages: [{ role: "user", content: opts.prompt }] }, opts.signal ? { signal: opts.signal } : {});
  return String(result.messages.at(-1)?.content);
}
