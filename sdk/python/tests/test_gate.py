"""The toolgate package against a real toolgate.

examples/python/python_test.go starts toolgate with the policy below and
runs these tests with the package installed as a user installs it:

    default:
      requiresApprovalTools: [send_email, transfer_funds, wait_for_nobody]
      approvalTimeoutMs: 300000
      rules: {deny: [delete_everything]}
    conversations:
      py-sdk-expiring: {approvalTimeoutMs: 1000}

The environment names the server (TOOLGATE_URL) and two tokens: an agent's
(TOOLGATE_AGENT_TOKEN, user py-agent) and an approver's
(TOOLGATE_APPROVER_TOKEN, user py-approver). Each test works in a
conversation of its own, whose calls the Go test checks afterwards.
"""

import asyncio
import os
import threading
import unittest

import toolgate
from toolgate.events import GREETING, parse

URL = os.environ["TOOLGATE_URL"]
AGENT = toolgate.Client(URL, os.environ["TOOLGATE_AGENT_TOKEN"], timeout=10)
APPROVER = toolgate.Client(URL, os.environ["TOOLGATE_APPROVER_TOKEN"], timeout=10)

# WAIT bounds every wait for a human in these tests: a loaded machine may be
# slow, a passing run takes far less.
WAIT = 30.0


class Approver:
    """A person deciding the next call of a conversation: it follows the
    conversation's events from before the call is made, and decides the
    call toolgate asks about with the decision given."""

    def __init__(self, conversation_id, approved, reason="", arguments=None, interrupt=False):
        self.decided = None
        self.error = None
        self.stream = APPROVER.open_events(None, WAIT, conversation_id=conversation_id)
        self.events = parse(self.stream, comments=True)
        # The greeting: every event from here on reaches this stream.
        assert next(self.events) is GREETING
        self.thread = threading.Thread(target=self.run, args=(approved, reason, arguments, interrupt), daemon=True)
        self.thread.start()

    def run(self, approved, reason, arguments, interrupt):
        try:
            with self.stream:
                for ev in self.events:
                    if ev.type == "tool.approval_required" and ev.envelope is not None:
                        self.decided = APPROVER.decide(ev.envelope.entry.pending_id, approved, reason, arguments, interrupt=interrupt)
                        return
        except Exception as err:  # reported by join
            self.error = err

    def join(self):
        self.thread.join(WAIT)
        if self.error is not None:
            raise self.error
        return self.decided


def only_call(conversation_id):
    """The one call of a conversation, as the agent reads it now."""
    entries, _ = AGENT.list(conversation_id=conversation_id)
    assert len(entries) == 1, entries
    return AGENT.get(entries[0].pending_id)


