// The Executor against a real toolgate: it takes the calls toolgate
// claims for it, runs them with the approved arguments, keeps its lease
// with heartbeats, retries a failed attempt, fails a permanent error at
// once, stops a handler whose conversation is cancelled, and records each
// outcome for the agent awaiting it.

import assert from "node:assert/strict";
import { test, type TestContext } from "node:test";

import { ExecutionError, Executor, permanent, pendingId, type Client, type Handler, type JSONValue } from "../src/index.js";
import { connectAs, conversation, eventually, pendingInToolgate, toolgate } from "./harness.js";

/** Runs an executor hosting tool with h until the test ends. */
async function hosting(t: TestContext, id: string, tool: string, h: Handler, leaseMs = 30_000): Promise<Executor> {
  const c: Client = await connectAs(t, "executor");
  const x = new Executor(c, { id, leaseMs, backoffMs: [50] }).handle(tool, h);
  const stop = new AbortController();
  const running = x.run(stop.signal);
  t.after(async () => {
    stop.abort();
    await running;
  });
  return x;
}

test("an executor runs an approved call with the approver's edited arguments, and the agent awaiting it gets the result", async (t) => {
  const agent = await connectAs(t, "agent");
  const conv = conversation("exec-edit");
  const ran: JSONValue[] = [];
  await hosting(t, "ts-exec-edit", "deploy_service", (call) => {
    ran.push(call.arguments);
    return { output: { deployed: call.arguments, attempt: call.attempt }, cost: 1.5 };
  });
  const e = await agent.submit({ toolCallId: "deploy-1", toolName: "deploy_service", toolArguments: { service: "api", env: "prod" }, conversationId: conv });
  assert.equal(e.status, "PENDING_APPROVAL");
  const finished = agent.await(e.pendingId, { untilFinished: true });
  await pendingInToolgate(conv, "deploy-1");
  assert.deepEqual(ran, [], "nothing runs before the approval");
  await toolgate("approve", e.pendingId, "--args", JSON.stringify({ service: "api", env: "staging" }));

  const out = await finished;
  assert.equal(out.kind, "executed");
  assert.deepEqual(out.result, { deployed: { service: "api", env: "staging" }, attempt: 1 });
  assert.equal(out.cost, 1.5);
  assert.deepEqual(ran, [{ service: "api", env: "staging" }]);
  assert.equal(out.entry.status, "COMPLETED_SUCCESS");
  assert.match(out.entry.lastTransition?.actor ?? "", /(^|\/)ts-exec-edit$/);
});

test("a failed attempt is tried again; a permanent error fails the call at once", async (t) => {
  const agent = await connectAs(t, "agent");
  const conv = conversation("exec-retry");
  const attempts = new Map<string, number>();
  await hosting(t, "ts-exec-retry", "render_report", (call) => {
    const n = (attempts.get(call.toolCallId) ?? 0) + 1;
    attempts.set(call.toolCallId, n);
    const args = call.arguments as { fail: string };
    if (args.fail === "permanent") {
      throw permanent(new Error("the report's template is missing"));
    }
    if (args.fail === "once" && n === 1) {
      throw new Error("the renderer was busy");
    }
    return { output: { pages: 3, attempt: call.attempt } };
  });
  const retried = await agent.requestCall({ toolCallId: "report-1", toolName: "render_report", toolArguments: { fail: "once" }, conversationId: conv }, { untilFinished: true });
  assert.equal(retried.kind, "executed");
  assert.deepEqual(retried.result, { pages: 3, attempt: 2 });
  assert.equal(retried.entry.executionAttempts, 2);
  assert.equal(attempts.get("report-1"), 2);

  const failed = await agent.requestCall({ toolCallId: "report-2", toolName: "render_report", toolArguments: { fail: "permanent" }, conversationId: conv }, { untilFinished: true })
    .then(() => assert.fail("a failed call was awaited as executed"), (err: unknown) => err);
  assert.ok(failed instanceof ExecutionError, String(failed));
  assert.equal(failed.toolError, "the report's template is missing");
  assert.equal(failed.entry.status, "COMPLETED_FAILURE");
  assert.equal(failed.entry.executionAttempts, 1);
  assert.equal(attempts.get("report-2"), 1);
});

test("heartbeats keep the lease of a call that runs longer than it; a cancelled conversation stops its running call", async (t) => {
  const agent = await connectAs(t, "agent");
  const conv = conversation("exec-lease");
  let runs = 0;
  let started!: () => void;
  const waiting = new Promise<void>((r) => (started = r));
  await hosting(t, "ts-exec-lease", "long_job", async (call, signal) => {
    runs++;
    const args = call.arguments as { ms?: number; untilCancelled?: boolean };
    if (args.untilCancelled) {
      started();
      await new Promise((_, reject) => signal.addEventListener("abort", () => reject(new Error(String(signal.reason))), { once: true }));
    }
    await new Promise((r) => setTimeout(r, args.ms ?? 0));
    return { output: { slept: args.ms ?? 0 } };
  }, 1_200);
  const out = await agent.requestCall({ toolCallId: "job-1", toolName: "long_job", toolArguments: { ms: 2_500 }, conversationId: conv }, { untilFinished: true });
  assert.equal(out.kind, "executed");
  assert.deepEqual(out.result, { slept: 2_500 });
  assert.equal(out.entry.executionAttempts, 1, "the lease never ran out: one attempt");
  assert.equal(runs, 1);

  const cancelled = agent.requestCall({ toolCallId: "job-2", toolName: "long_job", toolArguments: { untilCancelled: true }, conversationId: conv }, { untilFinished: true })
    .then(() => assert.fail("a cancelled call was awaited as executed"), (err: unknown) => err);
  await waiting;
  const reply = await agent.cancelConversation(conv, { reason: "the user left" });
  assert.deepEqual(reply.running.map((e) => e.pendingId), [pendingId(conv, "job-2")]);
  const err = await cancelled;
  assert.ok(err instanceof ExecutionError, String(err));
  assert.match(err.toolError, /^cancelled: /);
  const e = await eventually("job-2 recorded", async () => {
    const x = await agent.get(pendingId(conv, "job-2"));
    return { ...(x.status === "COMPLETED_FAILURE" ? { value: x } : {}), saw: x.status };
  });
  assert.equal(e.executionAttempts, 1);
});
