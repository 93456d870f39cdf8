"""What toolgate's HTTP API and event stream carry, as typed values.

Each class is one object of the contract (docs/http-api.md,
docs/events.md), its fields named in snake_case: the wire's
approvedOrRejectedByUserId is approved_or_rejected_by_user_id. A field
the wire leaves out holds its zero value ("", 0, False, [], None). Times
are epoch milliseconds. _wire.py reads the wire's JSON into these, and is
the only code that knows the wire's names.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

# JSON is any JSON value: tool arguments and results are what the agent
# and the tool make of them.
JSON = Any

# The states of a call (machine.State).
PENDING_APPROVAL = "PENDING_APPROVAL"
SCHEDULED_FOR_EXECUTION = "SCHEDULED_FOR_EXECUTION"
APPROVED_READY_FOR_EXECUTION = "APPROVED_READY_FOR_EXECUTION"
EXECUTING = "EXECUTING"
COMPLETED_SUCCESS = "COMPLETED_SUCCESS"
COMPLETED_FAILURE = "COMPLETED_FAILURE"
REJECTED_BY_USER = "REJECTED_BY_USER"
REJECTED_BY_TIMEOUT = "REJECTED_BY_TIMEOUT"
REJECTED_BY_POLICY = "REJECTED_BY_POLICY"
CANCELLED_BY_SYSTEM = "CANCELLED_BY_SYSTEM"


@dataclass
class Edit:
    """What an approver changed of a call's arguments: the arguments'
    digests before (from_) and after (to), and the top-level arguments
    that differ."""

    from_: str = ""
    to: str = ""
    changed: List[str] = field(default_factory=list)


@dataclass
class Identity:
    """Who a person is at the OpenID provider that signed them in: the
    provider (iss) and its subject identifier (sub), with the name and
    email it gave (docs/approvers.md)."""

    iss: str = ""
    sub: str = ""
    name: str = ""
    email: str = ""


@dataclass
class Transition:
    """One move of a call: the event, from_ (the state it left) and to,
    who made it (actor) and why, and on a decision what decided it
    (decided_by: rule, grant, policy, human, quorum, timeout, ...)."""

    event: str = ""
    from_: str = ""
    to: str = ""
    actor: str = ""
    reason: str = ""
    decided_by: str = ""
    at: int = 0
    edit: Optional[Edit] = None
    interrupt: bool = False
    write: str = ""
    identity: Optional[Identity] = None
    via_group: str = ""


@dataclass
class HistoryItem(Transition):
    """A transition as Client.history lists it, with the revision of the
    call it wrote."""

    revision: int = 0


@dataclass
class Lease:
    """An executor's claim on a running call, until expires_at."""

    holder: str = ""
    expires_at: int = 0


@dataclass
class Quorum:
    """How many distinct approvals a call needs (policy quorum), of whom,
    and when rejections end it (reject_when: any, majority)."""

    required: int = 0
    of: List[str] = field(default_factory=list)
    reject_when: str = ""


@dataclass
class Vote:
    """One approver's say on a call under a quorum."""

    by: str = ""
    approve: bool = False
    at: int = 0
    reason: str = ""
    via_group: str = ""


@dataclass
class Escalation:
    """An escalation tier: at its time, if nobody decided, its users (to)
    may decide too."""

    at: int = 0
    to: List[str] = field(default_factory=list)


@dataclass
class Review:
    """What an automated reviewer (by: reviewer:<name>) said of a call it
    left to humans: answer escalate (leaning approve or reject), or an
    approve refused (refused says why)."""

    by: str = ""
    answer: str = ""
    lean: str = ""
    reason: str = ""
    refused: str = ""
    at: int = 0


@dataclass
class Receipt:
    """A signed record of one transition (docs/receipts.md)."""

    seq: int = 0
    pending_id: str = ""
    tool_name: str = ""
    caller: str = ""
    event: str = ""
    from_: str = ""
    to: str = ""
    actor: str = ""
    at: int = 0
    reason: str = ""
    decided_by: str = ""
    scope: str = ""
    arguments_digest: str = ""
    result_digest: str = ""
    prev: str = ""
    key: str = ""
    sig: str = ""
    vote: str = ""
    identity: Optional[Identity] = None
    via_group: str = ""


