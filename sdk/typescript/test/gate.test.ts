// gate and the client against a real toolgate: a call waits in toolgate
// until an approver decides through the CLI, runs with the approved
// (edited) arguments and is recorded; a refusal is a typed error naming
// who and why; a call nobody decides in time is withdrawn.

import assert from "node:assert/strict";
import { test } from "node:test";

import {
  AlreadyRanError,
  ConflictError,
  ForbiddenError,
  InterruptedError,
  InvalidError,
  NotDecidedError,
  NotFoundError,
  RejectedError,
  defaultTimeoutMs,
  gate,
  pendingId,
  submitAndWait,
  waitWithin,
  type Entry,
  type JSONValue,
} from "../src/index.js";
import { connectAs, conversation, pendingInToolgate, toolgate } from "./harness.js";

test("an approved call runs once with the approver's edited arguments and ends COMPLETED_SUCCESS", async (t) => {
  const agent = await connectAs(t, "agent");
  const conv = conversation("gate-edit");
  const ran: JSONValue[] = [];
  const sendEmail = gate("send_email", async (args: { to: string; subject: string }, ctx) => {
    ran.push(args);
    ctx.cost = 0.25;
    return { sent: true, to: args.to, edited: ctx.edited };
  }, { client: agent, conversationId: conv, timeoutMs: 60_000 });

  const result = sendEmail({ to: "all@example.com", subject: "weekly" }, { toolCallId: "email-1" });
  result.catch(() => undefined); // awaited below, after the approval
  const e = await pendingInToolgate(conv, "email-1");
  assert.equal(e.status, "PENDING_APPROVAL");
  assert.deepEqual(ran, [], "nothing runs before the decision");
  await toolgate("approve", e.pendingId, "--args", JSON.stringify({ to: "team@example.com", subject: "weekly" }), "--reason", "only the team");

  assert.deepEqual(await result, { sent: true, to: "team@example.com", edited: true });
  assert.deepEqual(ran, [{ to: "team@example.com", subject: "weekly" }]);
  const done = await agent.get(e.pendingId);
  assert.equal(done.status, "COMPLETED_SUCCESS");
  assert.deepEqual(done.result, { sent: true, to: "team@example.com", edited: true });
  assert.deepEqual(done.originalArguments, { to: "all@example.com", subject: "weekly" });
  assert.equal(done.cost, 0.25);
  assert.equal(done.executionAttempts, 1);

  // The same toolCallId again is the same call: its recorded result, not a second run.
  assert.deepEqual(await sendEmail({ to: "all@example.com", subject: "weekly" }, { toolCallId: "email-1" }), done.result);
  assert.equal(ran.length, 1);
  const refusing = gate("send_email", () => ({ sent: true }), { client: agent, conversationId: conv, timeoutMs: 60_000, ranBefore: "refuse" });
  await assert.rejects(refusing({ to: "all@example.com", subject: "weekly" }, { toolCallId: "email-1" }), AlreadyRanError);
});

test("a rejected call throws a RejectedError with the approver and reason, never runs, and ends REJECTED_BY_USER", async (t) => {
  const agent = await connectAs(t, "agent");
  const conv = conversation("gate-reject");
  let ran = 0;
  const transfer = gate("transfer_funds", () => {
    ran++;
    return { ok: true };
  }, { client: agent, conversationId: conv, timeoutMs: 60_000 });
  const result = transfer({ amount: 250, currency: "EUR" }, { toolCallId: "transfer-1" })
    .then(() => assert.fail("a rejected call returned a result"), (err: unknown) => err);
  const e = await pendingInToolgate(conv, "transfer-1");
  await toolgate("reject", e.pendingId, "--reason", "no money moves without a person");

  const err = await result;
  assert.ok(err instanceof RejectedError, String(err));
  assert.equal(err.kind, "rejected");
  assert.equal(err.by, "approver");
  assert.equal(err.reason, "no money moves without a person");
  assert.match(err.message, /rejected by approver: no money moves without a person/);
  assert.equal(ran, 0);
  assert.equal((await agent.get(e.pendingId)).status, "REJECTED_BY_USER");
  assert.ok(!(err instanceof InterruptedError), "a plain rejection does not stop the turn");

  // A rejection with --interrupt is an InterruptedError: still a RejectedError.
  const stopped = transfer({ amount: 900, currency: "EUR" }, { toolCallId: "transfer-2" })
    .then(() => assert.fail("a rejected call returned a result"), (err: unknown) => err);
  const e2 = await pendingInToolgate(conv, "transfer-2");
  await toolgate("reject", e2.pendingId, "--reason", "stop and ask me", "--interrupt");
  const err2 = await stopped;
  assert.ok(err2 instanceof InterruptedError, String(err2));
  assert.ok(err2 instanceof RejectedError);
  assert.match(err2.message, /stop and ask me; stop this turn and hand back to the user/);
  assert.equal((await agent.get(e2.pendingId)).interrupt, true);
  assert.equal(ran, 0);
});

