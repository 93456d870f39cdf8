// The LangChain adapter against a real toolgate, with LangChain's own
// agent (createAgent, its humanInTheLoopMiddleware and a checkpointer) and
// its fake chat model: a call the policy asks about interrupts the run
// and waits in `toolgate pending`; an approval through the CLI with
// edited arguments reaches the middleware as an edit and the tool runs
// with them, the model's next turn seeing the result; a rejection
// reaches the model as the middleware's rejection with the approver's
// reason.

import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { test } from "node:test";

import { MemorySaver } from "@langchain/langgraph";
import { AIMessage, createAgent, fakeModel, tool, ToolMessage, type BaseMessage, type HITLRequest } from "langchain";
import { z } from "zod";

import { toolgate } from "../src/langchain.js";
import { pendingId } from "../src/index.js";

import { runAgent } from "../examples/langchain-agent.js";
import { connectAs, conversation, pendingInToolgate, toolgate as cli } from "./harness.js";

/** LangChain's fake model: it calls send_email with args once, then says what the tool's message was. */
function scriptedModel(args: Record<string, unknown>, name = "send_email", id = "call-1") {
  return fakeModel()
    .respondWithTools([{ name, args, id }])
    .respond((messages: BaseMessage[]) => {
      const last = messages.at(-1);
      return new AIMessage(ToolMessage.isInstance(last) ? `the tool said ${String(last.content)}` : "no tool message");
    });
}

test("langchain: an approval through the CLI with edited arguments runs the tool with them, and the model's next turn sees the result", async (t) => {
  const agent = await connectAs(t, "agent");
  const conv = conversation("lc-edit");
  const ran: unknown[] = [];
  const model = scriptedModel({ to: "all@example.com", subject: "weekly" });
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
  assert.equal(text, "the tool said sent to team@example.com", "the model's next turn saw the result");
  const done = await agent.get(e.pendingId);
  assert.equal(done.status, "COMPLETED_SUCCESS");
  assert.equal(done.result, "sent to team@example.com");
});

test("langchain: a rejection through the CLI reaches the model as the middleware's rejection with the approver's reason", async (t) => {
  const agent = await connectAs(t, "agent");
  const conv = conversation("lc-reject");
  const ran: unknown[] = [];
  const model = scriptedModel({ to: "everyone@example.com", subject: "hi" });
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

test("langchain: the policy's allow runs the tool without an interrupt; its deny reaches the model naming the rule", async (t) => {
  const agent = await connectAs(t, "agent");
  const ran: string[] = [];
  const schema = z.object({ q: z.string() });
  const tools = [
    tool(async () => (ran.push("web_search"), "found it"), { name: "web_search", description: "Search the web", schema }),
    tool(async () => (ran.push("delete_repo"), "deleted"), { name: "delete_repo", description: "Delete a repository", schema }),
  ];
  const runOne = async (name: string, conv: string) => {
    const gate = toolgate({ client: agent, conversationId: conv });
    const a = createAgent({ model: scriptedModel({ q: "toolgate" }, name), tools, middleware: gate.middleware(["web_search", "delete_repo"]), checkpointer: new MemorySaver() });
    // What the middleware's interrupts asked: each action request's description.
    const asked: string[] = [];
    const invoke = async (input: unknown, config: unknown) => {
      const r = (await a.invoke(input as never, config as never)) as { __interrupt__?: { value: HITLRequest }[] };
      for (const i of r.__interrupt__ ?? []) asked.push(...i.value.actionRequests.map((x) => x.description ?? ""));
      return r;
    };
    const result = await gate.run({ invoke }, { messages: [{ role: "user", content: "Go." }] });
    return { text: String(result.messages.at(-1)?.content), asked };
  };

  const searchConv = conversation("lc-allow");
  const allowed = await runOne("web_search", searchConv);
  assert.deepEqual(allowed, { text: "the tool said found it", asked: [] });
  assert.equal((await agent.get(pendingId(searchConv, "call-1"))).status, "COMPLETED_SUCCESS");

  const deleteConv = conversation("lc-deny");
  const denied = await runOne("delete_repo", deleteConv);
  assert.deepEqual(denied.asked, [`delete_repo: waiting in toolgate as ${pendingId(deleteConv, "call-1")}`], "the interrupt names toolgate's call");
  assert.match(denied.text, /^the tool said .*denied by policy: .*delete_repo/);
  assert.deepEqual(ran, ["web_search"], "the denied tool did not run");
  assert.equal((await agent.get(pendingId(deleteConv, "call-1"))).status, "REJECTED_BY_POLICY");
});

test("docs/sdk-typescript.md shows the LangChain example the tests run", async () => {
  const example = await readFile(new URL("../../examples/langchain-agent.ts", import.meta.url), "utf8");
  const doc = await readFile(new URL("../../../../docs/sdk-typescript.md", import.meta.url), "utf8");
  const published = example.replace('"../src/index.js"', '"@toolgate/client"').replace('"../src/langchain.js"', '"@toolgate/client/langchain"');
  assert.ok(doc.includes("```ts\n" + published + "```"), "docs/sdk-typescript.md does not show examples/langchain-agent.ts as it is (with the package's import paths)");
});