@dataclass
class Entry:
    """One tool call and everything that has happened to it.

    tool_arguments are what runs: an approver's edit when there was one,
    the agent's own (original_arguments) then kept beside it. status is
    one of the states above, status_reason why it is there. The
    approval's deadline is approval_timeout_at, and who decided
    approved_or_rejected_by_user_id (at decision_time). result, error and
    cost are how a run ended; outcome_unknown, that its executor was lost
    while the tool may have run, which only a person runs again.
    """

    pending_id: str = ""
    tool_call_id: str = ""
    tool_name: str = ""
    tool_arguments: Dict[str, JSON] = field(default_factory=dict)
    original_arguments: Optional[Dict[str, JSON]] = None
    secrets_masked: bool = False
    arguments_digest: str = ""
    risk: str = ""
    policy_revision: int = 0
    caller_bot_id: str = ""
    conversation_id: str = ""
    requested_at: int = 0
    status: str = ""
    status_reason: str = ""
    execution_attempts: int = 0
    last_attempt_time: int = 0
    scheduled_execution_time: int = 0
    approval_timeout_at: int = 0
    reminder_at: int = 0
    reminded: bool = False
    overdue: bool = False
    auto_reject_on_timeout: bool = False
    user_id_to_approve: str = ""
    approvers: List[str] = field(default_factory=list)
    quorum: Optional[Quorum] = None
    votes: List[Vote] = field(default_factory=list)
    escalations: List[Escalation] = field(default_factory=list)
    escalated: int = 0
    approved_or_rejected_by_user_id: str = ""
    decider_identity: Optional[Identity] = None
    decider_via_group: str = ""
    decision_time: int = 0
    decided_by: str = ""
    decision_scope: str = ""
    result: JSON = None
    error: str = ""
    cost: float = 0.0
    team: str = ""
    task_id: str = ""
    estimated_cost: float = 0.0
    currency: str = ""
    over_cost_limit: bool = False
    permission_mode: str = ""
    description: str = ""
    max_execution_attempts: int = 0
    idempotent: bool = False
    outcome_unknown: bool = False
    rerun_of: str = ""
    cost_reserved: float = 0.0
    cost_day: str = ""
    lease: Optional[Lease] = None
    receipts: List[Receipt] = field(default_factory=list)
    last_transition: Optional[Transition] = None
    prior_transition: Optional[Transition] = None
    on_timeout: str = ""
    respondable: bool = False
    not_editable: bool = False
    responded_by: str = ""
    interrupt: bool = False
    reviews: List[Review] = field(default_factory=list)


@dataclass
class Envelope:
    """The envelope published for every transition (docs/events.md): its
    schema version v, id (the same for a replay of it), type (the
    subject), the transition (event, from_, to, actor, reason,
    decided_by, at), the call's revision and the call as it wrote it."""

    v: int = 0
    id: str = ""
    type: str = ""
    event: str = ""
    from_: str = ""
    to: str = ""
    actor: str = ""
    reason: str = ""
    decided_by: str = ""
    interrupt: bool = False
    at: int = 0
    revision: int = 0
    receipt: Optional[Receipt] = None
    entry: Entry = field(default_factory=Entry)


@dataclass
class Me:
    """Who a token says its caller is: id, roles, and open (toolgate
    serves without tokens)."""

    id: str = ""
    roles: List[str] = field(default_factory=list)
    open: bool = False


@dataclass
class Page:
    """One page of Client.list_page: the calls, the cursor of the next
    page ("" after the last), and the event stream's position read before
    the page (following the stream after it misses nothing)."""

    items: List[Entry] = field(default_factory=list)
    next_cursor: str = ""
    events_seq: int = 0