test("the policy lets a call run at once, or denies it naming the rule", async (t) => {
  const agent = await connectAs(t, "agent");
  const conv = conversation("gate-policy");
  const search = gate("web_search", (args: { q: string }) => ({ hits: [args.q] }), { client: agent, conversationId: conv, timeoutMs: 30_000 });
  assert.deepEqual(await search({ q: "toolgate" }, { toolCallId: "search-1" }), { hits: ["toolgate"] });
  const done = await agent.get(pendingId(conv, "search-1"));
  assert.equal(done.status, "COMPLETED_SUCCESS");
  assert.equal(done.approvedOrRejectedByUserId, undefined, "nobody was asked");

  let ran = 0;
  const deleteRepo = gate("delete_repo", () => ran++, { client: agent, conversationId: conv, timeoutMs: 30_000 });
  const err = await deleteRepo({ repo: "toolgate" }, { toolCallId: "delete-1" }).then(() => assert.fail("denied call ran"), (e: unknown) => e);
  assert.ok(err instanceof RejectedError, String(err));
  assert.equal(err.kind, "denied");
  assert.equal(err.by, "policy");
  assert.match(err.rule, /delete_repo/);
  assert.equal(ran, 0);
  assert.equal((await agent.get(pendingId(conv, "delete-1"))).status, "REJECTED_BY_POLICY");
});

test("a call nobody decides within the wait, or whose caller aborts, is withdrawn and does not run", async (t) => {
  const agent = await connectAs(t, "agent");
  const conv = conversation("gate-withdraw");
  let ran = 0;
  const sendEmail = gate("send_email", () => ran++, { client: agent, conversationId: conv, timeoutMs: 3_000 });
  const err = await sendEmail({ to: "x@example.com" }, { toolCallId: "late-1" }).then(() => assert.fail("undecided call ran"), (e: unknown) => e);
  assert.ok(err instanceof NotDecidedError, String(err));
  assert.equal(err.verdict.kind, "timedOut");
  const withdrawn = await agent.get(pendingId(conv, "late-1"));
  assert.equal(withdrawn.status, "CANCELLED_BY_SYSTEM");
  assert.match(withdrawn.statusReason ?? "", /^withdrawn: no decision within 1500 ms/);

  const stop = new AbortController();
  const slow = gate("send_email", () => ran++, { client: agent, conversationId: conv, timeoutMs: 60_000 });
  const call = slow({ to: "y@example.com" }, { toolCallId: "abort-1", signal: stop.signal })
    .then(() => assert.fail("aborted call ran"), (e: unknown) => e);
  await pendingInToolgate(conv, "abort-1");
  stop.abort(new Error("the user closed the chat"));
  const aborted = await call;
  assert.ok(aborted instanceof NotDecidedError, String(aborted));
  assert.equal(aborted.verdict.kind, "withdrawn");
  const gone = await agent.get(pendingId(conv, "abort-1"));
  assert.equal(gone.status, "CANCELLED_BY_SYSTEM");
  assert.match(gone.statusReason ?? "", /withdrawn: the user closed the chat/);
  assert.equal(ran, 0);
});

test("submitAndWait's verdict, await after the decision, and toolgate's refusals as typed errors", async (t) => {
  const agent = await connectAs(t, "agent");
  const approver = await connectAs(t, "approver");
  const conv = conversation("client");
  const v = submitAndWait(agent, { toolCallId: "v-1", toolName: "publish_post", toolArguments: { title: "t" }, conversationId: conv }, { timeoutMs: 60_000 });
  const e = await pendingInToolgate(conv, "v-1");
  const decided = await approver.decide(e.pendingId, { approve: true, reason: "fine" });
  assert.equal(decided.status, "APPROVED_READY_FOR_EXECUTION");
  const verdict = await v;
  assert.equal(verdict.kind, "run");
  assert.equal(verdict.outcome?.kind, "approved");
  assert.equal(verdict.outcome?.by, "approver");
  assert.deepEqual(verdict.outcome?.arguments, { title: "t" });

  // Another process awaiting the same call later gets the same answer.
  const later = await connectAs(t, "agent");
  assert.equal((await later.await(e.pendingId)).kind, "approved");

  await assert.rejects(approver.decide(e.pendingId, { approve: false, reason: "too late" }), (err: unknown) =>
    err instanceof ConflictError && err.code === "conflict" && err.status === 409 && err.entry?.status === "APPROVED_READY_FOR_EXECUTION");
  await assert.rejects(agent.decide(e.pendingId, { approve: true }), ForbiddenError);
  await assert.rejects(agent.get(pendingId(conv, "no-such-call")), NotFoundError);
  await assert.rejects(agent.submit({ toolName: "", conversationId: conv }), (err: unknown) => err instanceof InvalidError && /toolName/.test(err.message));
  await assert.rejects(agent.await("not a pending id"), NotFoundError);

  // Listing the conversation finds the call, as toolgate holds it.
  const listed = await agent.list({ conversationId: conv });
  assert.deepEqual(listed.map((x) => x.pendingId), [e.pendingId]);
});

