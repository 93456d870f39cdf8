// The Mastra adapter against a real toolgate, with Mastra's own agent
// loop (Agent.generate, requireToolApproval, approveToolCallGenerate and
// declineToolCallGenerate) and its mock model: a gated call suspends the
// run and waits in `toolgate pending`; an approval through the CLI runs
// the tool with the approved (edited) arguments and the model's next turn
// sees the result; a rejection reaches the model as Mastra's decline with
// the approver's reason.

import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { test } from "node:test";

import { Agent } from "@mastra/core/agent";
import { Mastra } from "@mastra/core/mastra";
import { InMemoryStore } from "@mastra/core/storage";
import { MastraLanguageModelV2Mock } from "@mastra/core/test-utils/llm-mock";
import { z } from "zod";

import { pendingId } from "../src/index.js";
import { toolgate } from "../src/mastra.js";

import { runAgent } from "../examples/mastra-agent.js";
import { connectAs, conversation, pendingInToolgate, toolgate as cli } from "./harness.js";

interface PromptMessage {
  role: string;
  content: string | { type: string; output?: { type: string; value?: unknown } }[];
}

/** What the last message of a model call's prompt says the tool returned, if it is a tool result. */
function toolOutput(prompt: PromptMessage[]): unknown {
  const last = prompt.at(-1);
  if (last?.role !== "tool" || !Array.isArray(last.content)) return undefined;
  return last.content.find((p) => p.type === "tool-result")?.output;
}

/** Mastra's mock model: it calls send_email with args once, then says what the tool's result was. */
function scriptedModel(args: Record<string, unknown>, toolName = "send_email") {
  const usage = { inputTokens: 1, outputTokens: 1, totalTokens: 2 };
  const prompts: PromptMessage[][] = [];
  const model = new MastraLanguageModelV2Mock({
    doGenerate: (async (options: { prompt: PromptMessage[] }) => {
      prompts.push(options.prompt);
      const seen = toolOutput(options.prompt);
      return seen !== undefined
        ? { content: [{ type: "text", text: `the tool said ${JSON.stringify(seen)}` }], finishReason: "stop", usage, warnings: [] }
        : { content: [{ type: "tool-call", toolCallId: "call-1", toolName, input: JSON.stringify(args) }], finishReason: "tool-calls", usage, warnings: [] };
    }) as never,
  });
  return { model, prompts };
}

test("mastra: an approval through the CLI runs the tool with the edited arguments, and the model's next turn sees the result", async (t) => {
  const agent = await connectAs(t, "agent");
  const conv = conversation("ma-edit");
  const ran: unknown[] = [];
  const { model } = scriptedModel({ to: "all@example.com", subject: "weekly" });
  const run = runAgent({
    client: agent, conversationId: conv, model, prompt: "Send the weekly report.",
    sendEmail: async (args) => {
      ran.push(args);
      return `sent to ${args.to}`;
    },
  });
  run.catch(() => undefined); // awaited below, after the approval

  const e = await pendingInToolgate(conv, "call-1");
  assert.equal(e.toolName, "send_email");
  assert.deepEqual(e.toolArguments, { to: "all@example.com", subject: "weekly" });
  assert.deepEqual(ran, [], "nothing runs before the decision");
  await cli("approve", e.pendingId, "--args", JSON.stringify({ to: "team@example.com", subject: "weekly" }));

  const text = await run;
  assert.deepEqual(ran, [{ to: "team@example.com", subject: "weekly" }]);
  assert.match(text, /^the tool said .*sent to team@example\.com/, "the model's next turn saw the result");
  const done = await agent.get(e.pendingId);
  assert.equal(done.status, "COMPLETED_SUCCESS");
  assert.equal(done.result, "sent to team@example.com");
});

test("mastra: a rejection through the CLI reaches the model as Mastra's decline with the approver's reason", async (t) => {
  const agent = await connectAs(t, "agent");
  const conv = conversation("ma-reject");
  const ran: unknown[] = [];
  const { model } = scriptedModel({ to: "everyone@example.com", subject: "hi" });
  const run = runAgent({
    client: agent, conversationId: conv, model, prompt: "Email everyone.",
    sendEmail: async (args) => {
      ran.push(args);
      return "sent";
    },
  });
  run.catch(() => undefined);
  const e = await pendingInToolgate(conv, "call-1");
  await cli("reject", e.pendingId, "--reason", "not to the whole company");

  const text = await run;
  assert.deepEqual(ran, []);
  assert.match(text, /^the tool said .*rejected by approver: not to the whole company/);
  assert.equal((await agent.get(e.pendingId)).status, "REJECTED_BY_USER");
});

