"""gate: a decorator that puts a function's every call through toolgate.

    @toolgate.gate(client, conversation_id="support-42", wait=120)
    def send_email(to, subject, body=""):
        ...

A call of the wrapped function is submitted as a tool call (the tool's
name, its arguments by name), waited on within `wait` seconds, and run
only when toolgate lets it run, with the arguments toolgate holds: the
approver's when they edited them. The run is claimed first (started), so
that it runs once, and its outcome recorded (succeeded with the result,
or failed with the exception), as an agent that runs its own tools does.
Every other verdict raises, never returns a result: a refusal raises the
RejectedError naming who refused and why.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
import logging
from typing import Any, Callable, Dict, List, Optional, Tuple, TypeVar, Union, cast

from .client import Client
from .errors import (
    REJECTED_BY_TIMEOUT,
    ExecutionError,
    RejectedError,
    ToolgateError,
    UnreachableError,
    WaitTimeoutError,
    WithdrawnError,
)
from .model import JSON, Entry
from .verdict import EXPIRED, RAN_ELSEWHERE, REFUSED, RUN, TIMED_OUT, UNREACHABLE, WITHDRAW_TIMEOUT, WITHDRAWN, Verdict

log = logging.getLogger("toolgate")

# MAX_RESULT bounds the result recorded for a run, in bytes of JSON: the
# API takes a body of 1 MiB. A larger result is returned to the caller as
# it is, and recorded as {"truncated": true, "bytes": N}.
MAX_RESULT = 512 * 1024

# MAX_ERROR bounds the error recorded for a failed run (the API's bound).
MAX_ERROR = 65536


class ReportError(ToolgateError):
    """The run's claim was refused (started answered an error): the
    function did not run. .error is why."""

    def __init__(self, pending_id: str, error: ToolgateError) -> None:
        super().__init__("tool call %s not run: claiming it failed: %s" % (pending_id, error))
        self.pending_id = pending_id
        self.error = error


F = TypeVar("F", bound=Callable[..., Any])


def gate(client: Client, tool: Optional[str] = None, conversation_id: Union[str, Callable[[], str], None] = None,
         wait: float = 60.0, team: Optional[str] = None, task_id: Optional[str] = None,
         estimated_cost: Optional[float] = None, permission_mode: Optional[str] = None,
         tool_call_id: Optional[Callable[[Dict[str, JSON]], str]] = None, lease_ms: Optional[int] = None,
         withdraw_timeout: float = WITHDRAW_TIMEOUT) -> Callable[[F], F]:
    """Returns a decorator that gates a function (or a coroutine function)
    through client.

    tool is the tool's name (default: the function's). conversation_id is
    required: a str, or a function of no arguments returning one (for the
    conversation of the run in progress). tool_call_id, a function of the
    call's arguments (a dict) returning a str, names each call in its
    conversation (default: a fresh id each time): a retry with the same
    id is the same call, and does not run twice. wait bounds the wait for
    a verdict, in seconds; lease_ms the claim on a run (default an hour).

    The wrapped function raises RejectedError (refused, or expired), the
    WaitTimeoutError or WithdrawnError of a call withdrawn unanswered, the
    ExecutionError of a call that already ran elsewhere and failed, the
    UnreachableError or APIError of a toolgate that could not be asked,
    and ReportError when its claim is refused. A call that already ran
    elsewhere and succeeded returns the result recorded then.
    """
    if conversation_id is None:
        raise ValueError("gate: conversation_id: required, a str or a function returning one")
    conversation = conversation_id

    def decorate(fn: F) -> F:
        name = tool or fn.__name__
        sig = inspect.signature(fn)

        def prepare(args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Tuple[Dict[str, JSON], str, Optional[str]]:
            bound = sig.bind(*args, **kwargs)
            bound.apply_defaults()
            arguments: Dict[str, JSON] = {}
            for pname, value in bound.arguments.items():
                kind = sig.parameters[pname].kind
                if kind == inspect.Parameter.VAR_KEYWORD:
                    arguments.update(value)
                elif kind == inspect.Parameter.VAR_POSITIONAL:
                    arguments[pname] = list(value)
                else:
                    arguments[pname] = value
            try:
                json.dumps(arguments)
            except (TypeError, ValueError) as err:
                raise TypeError("gate %s: the arguments must be JSON: %s" % (name, err)) from None
            conv = conversation() if callable(conversation) else conversation
            call_id = tool_call_id(arguments) if tool_call_id is not None else None
            return arguments, conv, call_id

        def verdict_of(arguments: Dict[str, JSON], conv: str, call_id: Optional[str]) -> Verdict:
            return client.submit_and_wait(name, arguments, conv, call_id, wait, team=team, task_id=task_id,
                                          estimated_cost=estimated_cost, permission_mode=permission_mode,
                                          withdraw_timeout=withdraw_timeout)

        def claim(v: Verdict) -> None:
            try:
                client.started(v.pending_id, lease_ms)
            except ToolgateError as err:
                raise ReportError(v.pending_id, err) from None

        def call_args(v: Verdict) -> Tuple[List[Any], Dict[str, Any]]:
            """The approved arguments as the function takes them."""
            assert v.outcome is not None, "a verdict to run holds its outcome"
            arguments = v.outcome.arguments
            if not isinstance(arguments, dict):
                raise TypeError("gate %s: the approved arguments are not an object: %r" % (name, arguments))
            args: List[Any] = []
            kwargs = dict(arguments)
            for pname, p in sig.parameters.items():
                if p.kind == inspect.Parameter.POSITIONAL_ONLY and pname in kwargs:
                    args.append(kwargs.pop(pname))
                elif p.kind == inspect.Parameter.VAR_POSITIONAL and pname in kwargs:
                    args.extend(kwargs.pop(pname))
            return args, kwargs

        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def gated_async(*args: Any, **kwargs: Any) -> Any:
                arguments, conv, call_id = prepare(args, kwargs)
                v = await asyncio.get_running_loop().run_in_executor(None, verdict_of, arguments, conv, call_id)
                if v.kind != RUN:
                    return _not_run(v)
                await asyncio.get_running_loop().run_in_executor(None, claim, v)
                try:
                    a, kw = call_args(v)
                    result = await fn(*a, **kw)
                except BaseException as err:
                    await asyncio.get_running_loop().run_in_executor(None, _record_failure, client, v.pending_id, err)
                    raise
                await asyncio.get_running_loop().run_in_executor(None, _record_success, client, v.pending_id, result)
                return result

            setattr(gated_async, "toolgate_tool", name)
            return cast(F, gated_async)

        @functools.wraps(fn)
        def gated(*args: Any, **kwargs: Any) -> Any:
            arguments, conv, call_id = prepare(args, kwargs)
            v = verdict_of(arguments, conv, call_id)
            if v.kind != RUN:
                return _not_run(v)
            claim(v)
            try:
                a, kw = call_args(v)
                result = fn(*a, **kw)
            except BaseException as err:
                _record_failure(client, v.pending_id, err)
                raise
            _record_success(client, v.pending_id, result)
            return result

        setattr(gated, "toolgate_tool", name)
        return cast(F, gated)

    return decorate


def _not_run(v: Verdict) -> JSON:
    """Raises what a verdict other than RUN means to the caller; returns the
    result of a call that ran elsewhere and succeeded."""
    if v.kind == REFUSED and v.error is not None:
        raise v.error
    if v.kind == EXPIRED:
        raise RejectedError(REJECTED_BY_TIMEOUT, "timer", "nobody decided within the approval timeout (%gs)" % v.approval_timeout,
                            v.entry or Entry(pending_id=v.pending_id))
    if v.kind == RAN_ELSEWHERE:
        if isinstance(v.error, ExecutionError):
            raise v.error
        if v.outcome is not None:
            return v.outcome.result
    if v.kind == TIMED_OUT:
        raise WaitTimeoutError(v.pending_id, v.why, v.error)
    if v.kind == WITHDRAWN:
        raise WithdrawnError(v.pending_id, v.why, v.error)
    if v.kind == UNREACHABLE and v.error is not None:
        raise v.error
    raise UnreachableError(getattr(v.error, "url", "?"), "verdict %s" % v.kind)


def _record_success(client: Client, pending_id: str, result: object) -> None:
    """Records the run's result; a result that is not JSON is recorded as
    its repr. A report that fails is logged: the tool has run, and its
    result is the caller's."""
    recorded: JSON = result
    try:
        data = json.dumps(result)
    except (TypeError, ValueError):
        recorded = {"repr": repr(result)[:MAX_RESULT]}
        data = json.dumps(recorded)
    if len(data) > MAX_RESULT:
        recorded = {"truncated": True, "bytes": len(data)}
    try:
        client.succeeded(pending_id, recorded)
    except ToolgateError as err:
        log.warning("toolgate: tool call %s ran, but recording its result failed: %s", pending_id, err)


def _record_failure(client: Client, pending_id: str, err: BaseException) -> None:
    """Records the run's exception as its error."""
    text = ("%s: %s" % (type(err).__name__, err)).encode("utf-8")[:MAX_ERROR].decode("utf-8", "ignore")
    try:
        client.failed(pending_id, text)
    except ToolgateError as report_err:
        log.warning("toolgate: tool call %s failed (%s), and recording that failed: %s", pending_id, text, report_err)
