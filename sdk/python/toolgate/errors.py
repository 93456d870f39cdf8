"""The errors of the toolgate package.

Every error the package raises is a ToolgateError. A refusal from the HTTP
API is an APIError, of the subclass its error body's code names (the codes
of wire.ErrorStatus and of the HTTP API's own: docs/http-api.md), so that
`except toolgate.ConflictError` reads as the Go client's
`errors.Is(err, machine.ErrConflict)`. A call that will not run is a
RejectedError, one that ran and failed an ExecutionError: errors, never
results, so that a refusal cannot be passed on as if the tool had run.
"""

from __future__ import annotations

import datetime
from typing import Dict, Optional, Type

from .model import (
    CANCELLED_BY_SYSTEM,
    REJECTED_BY_POLICY,
    REJECTED_BY_TIMEOUT as STATE_REJECTED_BY_TIMEOUT,
    REJECTED_BY_USER as STATE_REJECTED_BY_USER,
    Entry,
)


class ToolgateError(Exception):
    """Every error of this package."""


class UnreachableError(ToolgateError):
    """Nothing answered: toolgate could not be reached at url (a refused
    connection, a name that does not resolve, no answer within the
    request's timeout). sent says whether the request may have reached
    toolgate before its answer was lost (a timeout after sending): a
    submit that may have landed is withdrawn by its tool call id."""

    def __init__(self, url: str, why: str, sent: bool = False) -> None:
        super().__init__("toolgate is not reachable at %s: %s" % (url, why))
        self.url = url
        self.why = why
        self.sent = sent


class APIError(ToolgateError):
    """A refusal from the HTTP API: its status and its error body's code,
    message and (on a 409) the entry as it is now."""

    def __init__(self, status: int, code: str, message: str, entry: Optional[Entry] = None) -> None:
        super().__init__("%d %s: %s" % (status, code or "?", message))
        self.status = status
        self.code = code
        self.message = message
        self.entry = entry


class InvalidError(APIError):
    """400 invalid: the request is malformed; the message names the field."""


class UnauthorizedError(APIError):
    """401 unauthorized: no token, or one toolgate does not know."""


class ForbiddenError(APIError):
    """403 forbidden: the token's role or the call's policy does not allow it."""


class EditDeniedError(ForbiddenError):
    """403 edit_denied: edited arguments a rule forbids."""


class NotFoundError(APIError):
    """404 not_found: no such call (or no such route)."""


class MethodNotAllowedError(APIError):
    """405 method_not_allowed."""


class ConflictError(APIError):
    """409 conflict: the call is not in a state that allows it (decided
    first by someone else, claimed, finished); .entry is the call now."""


class ExpiredError(ConflictError):
    """409 expired: the approval deadline has passed."""


class IdempotencyConflictError(ConflictError):
    """409 idempotency_conflict: the toolCallId was used in the
    conversation for another caller, tool or arguments."""


class StorageFullError(APIError):
    """507 storage_full: toolgate's store has no room for the write, and
    nothing of it was stored; the message says how to make room. Asking
    again helps only once there is room."""


class TooLargeError(APIError):
    """413 too_large: the request body is over the API's bound."""


class UnsupportedMediaTypeError(APIError):
    """415 unsupported_media_type."""


class MisdirectedRequestError(APIError):
    """421 misdirected_request: the host is not one of --allowed-hosts."""


class InternalError(APIError):
    """500 internal (and any 5xx): toolgate failed; trying again may work."""


# The error body's codes, and the class each is raised as.
ERRORS_BY_CODE: Dict[str, Type[APIError]] = {
    "invalid": InvalidError,
    "unauthorized": UnauthorizedError,
    "forbidden": ForbiddenError,
    "edit_denied": EditDeniedError,
    "not_found": NotFoundError,
    "method_not_allowed": MethodNotAllowedError,
    "conflict": ConflictError,
    "expired": ExpiredError,
    "idempotency_conflict": IdempotencyConflictError,
    "storage_full": StorageFullError,
    "too_large": TooLargeError,
    "unsupported_media_type": UnsupportedMediaTypeError,
    "misdirected_request": MisdirectedRequestError,
    "internal": InternalError,
}


def api_error(status: int, code: str, message: str, entry: Optional[Entry] = None) -> APIError:
    """The APIError for a refusal: the class of its code, else of its
    status (a 5xx is an InternalError), else APIError itself."""
    cls = ERRORS_BY_CODE.get(code)
    if cls is None:
        cls = InternalError if status >= 500 else APIError
    return cls(status, code, message, entry)


# How a call is refused, one per state it ends in (client.Rejection).
REJECTED_BY_USER = "rejected"  # REJECTED_BY_USER: a human said no
REJECTED_BY_TIMEOUT = "timed_out"  # REJECTED_BY_TIMEOUT: nobody answered in time
CANCELLED = "cancelled"  # CANCELLED_BY_SYSTEM: cancelled before it ran
DENIED_BY_POLICY = "denied"  # REJECTED_BY_POLICY: a policy rule forbids it

