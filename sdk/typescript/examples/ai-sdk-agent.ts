import { generateText, stepCountIs, type LanguageModel, type ModelMessage, type ToolSet } from "ai";

import type { Client } from "../src/index.js";
import { toolgate } from "../src/ai-sdk.js";

/**
 * runAgent runs an AI SDK agent loop whose every tool call toolgate
 * decides: calls the policy allows run at once, calls it denies reach the
 * model as denials naming the rule, and calls it asks about wait in
 * toolgate (toolgate pending, the inbox, Slack) until someone decides.
 * The model's next turn sees the tool's result, or the approver's reason.
 */
export async function runAgent(opts: {
  client: Client; // Client.connect({ servers, creds: "agent.creds" })
  conversationId: string;
  model: LanguageModel;
  tools: ToolSet;
  prompt: string;
  signal?: AbortSignal;
}): Promise<{ text: string; messages: ModelMessage[] }> {
  const gate = toolgate({ client: opts.client, conversationId: opts.conversationId });
  const tools = gate.tools(opts.tools);
  const messages: ModelMessage[] = [{ role: "user", content: opts.prompt }];
  for (;;) {
    const result = await generateText({
      model: opts.model,
      tools,
      toolApproval: gate.toolApproval,
      messages,
      stopWhen: stepCountIs(5),
      ...(opts.signal ? { abortSignal: opts.signal } : {}),
    });
    messages.push(...result.responseMessages);
    // The calls toolgate asks a person about: wait for their decisions,
    // and hand them to the SDK as its approval responses.
    const decisions = await gate.decisions(messages, opts.signal ? { signal: opts.signal } : {});
    if (decisions.length === 0) {
      return { text: result.text, messages };
    }
    messages.push({ role: "tool", content: decisions });
  }
}
