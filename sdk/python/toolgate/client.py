"""Client: toolgate's HTTP API as one identity, its bearer token.

Requests are JSON; an error is {"error": {"code", "message", "entry"?}},
raised as the APIError its code names (errors.py). Every request is
bounded by a timeout, and so is every wait: nothing here waits on
toolgate for ever.
"""

from __future__ import annotations

import http.client
import json
import re
import socket
import ssl
import threading
import time
import urllib.parse
from typing import Any, Callable, Dict, List, Optional, Tuple

from . import _wire
from ._checks import check_id, check_reason, check_timeout
from .errors import (
    AwaitStoppedError,
    AwaitTimeoutError,
    InternalError,
    NotFoundError,
    UnreachableError,
)
from .events import DEFAULT_IDLE_TIMEOUT, GREETING, EventStream, parse
from .model import JSON, PENDING_APPROVAL, Entry, HistoryItem, Me, Page
from .names import is_pending_id
from .outcome import Outcome, answer
from .verdict import WITHDRAW_TIMEOUT, Verdict, submit_and_wait

# DEFAULT_TIMEOUT bounds one request, in seconds.
DEFAULT_TIMEOUT = 30.0

# DEFAULT_AWAIT bounds await_call when the caller names no timeout.
DEFAULT_AWAIT = 300.0

_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,128}$")


