"""toolgate: a client of toolgate's HTTP API, Python standard library only.

    import toolgate

    client = toolgate.Client("http://127.0.0.1:8080", token="...")

    @toolgate.gate(client, conversation_id="support-42", wait=120)
    def send_email(to, subject):
        ...

Client submits, reads, lists, awaits, decides and cancels calls, and
reports on the calls its caller runs; submit_and_wait returns a Verdict;
gate wraps a function so that it runs only when toolgate lets it. Errors
are typed (errors.py). docs/sdk-python.md is the guide.
"""

from .client import (
    APPROVED,
    DEFAULT_AWAIT,
    DEFAULT_TIMEOUT,
    EXECUTED,
    FAILED,
    SCHEDULED,
    Client,
    Outcome,
    answer,
    key_token,
    pending_id,
)
from .decorator import ReportError, gate
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
    SCHEMA_VERSION,
    TERMINAL_STATES,
    Event,
    FatalStreamError,
    Seen,
    check_envelope,
    follow,
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

__version__ = "0.1.0"