test("mastra: the policy's allow approves the suspended call at once; its deny declines it naming the rule", async (t) => {
  const agent = await connectAs(t, "agent");
  const ran: string[] = [];
  const runOne = async (name: string, conv: string) => {
    const gate = toolgate({ client: agent, conversationId: conv });
    const schema = z.object({ q: z.string() });
    const tools = {
      web_search: gate.tool({ id: "web_search", description: "Search the web", inputSchema: schema, execute: async () => (ran.push("web_search"), "found it") }),
      delete_repo: gate.tool({ id: "delete_repo", description: "Delete a repository", inputSchema: schema, execute: async () => (ran.push("delete_repo"), "deleted") }),
    };
    const a = new Agent({ id: "policy", name: "policy", instructions: "Go.", model: scriptedModel({ q: "toolgate" }, name).model, tools });
    new Mastra({ agents: { policy: a }, storage: new InMemoryStore(), logger: false });
    return (await gate.generate(a, "Go.")).text;
  };

  const searchConv = conversation("ma-allow");
  assert.match(await runOne("web_search", searchConv), /^the tool said .*found it/);
  assert.equal((await agent.get(pendingId(searchConv, "call-1"))).status, "COMPLETED_SUCCESS");

  const deleteConv = conversation("ma-deny");
  assert.match(await runOne("delete_repo", deleteConv), /^the tool said .*denied by policy: .*delete_repo/);
  assert.deepEqual(ran, ["web_search"], "the denied tool did not run");
  assert.equal((await agent.get(pendingId(deleteConv, "call-1"))).status, "REJECTED_BY_POLICY");
});

test("mastra: a run left suspended while its call waits is resumed by a new agent on the same store, and the tool runs once", async (t) => {
  const agent = await connectAs(t, "agent");
  const conv = conversation("ma-restart");
  const store = new InMemoryStore();
  const ran: unknown[] = [];
  // One "process": an agent on the store, a gate, and the tool.
  const start = () => {
    const gate = toolgate({ client: agent, conversationId: conv });
    const sendEmail = gate.tool({
      id: "send_email", description: "Send an email", inputSchema: z.object({ to: z.string(), subject: z.string() }),
      execute: async (args: unknown) => (ran.push(args), "sent"),
    });
    const a = new Agent({ id: "restart", name: "restart", instructions: "Go.", model: scriptedModel({ to: "ops@example.com", subject: "restart" }).model, tools: { send_email: sendEmail } });
    new Mastra({ agents: { restart: a }, storage: store, logger: false });
    return { gate, a };
  };

  const first = start();
  const suspended = await first.a.generate("Email ops.", { requireToolApproval: first.gate.requireToolApproval });
  assert.equal(suspended.finishReason, "suspended");
  const stop = new AbortController();
  const waiting = first.gate.resolve(first.a, suspended, { signal: stop.signal });
  const e = await pendingInToolgate(conv, "call-1");
  stop.abort(new Error("the process stops"));
  await assert.rejects(waiting);
  assert.equal((await agent.get(e.pendingId)).status, "PENDING_APPROVAL", "the call still waits in toolgate");

  await cli("approve", e.pendingId);
  const second = start();
  const outs = await second.gate.resumeSuspended(second.a);
  assert.equal(outs.length, 1);
  assert.match(outs[0]!.text, /^the tool said .*sent/);
  assert.deepEqual(ran, [{ to: "ops@example.com", subject: "restart" }], "the tool ran once");
  assert.equal((await agent.get(e.pendingId)).status, "COMPLETED_SUCCESS");
  assert.deepEqual(await second.gate.resumeSuspended(second.a), [], "no run is left suspended");
});

test("docs/sdk-typescript.md shows the Mastra example the tests run", async () => {
  const example = await readFile(new URL("../../examples/mastra-agent.ts", import.meta.url), "utf8");
  const doc = await readFile(new URL("../../../../docs/sdk-typescript.md", import.meta.url), "utf8");
  const published = example.replace('"../src/index.js"', '"@toolgate/client"').replace('"../src/mastra.js"', '"@toolgate/client/mastra"');
  assert.ok(doc.includes("```ts\n" + published + "```"), "docs/sdk-typescript.md does not show examples/mastra-agent.ts as it is (with the package's import paths)");
});