test("ids that are not plain tokens name the call as toolgate does, and list follows toolgate's pages", async (t) => {
  const agent = await connectAs(t, "agent");
  const conv = `ts team chat/#${conversation("ids")}`;
  const search = gate("web_search", (args: { q: string }) => ({ hits: [args.q] }), { client: agent, conversationId: conv, timeoutMs: 30_000 });
  for (const id of ["call:1 ü", "x".repeat(256)]) {
    assert.deepEqual(await search({ q: id }, { toolCallId: id }), { hits: [id] });
    const e = await agent.get(pendingId(conv, id));
    assert.equal(e.toolCallId, id);
    assert.equal(e.conversationId, conv);
    assert.equal(e.status, "COMPLETED_SUCCESS");
  }
  assert.match(pendingId(conv, "call:1 ü"), /^=[A-Za-z0-9_-]+\.=[A-Za-z0-9_-]+$/);
  const listed = await agent.list({ conversationId: conv, limit: 1 });
  assert.deepEqual(listed.map((e) => e.toolCallId).sort(), ["call:1 ü", "x".repeat(256)].sort());
});

test("a gate with no timeoutMs waits as long as the call's approval timeout, and gives up the margin after it", async (t) => {
  // The default, from the entry toolgate answers the submit with: the
  // approval timeout (a scheduled call's delay) and the margin waitWithin
  // keeps back from it, so that the wait is exactly the call's own.
  const asked = (status: Entry["status"], fields: Partial<Entry>): Entry =>
    ({ pendingId: "c.x", toolCallId: "x", toolName: "t", toolArguments: {}, callerBotId: "agent", conversationId: "c", requestedAt: 1_000, status, executionAttempts: 0, ...fields });
  assert.equal(defaultTimeoutMs(asked("PENDING_APPROVAL", { approvalTimeoutAt: 301_000 })), 310_000);
  assert.equal(defaultTimeoutMs(asked("PENDING_APPROVAL", { approvalTimeoutAt: 2_500 })), 3_000);
  assert.equal(defaultTimeoutMs(asked("SCHEDULED_FOR_EXECUTION", { scheduledExecutionTime: 61_000 })), 70_000);
  assert.equal(defaultTimeoutMs(asked("SCHEDULED_FOR_EXECUTION", { scheduledExecutionTime: 1_000 })), 20_000, "due at once: the margin's most");
  assert.equal(defaultTimeoutMs(asked("REJECTED_BY_POLICY", {})), 20_000);
  assert.equal(defaultTimeoutMs(), 20_000, "before toolgate answers");
  for (const wait of [1, 1_500, 9_999, 10_000, 300_000]) {
    assert.equal(waitWithin(0, defaultTimeoutMs(asked("PENDING_APPROVAL", { approvalTimeoutAt: 1_000 + wait }))), wait);
  }

  const agent = await connectAs(t, "agent");
  // A call nobody decides ends at its approval deadline (1.5 s in this
  // conversation), not at call time: expired at the deadline, or refused
  // as timed out when toolgate's timer wrote it first.
  const conv = "ts-gate-expiring";
  let ran = 0;
  const sendEmail = gate("send_email", () => ran++, { client: agent, conversationId: conv });
  const began = Date.now();
  const err = await sendEmail({ to: "x@example.com" }, { toolCallId: "default-expiring" }).then(() => assert.fail("undecided call ran"), (e: unknown) => e);
  const waited = Date.now() - began;
  assert.ok((err instanceof NotDecidedError && err.verdict.kind === "expired" && err.verdict.approvalTimeoutMs === 1_500) ||
    (err instanceof RejectedError && err.kind === "timed_out"), String(err));
  assert.ok(waited >= 1_500, `it waited for the deadline: ${waited} ms`);
  assert.equal(ran, 0);

  // One a person approves runs, as with a timeout given.
  const conv2 = conversation("gate-default");
  const transfer = gate("transfer_funds", (args: { amount: number }) => ({ moved: args.amount }), { client: agent, conversationId: conv2 });
  const result = transfer({ amount: 5 }, { toolCallId: "default-1" });
  result.catch(() => undefined); // awaited below, after the approval
  const e = await pendingInToolgate(conv2, "default-1");
  assert.equal((e.approvalTimeoutAt ?? 0) - e.requestedAt, 300_000);
  await toolgate("approve", e.pendingId, "--reason", "fine");
  assert.deepEqual(await result, { moved: 5 });
});