class GateTest(unittest.TestCase):
    def test_allowed_call_runs_at_once_and_its_result_is_recorded(self):
        ran = []

        @toolgate.gate(AGENT, conversation_id="py-sdk-allow", wait=WAIT)
        def web_search(query, limit=3):
            ran.append((query, limit))
            return {"hits": ["a", "b"], "query": query}

        self.assertEqual({"hits": ["a", "b"], "query": "toolgate"}, web_search("toolgate"))
        self.assertEqual([("toolgate", 3)], ran)
        e = only_call("py-sdk-allow")
        self.assertEqual("COMPLETED_SUCCESS", e.status)
        self.assertEqual({"query": "toolgate", "limit": 3}, e.tool_arguments)
        self.assertEqual({"hits": ["a", "b"], "query": "toolgate"}, e.result)
        self.assertEqual("", e.approved_or_rejected_by_user_id, "nobody was asked")

    def test_approved_call_runs_with_the_approvers_edited_arguments(self):
        ran = []

        @toolgate.gate(AGENT, conversation_id="py-sdk-edit", wait=WAIT)
        def send_email(to, subject):
            ran.append((to, subject))
            return "sent to %s" % to

        person = Approver("py-sdk-edit", True, "to the team list instead",
                          {"to": "team@example.com", "subject": "weekly report"})
        self.assertEqual("sent to team@example.com", send_email("everyone@example.com", "weekly"))
        self.assertEqual("py-approver", person.join().approved_or_rejected_by_user_id)
        self.assertEqual([("team@example.com", "weekly report")], ran, "it ran once, as edited")
        e = only_call("py-sdk-edit")
        self.assertEqual("COMPLETED_SUCCESS", e.status)
        self.assertEqual({"to": "everyone@example.com", "subject": "weekly"}, e.original_arguments)
        self.assertEqual({"to": "team@example.com", "subject": "weekly report"}, e.tool_arguments)
        self.assertEqual("sent to team@example.com", e.result)
        self.assertEqual("py-approver", e.approved_or_rejected_by_user_id)

    def test_rejected_call_raises_who_and_why_and_does_not_run(self):
        ran = []

        @toolgate.gate(AGENT, conversation_id="py-sdk-reject", wait=WAIT)
        def transfer_funds(amount, currency):
            ran.append(amount)
            return "moved"

        person = Approver("py-sdk-reject", False, "no money moves without a person")
        with self.assertRaises(toolgate.RejectedError) as caught:
            transfer_funds(250, "EUR")
        person.join()
        err = caught.exception
        self.assertEqual(toolgate.REJECTED_BY_USER, err.kind)
        self.assertEqual("py-approver", err.by)
        self.assertEqual("no money moves without a person", err.reason)
        self.assertIn("rejected by py-approver: no money moves without a person", str(err))
        self.assertEqual([], ran)
        self.assertEqual("REJECTED_BY_USER", only_call("py-sdk-reject").status)
        self.assertNotIsInstance(err, toolgate.TurnInterruptedError)

    def test_rejection_that_interrupts_raises_turn_interrupted(self):
        @toolgate.gate(AGENT, conversation_id="py-sdk-interrupt", wait=WAIT)
        def transfer_funds(amount, currency):
            return "moved"

        person = Approver("py-sdk-interrupt", False, "stop and ask me", interrupt=True)
        with self.assertRaises(toolgate.TurnInterruptedError) as caught:
            transfer_funds(900, "EUR")
        person.join()
        err = caught.exception
        self.assertIsInstance(err, toolgate.RejectedError)
        self.assertIn("stop and ask me; stop this turn and hand back to the user", str(err))
        self.assertTrue(only_call("py-sdk-interrupt").interrupt)

    def test_denied_call_raises_the_rule_and_does_not_run(self):
        ran = []

        @toolgate.gate(AGENT, conversation_id="py-sdk-deny", wait=WAIT)
        def delete_everything(path):
            ran.append(path)

        with self.assertRaises(toolgate.RejectedError) as caught:
            delete_everything("/")
        err = caught.exception
        self.assertEqual(toolgate.DENIED_BY_POLICY, err.kind)
        self.assertEqual("policy", err.by)
        self.assertIn("delete_everything", err.rule)
        self.assertEqual([], ran)
        self.assertEqual("REJECTED_BY_POLICY", only_call("py-sdk-deny").status)

    def test_unanswered_call_is_withdrawn_at_the_end_of_the_wait(self):
        ran = []

        @toolgate.gate(AGENT, conversation_id="py-sdk-timeout", wait=0.5)
        def wait_for_nobody():
            ran.append(True)

        with self.assertRaises(toolgate.WaitTimeoutError) as caught:
            wait_for_nobody()
        self.assertIsNone(caught.exception.withdraw_error)
        self.assertEqual([], ran)
        e = only_call("py-sdk-timeout")
        self.assertEqual("CANCELLED_BY_SYSTEM", e.status)
        self.assertEqual("withdrawn: no decision within 0.5s", e.status_reason)

    def test_call_past_its_approval_deadline_is_refused_as_timed_out(self):
        @toolgate.gate(AGENT, conversation_id="py-sdk-expiring", wait=WAIT)
        def send_email(to):
            raise AssertionError("never runs")

        with self.assertRaises(toolgate.RejectedError) as caught:
            send_email("a@example.com")
        self.assertEqual(toolgate.REJECTED_BY_TIMEOUT, caught.exception.kind)
        self.assertEqual("timer", caught.exception.by)

    def test_a_raising_tool_is_recorded_as_failed_and_the_error_raised(self):
        @toolgate.gate(AGENT, conversation_id="py-sdk-fail", wait=WAIT)
        def web_search(query):
            raise ValueError("the search engine is down")

        with self.assertRaises(ValueError):
            web_search("x")
        e = only_call("py-sdk-fail")
        self.assertEqual("COMPLETED_FAILURE", e.status)
        self.assertEqual("ValueError: the search engine is down", e.error)

    def test_the_same_tool_call_id_again_runs_once_and_returns_the_recorded_result(self):
        ran = []

        @toolgate.gate(AGENT, conversation_id="py-sdk-retry", wait=WAIT, tool_call_id=lambda args: "search-" + args["query"])
        def web_search(query):
            ran.append(query)
            return {"n": len(ran)}

        self.assertEqual({"n": 1}, web_search("once"))
        self.assertEqual({"n": 1}, web_search("once"), "the retry answers what the first run recorded")
        self.assertEqual(["once"], ran)

    def test_a_coroutine_function_is_gated_too(self):
        @toolgate.gate(AGENT, conversation_id="py-sdk-async", wait=WAIT)
        async def web_search(query):
            await asyncio.sleep(0)
            return query.upper()

        self.assertEqual("ASYNC", asyncio.run(web_search("async")))
        self.assertEqual("COMPLETED_SUCCESS", only_call("py-sdk-async").status)