class Client:
    """Client sends toolgate's HTTP API requests as one identity: its bearer
    token (none for a toolgate serving without tokens, on loopback).
    timeout bounds each request, in seconds. It is safe to share between
    threads: each request has its own connection."""

    def __init__(self, url: str, token: Optional[str] = None, timeout: float = DEFAULT_TIMEOUT) -> None:
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise ValueError("url: want http://HOST[:PORT] or https://HOST[:PORT], got %r" % url)
        self.url = url.rstrip("/")
        self.token = token
        self.timeout = check_timeout("timeout", timeout)
        self._scheme = parsed.scheme
        self._host = parsed.hostname
        self._port = parsed.port
        self._base = parsed.path.rstrip("/")

    # -- the requests ------------------------------------------------------

    def _headers(self, accept: str = "application/json") -> Dict[str, str]:
        h = {"Accept": accept, "User-Agent": "toolgate-python"}
        if self.token:
            h["Authorization"] = "Bearer " + self.token
        return h

    def _connect(self, timeout: float) -> http.client.HTTPConnection:
        if self._scheme == "https":
            return http.client.HTTPSConnection(self._host, self._port, timeout=timeout, context=ssl.create_default_context())
        return http.client.HTTPConnection(self._host, self._port, timeout=timeout)

    def _send(self, method: str, path: str, body: Optional[bytes], headers: Dict[str, str],
              timeout: float) -> Tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        """Sends a request; returns (connection, response). Raises
        UnreachableError when nothing answered."""
        conn = self._connect(timeout)
        sent = False
        try:
            conn.connect()
            conn.request(method, self._base + path, body=body, headers=headers)
            sent = True
            return conn, conn.getresponse()
        except (OSError, http.client.HTTPException) as err:
            conn.close()
            why = str(err) or type(err).__name__
            if isinstance(err, socket.timeout):
                why = "no answer within %gs" % timeout
            raise UnreachableError(self.url, why, sent=sent) from None

    def _request(self, method: str, path: str, body: Optional[Dict[str, Any]] = None,
                 timeout: Optional[float] = None) -> Any:
        """Sends one JSON request (a POST always carries a JSON body, {} when
        none is given) and returns the answer's JSON, for _wire to read.
        Raises the APIError of a refusal, UnreachableError when nothing
        answered within timeout (default: the client's)."""
        timeout = self.timeout if timeout is None else check_timeout("timeout", timeout)
        headers = self._headers()
        data = None
        if method == "POST":
            data = json.dumps({} if body is None else body).encode()
            headers["Content-Type"] = "application/json"
        conn, resp = self._send(method, path, data, headers, timeout)
        try:
            raw = resp.read()
        except (OSError, http.client.HTTPException) as err:
            raise UnreachableError(self.url, "reading the answer: %s" % (str(err) or type(err).__name__), sent=True) from None
        finally:
            conn.close()
        if resp.status >= 400:
            raise _wire.refusal(resp.status, resp.reason, raw)
        if not raw:
            return None
        return json.loads(raw)

    def _entry(self, method: str, path: str, body: Optional[Dict[str, Any]] = None,
               timeout: Optional[float] = None) -> Entry:
        """_request for an answer that is a call's entry."""
        return _wire.decode(Entry, self._request(method, path, body, timeout))

    def me(self) -> Me:
        """Who the token says the caller is."""
        return _wire.decode(Me, self._request("GET", "/v1/me"))

    def submit(self, tool_name: str, arguments: Optional[JSON] = None, conversation_id: Optional[str] = None,
               tool_call_id: Optional[str] = None, team: Optional[str] = None, task_id: Optional[str] = None,
               estimated_cost: Optional[float] = None, permission_mode: Optional[str] = None,
               timeout: Optional[float] = None) -> Entry:
        """Submits a call (POST /v1/tool-calls) as the token's user and
        returns its entry: pending approval, scheduled, or refused by policy
        (REJECTED_BY_POLICY). The same tool_call_id again in the
        conversation answers the entry the first submit made."""
        check_id("conversation_id", conversation_id)
        check_id("tool_call_id", tool_call_id, required=False)
        check_id("team", team, required=False)
        check_id("task_id", task_id, required=False)
        if not isinstance(tool_name, str) or not _TOOL_NAME.match(tool_name):
            raise ValueError("tool_name: must be 1 to 128 letters, digits, '_' or '-', got %r" % (tool_name,))
        call = _wire.body(tool_name=tool_name, conversation_id=conversation_id,
                          tool_arguments={} if arguments is None else arguments,
                          tool_call_id=tool_call_id or None, team=team or None, task_id=task_id or None,
                          estimated_cost=estimated_cost or None, permission_mode=permission_mode or None)
        return self._entry("POST", "/v1/tool-calls", call, timeout)

    def get(self, pending_id: str, timeout: Optional[float] = None) -> Entry:
        """The call pending_id as it is now."""
        return self._entry("GET", "/v1/tool-calls/" + _path(pending_id), timeout=timeout)

    def history(self, pending_id: str, timeout: Optional[float] = None) -> List[HistoryItem]:
        """Every transition of the call, with who and why."""
        raw = self._request("GET", "/v1/tool-calls/%s/history" % _path(pending_id), timeout=timeout)
        return _wire.decode_list(HistoryItem, raw)

    def list_page(self, status: Optional[str] = None, conversation_id: Optional[str] = None,
                  tool_name: Optional[str] = None, caller_bot_id: Optional[str] = None, limit: Optional[int] = None,
                  cursor: Optional[str] = None, timeout: Optional[float] = None) -> Page:
        """One page of calls, oldest first, and the event stream's position
        read before the page (following the stream after it misses
        nothing)."""
        query = _wire.body(status=status or None, conversation_id=conversation_id or None, tool_name=tool_name or None,
                           caller_bot_id=caller_bot_id or None, limit=limit, cursor=cursor or None)
        path = "/v1/tool-calls"
        if query:
            path += "?" + urllib.parse.urlencode(query)
        return _wire.decode(Page, self._request("GET", path, timeout=timeout))

    def list(self, status: Optional[str] = None, conversation_id: Optional[str] = None, tool_name: Optional[str] = None,
             caller_bot_id: Optional[str] = None, max_items: int = 10000,
             timeout: Optional[float] = None) -> Tuple[List[Entry], str]:
        """Every call matching the filters given, oldest first, page after
        page, and the event stream's position read before the first page:
        (entries, events_seq). Raises ValueError past max_items calls."""
        entries: List[Entry] = []
        events_seq: Optional[int] = None
        cursor = ""
        while True:
            page = self.list_page(status, conversation_id, tool_name, caller_bot_id, cursor=cursor, timeout=timeout)
            if events_seq is None:
                events_seq = page.events_seq
            entries.extend(page.items)
            if len(entries) > max_items:
                raise ValueError("list: more than max_items=%d calls match; narrow the filters or raise it" % max_items)
            cursor = page.next_cursor
            if not cursor:
                return entries, str(events_seq)

    def pending(self, timeout: Optional[float] = None) -> Tuple[List[Entry], str]:
        """Every call waiting for a decision, and the event stream's
        position read before them: (entries, events_seq)."""
        return self.list(status=PENDING_APPROVAL, timeout=timeout)

    def decide(self, pending_id: str, approved: bool, reason: str = "", arguments: Optional[JSON] = None,
               scope: Optional[str] = None, timeout: Optional[float] = None, interrupt: bool = False) -> Entry:
        """Approves or rejects a pending call as the token's user (an
        approver), with edited arguments when approving; returns the entry
        decided. interrupt, on a rejection, asks the agent to stop its
        turn. Raises ConflictError when someone decided first (.entry
        says who), ExpiredError past the deadline, ForbiddenError when the
        call's policy names other approvers, EditDeniedError for an edit a
        rule forbids."""
        check_reason(reason)
        body = _wire.body(approved=bool(approved), reason=reason, arguments=arguments, scope=scope or None,
                          interrupt=True if interrupt else None)
        return self._entry("POST", "/v1/tool-calls/%s/decision" % _path(pending_id), body, timeout)

    def cancel(self, pending_id: str, reason: Optional[str] = None, timeout: Optional[float] = None) -> Entry:
        """Cancels a call that has not started running (an agent: its own);
        returns the entry. ConflictError when it is past cancelling."""
        if reason:
            check_reason(reason)
        return self._entry("POST", "/v1/tool-calls/%s/cancel" % _path(pending_id), _wire.body(reason=reason or None), timeout)

    def started(self, pending_id: str, lease_ms: Optional[int] = None, timeout: Optional[float] = None) -> Entry:
        """Claims a runnable call (approved, or scheduled and due) to run it
        here: EXECUTING, held for lease_ms (default an hour). ConflictError
        when it may not run or someone claimed it first: do not run it."""
        return self._report("started", pending_id, _wire.body(lease_ms=lease_ms or None), timeout)

    def heartbeat(self, pending_id: str, lease_ms: Optional[int] = None, timeout: Optional[float] = None) -> Entry:
        """Renews the claim on a call this caller runs, for lease_ms from now."""
        return self._report("heartbeat", pending_id, _wire.body(lease_ms=lease_ms or None), timeout)

    def succeeded(self, pending_id: str, result: JSON = None, cost: Optional[float] = None,
                  timeout: Optional[float] = None) -> Entry:
        """Records that the call this caller claimed ran: its result (any
        JSON) and cost. COMPLETED_SUCCESS."""
        return self._report("succeeded", pending_id, _wire.body(result=result, cost=cost or None), timeout)

    def failed(self, pending_id: str, error: str, cost: Optional[float] = None, timeout: Optional[float] = None) -> Entry:
        """Records that the call this caller claimed ran and failed, with its
        error. COMPLETED_FAILURE."""
        return self._report("failed", pending_id, _wire.body(error=error or None, cost=cost or None), timeout)

    def _report(self, what: str, pending_id: str, body: Dict[str, Any], timeout: Optional[float]) -> Entry:
        return self._entry("POST", "/v1/tool-calls/%s/%s" % (_path(pending_id), what), body, timeout)

    # -- the event stream -------------------------------------------------

    def open_events(self, last_event_id: Optional[str] = None, idle_timeout: float = DEFAULT_IDLE_TIMEOUT,
                    conversation_id: Optional[str] = None, tool_name: Optional[str] = None) -> EventStream:
        """Opens GET /v1/events after last_event_id (None: the events to
        come), narrowed to a conversation or tool when given. A read that
        hears nothing for idle_timeout seconds raises socket.timeout.
        Returns a stream to read with events.parse and to close."""
        headers = self._headers("text/event-stream")
        if last_event_id is not None:
            headers["Last-Event-ID"] = str(last_event_id)
        query = _wire.body(conversation_id=conversation_id or None, tool_name=tool_name or None)
        path = "/v1/events" + ("?" + urllib.parse.urlencode(query) if query else "")
        conn, resp = self._send("GET", path, None, headers, check_timeout("idle_timeout", idle_timeout))
        if resp.status >= 400:
            try:
                raw = resp.read()
            except (OSError, http.client.HTTPException):
                raw = b""
            conn.close()
            raise _wire.refusal(resp.status, resp.reason, raw)
        return EventStream(conn, resp)

    # -- waiting -----------------------------------------------------------

    def await_call(self, pending_id: str, timeout: float = DEFAULT_AWAIT, until_finished: bool = False,
                   stop: Optional[threading.Event] = None) -> Outcome:
        """Waits until the call pending_id reaches a state the caller acts
        on, and returns its Outcome (approved or scheduled: run it; with
        until_finished, only once it ran: executed). Raises RejectedError
        when it was rejected, timed out, cancelled or denied by policy;
        ExecutionError when it ran and failed; AwaitTimeoutError when
        timeout seconds pass first; AwaitStoppedError when stop (a
        threading.Event) is set first; NotFoundError when there is no such
        call.

        It follows the call's conversation on the event stream, and reads
        the call once the stream is open and again at each event of it, so
        that a change made at any time is seen. A lost stream is opened
        again and the call read again: a lost event costs time, never the
        answer. It never hands back a running call (EXECUTING) as one to
        run: somebody claimed it; it waits for that run to finish."""
        timeout = check_timeout("timeout", timeout)
        if not is_pending_id(pending_id):
            raise NotFoundError(404, "not_found", "await %r: not a toolgate pendingId" % (pending_id,))
        deadline = time.monotonic() + timeout
        entry = self.get(pending_id, timeout=min(self.timeout, timeout))
        backoff = 0.1
        while True:
            outcome, err, wake_ms = answer(entry, until_finished)
            if err is not None:
                raise err
            if outcome is not None:
                return outcome
            if stop is not None and stop.is_set():
                raise AwaitStoppedError(pending_id, entry)
            now = time.monotonic()
            if now >= deadline:
                raise AwaitTimeoutError(pending_id, timeout, entry)
            wake = deadline
            if wake_ms is not None:
                wake = min(wake, now + max(0.0, wake_ms / 1000.0 - time.time()))
            try:
                entry = self._follow_call(pending_id, entry, wake, until_finished, stop)
                backoff = 0.1
            except (UnreachableError, InternalError, OSError, http.client.HTTPException):
                # toolgate out of reach, or a stream lost: read the call
                # again after a pause, within the deadline.
                pause = min(backoff, max(0.0, deadline - time.monotonic()))
                backoff = min(backoff * 2, 2.0)
                if stop is not None:
                    stop.wait(pause)
                else:
                    time.sleep(pause)
                try:
                    entry = self.get(pending_id, timeout=max(0.1, min(self.timeout, deadline - time.monotonic())))
                except (UnreachableError, InternalError):
                    pass

    def _follow_call(self, pending_id: str, entry: Entry, wake: float, until_finished: bool,
                     stop: Optional[threading.Event]) -> Entry:
        """Follows the call's conversation from now until the call has an
        answer or wake (a monotonic time) comes, reading the call once
        the stream is open and at each of its events; returns the call as
        last read."""
        idle = max(0.05, min(DEFAULT_IDLE_TIMEOUT, wake - time.monotonic()))
        stream = self.open_events(None, idle, conversation_id=entry.conversation_id)
        watcher = None
        done = threading.Event()
        if stop is not None:
            halt = stop

            def watch() -> None:
                while not done.is_set():
                    if halt.wait(0.05):
                        stream.interrupt()
                        return

            watcher = threading.Thread(target=watch, name="toolgate-await-stop", daemon=True)
            watcher.start()
        try:
            with stream:
                for ev in parse(stream, comments=True):
                    about = ev is GREETING or (ev.envelope is not None and ev.envelope.entry.pending_id == pending_id)
                    if about:
                        remaining = wake - time.monotonic()
                        entry = self.get(pending_id, timeout=max(0.1, min(self.timeout, remaining if remaining > 0 else 1.0)))
                        outcome, err, wake_ms = answer(entry, until_finished)
                        if outcome is not None or err is not None or wake_ms is not None:
                            return entry
                    if time.monotonic() >= wake or (stop is not None and stop.is_set()):
                        return entry
        except socket.timeout:
            return entry  # the wake, or a quiet stream: the caller looks again
        except (OSError, http.client.HTTPException):
            if stop is not None and stop.is_set():
                return entry  # interrupted by stop
            raise
        finally:
            if watcher is not None:
                done.set()
                watcher.join()
        if stop is not None and stop.is_set():
            return entry
        raise UnreachableError(self.url, "the event stream ended", sent=True)

    def submit_and_wait(self, tool_name: str, arguments: Optional[JSON] = None, conversation_id: Optional[str] = None,
                        tool_call_id: Optional[str] = None, wait: float = 60.0, team: Optional[str] = None,
                        task_id: Optional[str] = None, estimated_cost: Optional[float] = None,
                        permission_mode: Optional[str] = None, stop: Optional[threading.Event] = None,
                        on_pending: Optional[Callable[[Entry], None]] = None,
                        withdraw_timeout: float = WITHDRAW_TIMEOUT) -> Verdict:
        """Submits the call and waits for its verdict within wait seconds:
        see verdict.submit_and_wait."""
        return submit_and_wait(self, tool_name, arguments, conversation_id, tool_call_id, wait, team, task_id,
                               estimated_cost, permission_mode, stop, on_pending, withdraw_timeout)


def _path(pending_id: str) -> str:
    if not isinstance(pending_id, str) or not pending_id:
        raise ValueError("pending_id: required, the call's pendingId")
    return urllib.parse.quote(pending_id, safe="")
