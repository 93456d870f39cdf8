"""submit_and_wait: submit a call and wait for its verdict within a bound,
as the Go client's SubmitAndWait does.

What ends the wait is fixed in advance, from the entry toolgate recorded:

- When the call's approval timeout is at most the wait and its policy
  rejects unanswered calls then (autoRejectOnTimeout), the deadline
  decides: the wait lasts until it, and the verdict is EXPIRED, whether or
  not toolgate's timer has recorded it yet (toolgate takes no decision
  from the deadline on).
- Otherwise the wait decides: at its end the call is withdrawn
  (CANCELLED_BY_SYSTEM, "withdrawn: no decision within <wait>"), and the
  verdict is TIMED_OUT.

A decision that lands while the call is being withdrawn stands, and is the
verdict. It never fails open: only RUN lets the call run.
"""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass
from typing import Callable, Optional, Protocol

from ._checks import check_timeout
from .errors import (
    APIError,
    AwaitStoppedError,
    AwaitTimeoutError,
    ConflictError,
    ExecutionError,
    InternalError,
    NotFoundError,
    RejectedError,
    UnreachableError,
)
from .model import JSON, PENDING_APPROVAL, Entry
from .names import pending_id
from .outcome import EXECUTED, Outcome, answer

# The kinds of Verdict (client.VerdictKind).
RUN = "run"  # toolgate let the call run: .outcome holds the arguments (started first)
REFUSED = "refused"  # it will not run: .error is the RejectedError saying who and why
EXPIRED = "expired"  # nobody decided by its approval deadline, and its policy rejects it then
RAN_ELSEWHERE = "ran_elsewhere"  # it ran, not here: .outcome (succeeded) or .error (an ExecutionError)
TIMED_OUT = "timed_out"  # nobody decided within the wait: withdrawn (see .why, .error)
WITHDRAWN = "withdrawn"  # the caller stopped waiting: withdrawn (see .why, .error)
UNREACHABLE = "unreachable"  # toolgate could not be asked, or refused the request: .error

# WITHDRAW_TIMEOUT bounds withdrawing a call, or reading a decision that
# came first, after the wait: in seconds.
WITHDRAW_TIMEOUT = 5.0


class Waiter(Protocol):
    """What submit_and_wait needs of toolgate: a Client has it."""

    @property
    def timeout(self) -> float: ...

    def submit(self, tool_name: str, arguments: Optional[JSON], conversation_id: Optional[str],
               tool_call_id: Optional[str], *, team: Optional[str], task_id: Optional[str],
               estimated_cost: Optional[float], permission_mode: Optional[str], timeout: Optional[float]) -> Entry: ...

    def get(self, pending_id: str, *, timeout: Optional[float]) -> Entry: ...

    def await_call(self, pending_id: str, *, timeout: float, stop: Optional[threading.Event] = None) -> Outcome: ...

    def cancel(self, pending_id: str, reason: Optional[str], *, timeout: Optional[float]) -> Entry: ...


@dataclass(repr=False)
class Verdict:
    """What became of a call submit_and_wait submitted and waited for.

    kind is one of RUN, REFUSED, EXPIRED, RAN_ELSEWHERE, TIMED_OUT,
    WITHDRAWN, UNREACHABLE. pending_id is the call's ("" when no call is
    known to be recorded: the submit failed). outcome is what toolgate let
    run (RUN) or how the call ran (RAN_ELSEWHERE). error is the
    RejectedError of REFUSED, the ExecutionError of a call that ran
    elsewhere and failed, why toolgate could not be asked (UNREACHABLE), or
    why withdrawing the call failed (TIMED_OUT, WITHDRAWN). why is why the
    call was withdrawn. entry is the call as submitted and
    approval_timeout how long it waited for a human, in seconds (EXPIRED).
    """

    kind: str
    pending_id: str = ""
    outcome: Optional[Outcome] = None
    error: Optional[Exception] = None
    why: str = ""
    entry: Optional[Entry] = None
    approval_timeout: float = 0.0

    @property
    def runnable(self) -> bool:
        """Whether the caller may run the call now (RUN)."""
        return self.kind == RUN

    def __repr__(self) -> str:
        return "Verdict(kind=%r, pending_id=%r, why=%r, error=%r)" % (self.kind, self.pending_id, self.why, self.error)