REJECTIONS = {
    STATE_REJECTED_BY_USER: REJECTED_BY_USER,
    STATE_REJECTED_BY_TIMEOUT: REJECTED_BY_TIMEOUT,
    CANCELLED_BY_SYSTEM: CANCELLED,
    REJECTED_BY_POLICY: DENIED_BY_POLICY,
}


class RejectedError(ToolgateError):
    """A call that will not run: kind (rejected, timed_out, cancelled,
    denied), by (the user who rejected or cancelled it, "timer", "policy"),
    reason (as they said it), rule (the policy rule that denied it, for
    denied) and entry (the call as it was refused)."""

    def __init__(self, kind: str, by: str, reason: str, entry: Entry, rule: str = "") -> None:
        self.kind = kind
        self.by = by
        self.reason = reason
        self.rule = rule
        self.entry = entry
        super().__init__(self._describe())

    @property
    def pending_id(self) -> str:
        """The call's pendingId."""
        return self.entry.pending_id

    def _describe(self) -> str:
        head = "tool call %s (%s) " % (self.entry.pending_id or "?", self.entry.tool_name or "?")
        if self.kind == REJECTED_BY_USER:
            text = head + "rejected by " + (self.by or "?")
        elif self.kind == REJECTED_BY_TIMEOUT:
            text = head + "timed out: nobody decided"
            at = self.entry.approval_timeout_at
            if at:
                when = datetime.datetime.fromtimestamp(at / 1000, datetime.timezone.utc)
                text += " by " + when.strftime("%Y-%m-%dT%H:%M:%SZ")
            return text
        elif self.kind == CANCELLED:
            text = head + "cancelled" + (" by " + self.by if self.by else "")
        elif self.kind == DENIED_BY_POLICY:
            return head + "denied by policy: " + self.rule
        else:
            text = head + self.kind
        if self.reason:
            text += ": " + self.reason
        return text

    @staticmethod
    def from_entry(entry: Entry) -> Optional[RejectedError]:
        """The RejectedError of an entry in a refusing state (a
        TurnInterruptedError when its rejection stops the turn), or None."""
        kind = REJECTIONS.get(entry.status)
        if kind is None:
            return None
        reason = entry.status_reason
        by = entry.last_transition.actor if entry.last_transition is not None else ""
        rule = ""
        if kind == REJECTED_BY_USER:
            by = entry.approved_or_rejected_by_user_id or by
        elif kind == DENIED_BY_POLICY:
            by, rule = "policy", reason
        cls = TurnInterruptedError if entry.interrupt else RejectedError
        return cls(kind, by, reason, entry, rule)


class TurnInterruptedError(RejectedError):
    """A rejection that also asks the agent to stop its turn (a human's
    reject --interrupt): stop, and hand back to the user, rather than go
    on to other calls. It is a RejectedError too."""

    def _describe(self) -> str:
        return super()._describe() + "; stop this turn and hand back to the user"


class ExecutionError(ToolgateError):
    """A call that ran and failed (COMPLETED_FAILURE): the tool's error as
    reported, and what the run cost. Not a refusal: the call was allowed."""

    def __init__(self, message: str, entry: Entry, cost: float = 0.0) -> None:
        self.message = message
        self.cost = cost
        self.entry = entry
        super().__init__("tool call %s (%s) failed: %s" % (
            entry.pending_id or "?", entry.tool_name or "?", message or "no error message reported"))


class WaitTimeoutError(ToolgateError):
    """Nobody decided within the wait. The call was withdrawn
    (CANCELLED_BY_SYSTEM, "withdrawn: " and why) unless withdraw_error is
    set: then withdrawing it failed, and it may still be pending."""

    def __init__(self, pending_id: str, why: str, withdraw_error: Optional[Exception] = None) -> None:
        text = "tool call %s withdrawn: %s" % (pending_id, why)
        if withdraw_error is not None:
            text = "tool call %s: %s, and withdrawing it failed (it may still be pending): %s" % (pending_id, why, withdraw_error)
        super().__init__(text)
        self.pending_id = pending_id
        self.why = why
        self.withdraw_error = withdraw_error


class WithdrawnError(WaitTimeoutError):
    """The caller stopped waiting (its stop event was set) and the call was
    withdrawn, as at WaitTimeoutError."""


class AwaitTimeoutError(ToolgateError, TimeoutError):
    """Client.await_call's timeout passed before the call reached a state
    the caller acts on; .entry is the call as last read (None if never)."""

    def __init__(self, pending_id: str, timeout: float, entry: Optional[Entry] = None) -> None:
        state = "still " + (entry.status or "?") if entry is not None else "not read yet"
        super().__init__("await %s (%s): no answer within %gs" % (pending_id, state, timeout))
        self.pending_id = pending_id
        self.timeout = timeout
        self.entry = entry


class AwaitStoppedError(ToolgateError):
    """Client.await_call's stop event was set before the call reached a
    state the caller acts on; .entry is the call as last read."""

    def __init__(self, pending_id: str, entry: Optional[Entry] = None) -> None:
        state = "still " + (entry.status or "?") if entry is not None else "not read yet"
        super().__init__("await %s (%s): stopped" % (pending_id, state))
        self.pending_id = pending_id
        self.entry = entry
