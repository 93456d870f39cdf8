// The OpenAI Agents tests' model: the SDK's ScriptedModel, which calls
// send_email once and then, once its input ends with the tool's result
// (or its rejection), answers with what it saw.

import { ScriptedModel, assistantMessage, functionCall, modelResponder } from "@openai/agents-core/testing";

/** The text of the last function call result in a model call's input, if the input ends with one. */
export function lastToolOutput(input: unknown): string | undefined {
  if (!Array.isArray(input)) return undefined;
  const last = input.at(-1) as { type?: string; output?: unknown } | undefined;
  if (last?.type !== "function_call_result") return undefined;
  const out = last.output as string | { type?: string; text?: string };
  return typeof out === "string" ? out : (out.text ?? JSON.stringify(out));
}

/** A model that calls toolName with args under callId, then says what the tool's result was. */
export function scriptedModel(toolName: string, args: Record<string, unknown>, callId = "call-1"): ScriptedModel {
  const step = modelResponder((call) => {
    const seen = lastToolOutput(call.request.input);
    return seen !== undefined ? [assistantMessage(`the tool said ${seen}`)] : [functionCall(toolName, args, { callId })];
  });
  return new ScriptedModel([step, step, step, step]);
}