def submit_and_wait(client: Waiter, tool_name: str, arguments: Optional[JSON] = None,
                    conversation_id: Optional[str] = None, tool_call_id: Optional[str] = None, wait: float = 60.0,
                    team: Optional[str] = None, task_id: Optional[str] = None, estimated_cost: Optional[float] = None,
                    permission_mode: Optional[str] = None, stop: Optional[threading.Event] = None,
                    on_pending: Optional[Callable[[Entry], None]] = None,
                    withdraw_timeout: float = WITHDRAW_TIMEOUT) -> Verdict:
    """Submits the call through client and waits for its verdict within wait
    seconds; returns a Verdict (see the module's documentation for what
    ends the wait). tool_call_id names the call in its conversation (a
    fresh one when None): a submit whose answer is lost is withdrawn by
    it, and the same id again answers the same call. stop, a
    threading.Event, ends the wait early: the call is withdrawn
    (WITHDRAWN). on_pending(entry) is called once the call waits for a
    human. Withdrawing, or reading a decision that came first, takes at
    most withdraw_timeout seconds more."""
    wait = check_timeout("wait", wait)
    spare = check_timeout("withdraw_timeout", withdraw_timeout)
    asked = time.monotonic()
    deadline = asked + wait
    if tool_call_id is None:
        tool_call_id = "py_" + uuid.uuid4().hex
    pid = pending_id(conversation_id or "", tool_call_id)
    wait_over = "no decision within %gs" % wait

    def left() -> float:
        return max(0.05, deadline - time.monotonic())

    try:
        entry = client.submit(tool_name, arguments, conversation_id, tool_call_id, team=team, task_id=task_id,
                              estimated_cost=estimated_cost, permission_mode=permission_mode,
                              timeout=min(client.timeout, left()))
    except UnreachableError as err:
        if not err.sent:
            # Nothing answered the submit: no call was recorded to withdraw.
            return Verdict(UNREACHABLE, error=err)
        # The submit may have landed just the same: withdraw what it made.
        return _withdraw(client, pid, TIMED_OUT, wait_over, spare)
    except APIError as err:
        return Verdict(UNREACHABLE, error=err)
    pid = entry.pending_id

    until, deadline_decides = deadline, False
    if entry.status == PENDING_APPROVAL:
        if on_pending is not None:
            on_pending(entry)
        if entry.auto_reject_on_timeout and entry.approval_timeout_at:
            # Both stamps are toolgate's: the approval timeout is measured
            # on one clock, and counted from after the submit returned, so
            # the caller's deadline is not before toolgate's.
            t = _approval_timeout(entry)
            d = time.monotonic() + t
            if t <= wait and d <= deadline + spare:
                until, deadline_decides = d, True

    outcome, answered, _ = answer(entry)
    if outcome is not None or answered is not None:
        return _decided(pid, outcome, answered)
    try:
        outcome = client.await_call(pid, timeout=max(0.001, until - time.monotonic()), stop=stop)
        return _decided(pid, outcome, None)
    except (RejectedError, ExecutionError) as err:
        return _decided(pid, None, err)
    except AwaitStoppedError:
        return _withdraw(client, pid, WITHDRAWN, "the caller stopped waiting", spare)
    except AwaitTimeoutError:
        if deadline_decides:
            return _expired(client, entry, spare)
        return _withdraw(client, pid, TIMED_OUT, wait_over, spare)
    except (UnreachableError, APIError) as err:
        return Verdict(UNREACHABLE, pid, error=err)


def _approval_timeout(entry: Entry) -> float:
    """How long entry waits for a human's decision, in seconds."""
    return (entry.approval_timeout_at - entry.requested_at) / 1000.0


def _decided(pid: str, outcome: Optional[Outcome], err: Optional[Exception]) -> Verdict:
    """The verdict of an answer (an outcome, or the RejectedError or
    ExecutionError it raised): a decision, or a run."""
    if isinstance(err, RejectedError):
        return Verdict(REFUSED, pid, error=err, entry=err.entry)
    if isinstance(err, ExecutionError):
        return Verdict(RAN_ELSEWHERE, pid, error=err, entry=err.entry)
    assert outcome is not None, "an answer is an outcome or an error"
    if outcome.runnable:
        return Verdict(RUN, pid, outcome=outcome, entry=outcome.entry)
    # Executed, or a kind this package does not know: not to run.
    return Verdict(RAN_ELSEWHERE, pid, outcome=outcome, entry=outcome.entry)


def _withdraw(client: Waiter, pid: str, kind: str, why: str, spare: float) -> Verdict:
    """Cancels the call pid, saying why, and answers kind; a decision that
    landed first stands, and is the verdict."""
    try:
        client.cancel(pid, "withdrawn: " + why, timeout=spare)
        return Verdict(kind, pid, why=why)
    except NotFoundError:
        # The submit never landed.
        return Verdict(kind, pid, why=why)
    except ConflictError:
        # Decided (or denied by policy, or claimed) just as it was withdrawn.
        try:
            outcome = client.await_call(pid, timeout=spare)
            return _decided(pid, outcome, None)
        except (RejectedError, ExecutionError) as err:
            return _decided(pid, None, err)
        except (UnreachableError, APIError, AwaitTimeoutError) as err:
            return Verdict(UNREACHABLE, pid, why=why, error=err)
    except (UnreachableError, InternalError, APIError) as err:
        # The call may still be pending in toolgate, and be decided later.
        return Verdict(kind, pid, why=why, error=err)


def _expired(client: Waiter, entry: Entry, spare: float) -> Verdict:
    """The verdict of a call whose approval deadline passed while the caller
    waited, under a policy that rejects unanswered calls then: toolgate
    refuses any decision from the deadline on, so what the entry says now
    is final, and a call still pending is refused whether or not the timer
    has written it yet."""
    pid = entry.pending_id
    v = Verdict(EXPIRED, pid, entry=entry, approval_timeout=_approval_timeout(entry))
    try:
        cur = client.get(pid, timeout=spare)
    except (UnreachableError, APIError):
        return v
    if cur.status == PENDING_APPROVAL:
        return v
    # Decided before the deadline: that decision stands. A run that failed,
    # or an answer that cannot be read, leaves it refused.
    outcome, err, _ = answer(cur)
    if isinstance(err, RejectedError):
        return _decided(pid, None, err)
    if outcome is not None and (outcome.runnable or outcome.kind == EXECUTED):
        return _decided(pid, outcome, None)
    return v