class VerdictTest(unittest.TestCase):
    def test_submit_and_wait_says_run_with_the_arguments_to_run(self):
        person = Approver("py-sdk-verdict", True, "fine")
        v = AGENT.submit_and_wait("send_email", {"to": "x@example.com"}, "py-sdk-verdict", wait=WAIT)
        person.join()
        self.assertEqual(toolgate.RUN, v.kind)
        self.assertEqual({"to": "x@example.com"}, v.outcome.arguments)
        self.assertEqual("py-approver", v.outcome.by)
        self.assertEqual("fine", v.outcome.reason)
        AGENT.started(v.pending_id)
        self.assertEqual("COMPLETED_SUCCESS", AGENT.succeeded(v.pending_id, {"ok": True}).status)

    def test_stop_withdraws_the_call(self):
        stop = threading.Event()
        timer = threading.Timer(0.2, stop.set)
        timer.start()
        v = AGENT.submit_and_wait("wait_for_nobody", {}, "py-sdk-stop", wait=WAIT, stop=stop)
        timer.cancel()
        self.assertEqual(toolgate.WITHDRAWN, v.kind)
        self.assertEqual("the caller stopped waiting", v.why)
        e = AGENT.get(v.pending_id)
        self.assertEqual("CANCELLED_BY_SYSTEM", e.status)
        self.assertEqual("withdrawn: the caller stopped waiting", e.status_reason)


