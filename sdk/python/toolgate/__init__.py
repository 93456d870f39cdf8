"""toolgate: a client of toolgate's HTTP API, Python standard library only.

    import toolgate

    client = toolgate.Client("http://127.0.0.1:8080", token="...")

    @toolgate.gate(client, conversation_id="support-42", wait=120)
    def send_email(to, subject):
        ...

Client submits, reads, lists, awaits, decides and cancels calls, and
reports on the calls its caller runs; submit_and_wait returns a Verdict;
gate wraps a function so that it runs only when toolgate lets it. What
toolgate answers is typed, with snake_case names (model.py: Entry, ...),
and so are errors (errors.py). docs/sdk-python.md is the guide.
"""

from .client import (
    DEFAULT_AWAIT,
    DEFAULT_TIMEOUT,
    Client,
)
from .decorator import (
    ReportError,
    gate,
)
from .errors import (
    CANCELLED,
    DENIED_BY_POLICY,
    REJECTED_BY_TIMEOUT,
    REJECTED_BY_USER,
    APIError,
    AwaitStoppedError,
    AwaitTimeoutError,
    ConflictError,
    EditDeniedError,
    ExecutionError,
    ExpiredError,
    ForbiddenError,
    IdempotencyConflictError,
    InternalError,
    InvalidError,
    MethodNotAllowedError,
    MisdirectedRequestError,
    NotFoundError,
    RejectedError,
    StorageFullError,
    TooLargeError,
    ToolgateError,
    TurnInterruptedError,
    UnauthorizedError,
    UnreachableError,
    UnsupportedMediaTypeError,
    WaitTimeoutError,
    WithdrawnError,
)
from .events import (
    DEFAULT_IDLE_TIMEOUT,
    GREETING,
    TERMINAL_STATES,
    Event,
    EventStream,
    FatalStreamError,
    Seen,
    follow,
    parse,
)
from .model import (
    Edit,
    Entry,
    Envelope,
    Escalation,
    Identity,
    HistoryItem,
    Lease,
    Me,
    Page,
    Quorum,
    Receipt,
    Review,
    Transition,
    Vote,
)
from .names import (
    key_token,
    pending_id,
)
from .outcome import (
    APPROVED,
    EXECUTED,
    FAILED,
    SCHEDULED,
    Outcome,
    answer,
)
from .verdict import (
    EXPIRED,
    RAN_ELSEWHERE,
    REFUSED,
    RUN,
    TIMED_OUT,
    UNREACHABLE,
    WITHDRAWN,
    Verdict,
    submit_and_wait,
)
from ._wire import (
    SCHEMA_VERSION,
)

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_AWAIT",
    "DEFAULT_TIMEOUT",
    "Client",
    "ReportError",
    "gate",
    "CANCELLED",
    "DENIED_BY_POLICY",
    "REJECTED_BY_TIMEOUT",
    "REJECTED_BY_USER",
    "APIError",
    "AwaitStoppedError",
    "AwaitTimeoutError",
    "ConflictError",
    "EditDeniedError",
    "ExecutionError",
    "ExpiredError",
    "ForbiddenError",
    "IdempotencyConflictError",
    "InternalError",
    "InvalidError",
    "MethodNotAllowedError",
    "MisdirectedRequestError",
    "NotFoundError",
    "RejectedError",
    "StorageFullError",
    "TooLargeError",
    "ToolgateError",
    "TurnInterruptedError",
    "UnauthorizedError",
    "UnreachableError",
    "UnsupportedMediaTypeError",
    "WaitTimeoutError",
    "WithdrawnError",
    "DEFAULT_IDLE_TIMEOUT",
    "GREETING",
    "TERMINAL_STATES",
    "Event",
    "EventStream",
    "FatalStreamError",
    "Seen",
    "follow",
    "parse",
    "Edit",
    "Entry",
    "Envelope",
    "Escalation",
    "Identity",
    "HistoryItem",
    "Lease",
    "Me",
    "Page",
    "Quorum",
    "Receipt",
    "Review",
    "Transition",
    "Vote",
    "key_token",
    "pending_id",
    "APPROVED",
    "EXECUTED",
    "FAILED",
    "SCHEDULED",
    "Outcome",
    "answer",
    "EXPIRED",
    "RAN_ELSEWHERE",
    "REFUSED",
    "RUN",
    "TIMED_OUT",
    "UNREACHABLE",
    "WITHDRAWN",
    "Verdict",
    "submit_and_wait",
    "SCHEMA_VERSION",
]
