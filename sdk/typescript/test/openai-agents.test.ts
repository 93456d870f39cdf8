// The OpenAI Agents JS adapter against a real toolgate, with the SDK's own
// agent loop (Runner) and its ScriptedModel: a call the policy asks about
// stops the run and waits in `toolgate pending`; an approval through the
// CLI runs the tool with the approved (edited) arguments and the model's
// next turn sees the result; a rejection reaches the model as the SDK's
// rejection with the approver's reason; and a run resumed in a new process
// from its serialized RunState, after the first was killed while the call
// waited, runs the tool exactly once.

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { readFile, stat } from "node:fs/promises";
import { mkdtemp } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

import { Agent, Runner } from "@openai/agents";
import { z } from "zod";

import { runAgent } from "../examples/openai-agents-agent.js";
import { pendingId } from "../src/index.js";
import { toolgate } from "../src/openai-agents.js";
import { connectAs, conversation, eventually, pendingInToolgate, toolgate as cli } from "./harness.js";
import { lastToolOutput, scriptedModel } from "./openai-agents-model.js";

test("openai-agents: an approval through the CLI runs the tool with the edited arguments, and the model's next turn sees the result", async (t) => {
  const agent = await connectAs(t, "agent");
  const conv = conversation("oa-edit");
  const ran: unknown[] = [];
  const model = scriptedModel("send_email", { to: "all@example.com", subject: "weekly" });
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
  assert.equal(lastToolOutput(model.lastCall?.request.input), "sent to team@example.com");
  const done = await agent.get(e.pendingId);
  assert.equal(done.status, "COMPLETED_SUCCESS");
  assert.equal(done.result, "sent to team@example.com");
});

test("openai-agents: a rejection through the CLI reaches the model as the SDK's rejection with the approver's reason", async (t) => {
  const agent = await connectAs(t, "agent");
  const conv = conversation("oa-reject");
  const ran: unknown[] = [];
  const model = scriptedModel("send_email", { to: "everyone@example.com", subject: "hi" });
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
  assert.match(lastToolOutput(model.lastCall?.request.input) ?? "", /rejected by approver: not to the whole company/);
  assert.match(text, /^the tool said .*rejected by approver: not to the whole company/);
  assert.equal((await agent.get(e.pendingId)).status, "REJECTED_BY_USER");
});

test("openai-agents: the policy's allow runs the tool without an interruption; its deny reaches the model naming the rule", async (t) => {
  const agent = await connectAs(t, "agent");
  const ran: string[] = [];
  const runOne = async (name: string, conv: string) => {
    const gate = toolgate({ client: agent, conversationId: conv });
    const parameters = z.object({ q: z.string() });
    const tools = [
      gate.tool({ name: "web_search", description: "Search the web", parameters, execute: async () => (ran.push("web_search"), "found it") }),
      gate.tool({ name: "delete_repo", description: "Delete a repository", parameters, execute: async () => (ran.push("delete_repo"), "deleted") }),
    ];
    const a = new Agent({ name: "policy", instructions: "Go.", model: scriptedModel(name, { q: "toolgate" }), tools });
    let interrupted = 0;
    const result = await gate.run(a, "Go.", { runner: new Runner({ tracingDisabled: true }), onInterruption: () => void interrupted++ });
    return { text: String(result.finalOutput), interrupted };
  };

  const searchConv = conversation("oa-allow");
  assert.deepEqual(await runOne("web_search", searchConv), { text: "the tool said found it", interrupted: 0 });
  assert.equal((await agent.get(pendingId(searchConv, "call-1"))).status, "COMPLETED_SUCCESS");

  const deleteConv = conversation("oa-deny");
  const denied = await runOne("delete_repo", deleteConv);
  assert.equal(denied.interrupted, 1);
  assert.match(denied.text, /^the tool said .*denied by policy: .*delete_repo/);
  assert.deepEqual(ran, ["web_search"], "the denied tool did not run");
  assert.equal((await agent.get(pendingId(deleteConv, "call-1"))).status, "REJECTED_BY_POLICY");
});

/** Runs test/openai-agents-process.js with args; resolves with its exit code, signal and output. */
function agentProcess(args: string[]) {
  const child = spawn(process.execPath, [fileURLToPath(new URL("./openai-agents-process.js", import.meta.url)), ...args], { stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  child.stdout.on("data", (b: Buffer) => (out += b.toString()));
  child.stderr.on("data", (b: Buffer) => (out += b.toString()));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null; out: string }>((resolve) =>
    child.on("exit", (code, signal) => resolve({ code, signal, out })));
  return { child, exited };
}

test("openai-agents: a run killed while its call waits resumes in a new process from its RunState, and the tool runs once", async (t) => {
  const agent = await connectAs(t, "agent");
  const conv = conversation("oa-restart");
  const dir = await mkdtemp(join(tmpdir(), "toolgate-oa-"));
  const stateFile = join(dir, "state.json");
  const runsFile = join(dir, "runs");

  const first = agentProcess([conv, stateFile, runsFile]);
  const e = await pendingInToolgate(conv, "call-1");
  await eventually("the serialized RunState", async () => {
    const s = await stat(stateFile).catch(() => undefined);
    return { ...(s ? { value: s } : {}), saw: "no state file" };
  });
  first.child.kill("SIGKILL");
  const killed = await first.exited;
  assert.equal(killed.signal, "SIGKILL", `the first process ended on its own: ${killed.out}`);
  assert.equal((await agent.get(e.pendingId)).status, "PENDING_APPROVAL", "the call still waits in toolgate");

  await cli("approve", e.pendingId);
  const second = await agentProcess([conv, stateFile, runsFile, "resume"]).exited;
  assert.equal(second.code, 0, second.out);
  assert.equal(second.out, "the tool said sent to ops@example.com");
  const runs = (await readFile(runsFile, "utf8")).trim().split("\n");
  assert.deepEqual(runs, [JSON.stringify({ to: "ops@example.com", subject: "restart" })], "the tool ran exactly once");
  assert.equal((await agent.get(e.pendingId)).status, "COMPLETED_SUCCESS");
});

test("docs/sdk-typescript.md shows the OpenAI Agents example the tests run", async () => {
  const example = await readFile(new URL("../../examples/openai-agents-agent.ts", import.meta.url), "utf8");
  const doc = await readFile(new URL("../../../../docs/sdk-typescript.md", import.meta.url), "utf8");
  const published = example.replace('"../src/index.js"', '"@toolgate/client"').replace('"../src/openai-agents.js"', '"@toolgate/client/openai-agents"');
  assert.ok(doc.includes("```ts\n" + published + "```"), "docs/sdk-typescript.md does not show examples/openai-agents-agent.ts as it is (with the package's import paths)");
});