class TypedResultsTest(unittest.TestCase):
    def test_answers_are_typed_with_snake_case_names(self):
        self.assertEqual(toolgate.Me(id="py-agent", roles=["agent"], open=False), AGENT.me())
        e = AGENT.submit("send_email", {"to": "a@example.com"}, "py-sdk-typed", "t1", task_id="task-7")
        self.assertIsInstance(e, toolgate.Entry)
        self.assertEqual(toolgate.pending_id("py-sdk-typed", "t1"), e.pending_id)
        self.assertEqual(("t1", "send_email", "py-agent", "task-7"), (e.tool_call_id, e.tool_name, e.caller_bot_id, e.task_id))
        self.assertEqual({"to": "a@example.com"}, e.tool_arguments)
        self.assertEqual(300000, e.approval_timeout_at - e.requested_at)
        decided = APPROVER.decide(e.pending_id, False, "not today")
        self.assertEqual(("REJECTED_BY_USER", "not today"), (decided.status, decided.status_reason))
        self.assertIsInstance(decided.last_transition, toolgate.Transition)
        self.assertEqual(("PENDING_APPROVAL", "REJECTED_BY_USER", "py-approver"),
                         (decided.last_transition.from_, decided.last_transition.to, decided.last_transition.actor))

        history = AGENT.history(e.pending_id)
        self.assertEqual(["", "PENDING_APPROVAL"], [h.from_ for h in history])
        self.assertEqual(["PENDING_APPROVAL", "REJECTED_BY_USER"], [h.to for h in history])
        self.assertLess(history[0].revision, history[1].revision)
        page = AGENT.list_page(conversation_id="py-sdk-typed")
        self.assertIsInstance(page, toolgate.Page)
        self.assertEqual([e.pending_id], [x.pending_id for x in page.items])
        self.assertEqual("", page.next_cursor)
        self.assertGreater(page.events_seq, 0)


class ErrorsTest(unittest.TestCase):
    def test_refusals_are_typed_by_their_code(self):
        with self.assertRaises(toolgate.NotFoundError) as nf:
            AGENT.get("py-sdk-errors.nothing")
        self.assertEqual((404, "not_found"), (nf.exception.status, nf.exception.code))
        with self.assertRaises(toolgate.UnauthorizedError):
            toolgate.Client(URL, "not-a-token-anyone-has").me()
        with self.assertRaises(toolgate.InvalidError) as inv:
            AGENT.submit("web_search", "not an object", "py-sdk-errors")
        self.assertIn("toolArguments", inv.exception.message)

        e = AGENT.submit("send_email", {"to": "a"}, "py-sdk-errors", "c1")
        with self.assertRaises(toolgate.ForbiddenError):
            AGENT.decide(e.pending_id, True, "an agent approves nothing")
        APPROVER.decide(e.pending_id, False, "first")
        with self.assertRaises(toolgate.ConflictError) as conflict:
            APPROVER.decide(e.pending_id, True, "second")
        self.assertIsNotNone(conflict.exception.entry)
        self.assertEqual("py-approver", conflict.exception.entry.approved_or_rejected_by_user_id)
        with self.assertRaises(toolgate.IdempotencyConflictError):
            AGENT.submit("send_email", {"to": "b"}, "py-sdk-errors", "c1")
        with self.assertRaises(toolgate.ConflictError):
            AGENT.started(e.pending_id)

    def test_await_is_bounded(self):
        e = AGENT.submit("wait_for_nobody", {}, "py-sdk-await")
        with self.assertRaises(toolgate.AwaitTimeoutError) as caught:
            AGENT.await_call(e.pending_id, timeout=0.2)
        self.assertEqual("PENDING_APPROVAL", caught.exception.entry.status)
        AGENT.cancel(e.pending_id, "done waiting")

    def test_unreachable(self):
        with self.assertRaises(toolgate.UnreachableError) as caught:
            toolgate.Client("http://127.0.0.1:1", timeout=2).me()
        self.assertFalse(caught.exception.sent)
        v = toolgate.Client("http://127.0.0.1:1", timeout=2).submit_and_wait("web_search", {}, "py-sdk-none", wait=2)
        self.assertEqual(toolgate.UNREACHABLE, v.kind)
        self.assertEqual("", v.pending_id)

    def test_bad_input_is_refused_before_it_is_sent(self):
        with self.assertRaises(ValueError):
            AGENT.submit("web search", {}, "py-sdk-errors")
        with self.assertRaises(ValueError):
            AGENT.submit("web_search", {}, "x" * 300)
        with self.assertRaises(ValueError):
            toolgate.gate(AGENT)
        with self.assertRaises(ValueError):
            AGENT.await_call("a.b", timeout=0)


if __name__ == "__main__":
    unittest.main()
