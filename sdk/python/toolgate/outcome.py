"""What a call that was not refused says to a caller waiting on it: an
Outcome, and answer, the rule that reads one from the call's entry
(client's answer)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Dict, Optional, Tuple, Union

from .errors import ExecutionError, RejectedError
from .model import (
    APPROVED_READY_FOR_EXECUTION,
    COMPLETED_FAILURE,
    COMPLETED_SUCCESS,
    JSON,
    SCHEDULED_FOR_EXECUTION,
    Entry,
)

# The kinds of Outcome (client.Kind).
APPROVED = "approved"  # a human approved the call: run it (started first)
SCHEDULED = "scheduled"  # nobody had to approve it and it is due: run it
EXECUTED = "executed"  # it ran and succeeded; result and cost say how
FAILED = "failed"  # it ran and failed (raised as an ExecutionError)


@dataclass(repr=False)
class Outcome:
    """What became of a call that was not refused: kind approved or
    scheduled (run it now, with arguments), or executed (it ran: result,
    cost); entry is the call as last read."""

    kind: str
    entry: Entry

    @property
    def pending_id(self) -> str:
        """The call's pendingId."""
        return self.entry.pending_id

    @property
    def arguments(self) -> Dict[str, JSON]:
        """What to run: the approver's arguments when they edited the
        agent's (edited is then True), else the agent's own."""
        return self.entry.tool_arguments

    @property
    def edited(self) -> bool:
        """Whether an approver edited the agent's arguments."""
        return bool(self.entry.original_arguments)

    @property
    def by(self) -> str:
        """Who let the call run: the approver, or "policy"."""
        if self.kind == SCHEDULED:
            return "policy"
        return self.entry.approved_or_rejected_by_user_id or "policy"

    @property
    def reason(self) -> str:
        """Why it may run, as its decider said."""
        return self.entry.status_reason

    @property
    def scope(self) -> str:
        """How far a human's approval reaches (once, task, session, always)."""
        return self.entry.decision_scope

    @property
    def result(self) -> JSON:
        """What the run returned (executed)."""
        return self.entry.result

    @property
    def cost(self) -> float:
        """What the run cost (executed)."""
        return self.entry.cost

    @property
    def runnable(self) -> bool:
        """Whether the caller should run the tool now (started first)."""
        return self.kind in (APPROVED, SCHEDULED)

    def __repr__(self) -> str:
        return "Outcome(kind=%r, pending_id=%r, by=%r, edited=%r)" % (self.kind, self.pending_id, self.by, self.edited)


Answer = Tuple[Optional[Outcome], Optional[Union[RejectedError, ExecutionError]], Optional[int]]


def answer(entry: Entry, until_finished: bool = False, now_ms: Optional[int] = None) -> Answer:
    """What an entry says to a caller waiting on it (client's answer):
    (outcome, error, wake_ms). An outcome or an error is the answer; with
    neither, wait for the next change, or (wake_ms) until a scheduled call
    is due."""
    rejected = RejectedError.from_entry(entry)
    if rejected is not None:
        return None, rejected, None
    if entry.status == COMPLETED_SUCCESS:
        return Outcome(EXECUTED, entry), None, None
    if entry.status == COMPLETED_FAILURE:
        return None, ExecutionError(entry.error, entry, entry.cost), None
    if until_finished:
        return None, None, None
    if entry.status == APPROVED_READY_FOR_EXECUTION:
        return Outcome(APPROVED, entry), None, None
    if entry.status == SCHEDULED_FOR_EXECUTION:
        due = entry.scheduled_execution_time
        now_ms = now_ms if now_ms is not None else int(time.time() * 1000)
        if now_ms < due:
            return None, None, due
        return Outcome(SCHEDULED, entry), None, None
    # Pending approval, or running: the answer is still to come.
    return None, None, None
