"""Client: toolgate's HTTP API as one identity, its bearer token.

Requests are JSON; an error is {"error": {"code", "message", "entry"?}},
raised as the APIError its code names (errors.py). Every request is
bounded by a timeout, and so is every wait: nothing here waits on
toolgate for ever.
"""

import base64
import hashlib
import http.client
import json
import re
import socket
import ssl
import threading
import time
import urllib.parse

from .errors import (
    AwaitStoppedError,
    AwaitTimeoutError,
    ExecutionError,
    InternalError,
    NotFoundError,
    RejectedError,
    UnreachableError,
    api_error,
)

# DEFAULT_TIMEOUT bounds one request, in seconds.
DEFAULT_TIMEOUT = 30.0

# DEFAULT_AWAIT bounds await_call when the caller names no timeout.
DEFAULT_AWAIT = 300.0

# How long a wait on the event stream hears nothing before it takes the
# connection for dead (toolgate sends a comment every 15 s).
_IDLE_TIMEOUT = 45.0

# The bounds the API puts on what a caller sends (wire.MaxString, MaxID):
# checked here too, so that a bad input is named before it is sent.
MAX_ID = 256
MAX_REASON = 4096

# The kinds of Outcome (client.Kind).
APPROVED = "approved"  # a human approved the call: run it (started first)
SCHEDULED = "scheduled"  # nobody had to approve it and it is due: run it
EXECUTED = "executed"  # it ran and succeeded; result and cost say how
FAILED = "failed"  # it ran and failed (raised as an ExecutionError)


class Outcome:
    """What became of a call that was not refused.

    kind: approved or scheduled (run it now, with arguments), executed
    (it ran: result, cost). arguments are what to run: the approver's when
    they edited the agent's (edited is then True), else the agent's own.
    by is who let it run (the approver, or "policy"), reason why, scope
    how far a human's approval reaches; entry is the call as last read.
    """

    def __init__(self, kind, entry):
        self.kind = kind
        self.entry = entry
        self.pending_id = entry.get("pendingId", "")
        self.arguments = entry.get("toolArguments")
        if self.arguments is None:
            self.arguments = {}
        self.edited = bool(entry.get("originalArguments"))
        self.by = entry.get("approvedOrRejectedByUserId") or "policy"
        self.reason = entry.get("statusReason", "")
        self.scope = entry.get("decisionScope", "")
        self.result = entry.get("result")
        self.cost = entry.get("cost", 0.0)
        if kind == SCHEDULED:
            self.by = "policy"

    @property
    def runnable(self):
        """Whether the caller should run the tool now (started first)."""
        return self.kind in (APPROVED, SCHEDULED)

    def __repr__(self):
        return "Outcome(kind=%r, pending_id=%r, by=%r, edited=%r)" % (self.kind, self.pending_id, self.by, self.edited)


def answer(entry, until_finished=False, now_ms=None):
    """What an entry says to a caller waiting on it (client's answer):
    (outcome, error, wake_ms). An outcome or an error is the answer; with
    neither, wait for the next change, or (wake_ms) until a scheduled call
    is due."""
    rejected = RejectedError.from_entry(entry)
    if rejected is not None:
        return None, rejected, None
    status = entry.get("status")
    if status == "COMPLETED_SUCCESS":
        return Outcome(EXECUTED, entry), None, None
    if status == "COMPLETED_FAILURE":
        return None, ExecutionError(entry.get("error", ""), entry, entry.get("cost", 0.0)), None
    if until_finished:
        return None, None, None
    if status == "APPROVED_READY_FOR_EXECUTION":
        return Outcome(APPROVED, entry), None, None
    if status == "SCHEDULED_FOR_EXECUTION":
        due = entry.get("scheduledExecutionTime") or 0
        now_ms = now_ms if now_ms is not None else int(time.time() * 1000)
        if now_ms < due:
            return None, None, due
        return Outcome(SCHEDULED, entry), None, None
    # Pending approval, or running: the answer is still to come.
    return None, None, None


_PLAIN_TOKEN = re.compile(r"^[A-Za-z0-9_-]+$")


def key_token(s):
    """One token of a key, as toolgate makes it (machine.KeyToken): s when
    it is plain, else "=" and its unpadded base64url, or "==" and that of
    its SHA-256 when that would be longer than 512 characters."""
    if len(s) <= 512 and _PLAIN_TOKEN.match(s):
        return s
    raw = s.encode("utf-8")
    enc = base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
    if len(enc) < 512:
        return "=" + enc
    return "==" + base64.urlsafe_b64encode(hashlib.sha256(raw).digest()).rstrip(b"=").decode()


def pending_id(conversation_id, tool_call_id):
    """The pendingId toolgate gives the call tool_call_id of
    conversation_id (machine.PendingID)."""
    return key_token(conversation_id) + "." + key_token(tool_call_id)


_PENDING_ID = re.compile(r"^(=?[A-Za-z0-9_-]+|==[A-Za-z0-9_-]+)\.(=?[A-Za-z0-9_-]+|==[A-Za-z0-9_-]+)$")


def _check_id(name, value, required=True):
    if value is None or value == "":
        if required:
            raise ValueError("%s: required, 1 to %d bytes" % (name, MAX_ID))
        return
    if not isinstance(value, str):
        raise TypeError("%s: want a str, got %s" % (name, type(value).__name__))
    if len(value.encode("utf-8")) > MAX_ID:
        raise ValueError("%s: at most %d bytes, got %d" % (name, MAX_ID, len(value.encode("utf-8"))))


def _check_timeout(name, value):
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0 or value != value or value == float("inf"):
        raise ValueError("%s: want a finite number of seconds above 0, got %r" % (name, value))
    return float(value)


class _Stream:
    """An open event stream: readline() reads it, close() ends it, and
    interrupt() (from another thread) makes a reader blocked on it return
    at once, at the end of the stream or with an error."""

    def __init__(self, conn, resp):
        self.conn = conn
        self.resp = resp

    def readline(self):
        return self.resp.readline()

    def interrupt(self):
        sock = self.conn.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self):
        self.interrupt()
        self.conn.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Client:
    """Client sends toolgate's HTTP API requests as one identity: its bearer
    token (none for a toolgate serving without tokens, on loopback).
    timeout bounds each request, in seconds. It is safe to share between
    threads: each request has its own connection."""

    def __init__(self, url, token=None, timeout=DEFAULT_TIMEOUT):
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise ValueError("url: want http://HOST[:PORT] or https://HOST[:PORT], got %r" % url)
        self.url = url.rstrip("/")
        self.token = token
        self.timeout = _check_timeout("timeout", timeout)
        self._scheme = parsed.scheme
        self._host = parsed.hostname
        self._port = parsed.port
        self._base = parsed.path.rstrip("/")

    # -- the requests ------------------------------------------------------

    def headers(self, accept="application/json"):
        h = {"Accept": accept, "User-Agent": "toolgate-python"}
        if self.token:
            h["Authorization"] = "Bearer " + self.token
        return h

    def _connect(self, timeout):
        if self._scheme == "https":
            return http.client.HTTPSConnection(self._host, self._port, timeout=timeout, context=ssl.create_default_context())
        return http.client.HTTPConnection(self._host, self._port, timeout=timeout)

    def _send(self, method, path, body, headers, timeout):
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

    def request(self, method, path, body=None, timeout=None):
        """Sends one JSON request (a POST always carries a JSON body, {} when
        none is given) and returns the decoded answer. Raises the APIError
        of a refusal, UnreachableError when nothing answered within
        timeout (default: the client's)."""
        timeout = self.timeout if timeout is None else _check_timeout("timeout", timeout)
        headers = self.headers()
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
            raise _refusal(resp.status, resp.reason, raw)
        if not raw:
            return None
        return json.loads(raw)

    def me(self):
        """Who the token says the caller is: {"id", "roles", "open"}."""
        return self.request("GET", "/v1/me")

    def submit(self, tool_name, arguments=None, conversation_id=None, tool_call_id=None, team=None,
               task_id=None, estimated_cost=None, permission_mode=None, timeout=None):
        """Submits a call (POST /v1/tool-calls) as the token's user and
        returns its entry: pending approval, scheduled, or refused by policy
        (REJECTED_BY_POLICY). The same tool_call_id again in the
        conversation answers the entry the first submit made."""
        _check_id("conversation_id", conversation_id)
        _check_id("tool_call_id", tool_call_id, required=False)
        _check_id("team", team, required=False)
        _check_id("task_id", task_id, required=False)
        if not isinstance(tool_name, str) or not re.match(r"^[A-Za-z0-9_-]{1,128}$", tool_name):
            raise ValueError("tool_name: must be 1 to 128 letters, digits, '_' or '-', got %r" % (tool_name,))
        call = {"toolName": tool_name, "conversationId": conversation_id, "toolArguments": {} if arguments is None else arguments}
        if tool_call_id:
            call["toolCallId"] = tool_call_id
        if team:
            call["team"] = team
        if task_id:
            call["taskId"] = task_id
        if estimated_cost:
            call["estimatedCost"] = estimated_cost
        if permission_mode:
            call["permissionMode"] = permission_mode
        return self.request("POST", "/v1/tool-calls", call, timeout)

    def get(self, pending_id, timeout=None):
        """The call pending_id as it is now."""
        return self.request("GET", "/v1/tool-calls/" + _path(pending_id), timeout=timeout)

    def history(self, pending_id, timeout=None):
        """Every transition of the call, with who and why."""
        return self.request("GET", "/v1/tool-calls/%s/history" % _path(pending_id), timeout=timeout)

    def list_page(self, status=None, conversation_id=None, tool_name=None, caller_bot_id=None, limit=None, cursor=None, timeout=None):
        """One page of calls, oldest first: {"items", "nextCursor"?,
        "eventsSeq"} (eventsSeq: the event stream's position read before
        the page; following the stream after it misses nothing)."""
        query = {}
        for k, v in (("status", status), ("conversationId", conversation_id), ("toolName", tool_name),
                     ("callerBotId", caller_bot_id), ("limit", limit), ("cursor", cursor)):
            if v is not None and v != "":
                query[k] = v
        path = "/v1/tool-calls"
        if query:
            path += "?" + urllib.parse.urlencode(query)
        return self.request("GET", path, timeout=timeout)

    def list(self, status=None, conversation_id=None, tool_name=None, caller_bot_id=None, max_items=10000, timeout=None):
        """Every call matching the filters given, oldest first, page after
        page, and the event stream's position read before the first page:
        (entries, events_seq). Raises ValueError past max_items calls."""
        entries, events_seq, cursor = [], None, None
        while True:
            page = self.list_page(status, conversation_id, tool_name, caller_bot_id, cursor=cursor, timeout=timeout)
            if events_seq is None:
                events_seq = page.get("eventsSeq", 0)
            entries.extend(page.get("items") or [])
            if len(entries) > max_items:
                raise ValueError("list: more than max_items=%d calls match; narrow the filters or raise it" % max_items)
            cursor = page.get("nextCursor")
            if not cursor:
                return entries, str(events_seq)

    def pending(self, timeout=None):
        """Every call waiting for a decision, and the event stream's
        position read before them: (entries, events_seq)."""
        return self.list(status="PENDING_APPROVAL", timeout=timeout)

    def decide(self, pending_id, approved, reason="", arguments=None, scope=None, timeout=None, interrupt=False):
        """Approves or rejects a pending call as the token's user (an
        approver), with edited arguments when approving; returns the entry
        decided. interrupt, on a rejection, asks the agent to stop its
        turn. Raises ConflictError when someone decided first (.entry
        says who), ExpiredError past the deadline, ForbiddenError when the
        call's policy names other approvers, EditDeniedError for an edit a
        rule forbids."""
        if len(reason.encode("utf-8")) > MAX_REASON:
            raise ValueError("reason: at most %d bytes, got %d" % (MAX_REASON, len(reason.encode("utf-8"))))
        body = {"approved": bool(approved), "reason": reason}
        if arguments is not None:
            body["arguments"] = arguments
        if scope:
            body["scope"] = scope
        if interrupt:
            body["interrupt"] = True
        return self.request("POST", "/v1/tool-calls/%s/decision" % _path(pending_id), body, timeout)

    def cancel(self, pending_id, reason=None, timeout=None):
        """Cancels a call that has not started running (an agent: its own);
        returns the entry. ConflictError when it is past cancelling."""
        body = {}
        if reason:
            if len(reason.encode("utf-8")) > MAX_REASON:
                raise ValueError("reason: at most %d bytes, got %d" % (MAX_REASON, len(reason.encode("utf-8"))))
            body["reason"] = reason
        return self.request("POST", "/v1/tool-calls/%s/cancel" % _path(pending_id), body, timeout)

    def started(self, pending_id, lease_ms=None, timeout=None):
        """Claims a runnable call (approved, or scheduled and due) to run it
        here: EXECUTING, held for lease_ms (default an hour). ConflictError
        when it may not run or someone claimed it first: do not run it."""
        return self._report("started", pending_id, {"leaseMs": lease_ms} if lease_ms else {}, timeout)

    def heartbeat(self, pending_id, lease_ms=None, timeout=None):
        """Renews the claim on a call this caller runs, for lease_ms from now."""
        return self._report("heartbeat", pending_id, {"leaseMs": lease_ms} if lease_ms else {}, timeout)

    def succeeded(self, pending_id, result=None, cost=None, timeout=None):
        """Records that the call this caller claimed ran: its result (any
        JSON) and cost. COMPLETED_SUCCESS."""
        body = {}
        if result is not None:
            body["result"] = result
        if cost:
            body["cost"] = cost
        return self._report("succeeded", pending_id, body, timeout)

    def failed(self, pending_id, error, cost=None, timeout=None):
        """Records that the call this caller claimed ran and failed, with its
        error. COMPLETED_FAILURE."""
        body = {"error": error} if error else {}
        if cost:
            body["cost"] = cost
        return self._report("failed", pending_id, body, timeout)

    def _report(self, what, pending_id, body, timeout):
        return self.request("POST", "/v1/tool-calls/%s/%s" % (_path(pending_id), what), body, timeout)

    # -- the event stream -------------------------------------------------

    def open_events(self, last_event_id=None, idle_timeout=_IDLE_TIMEOUT, conversation_id=None, tool_name=None):
        """Opens GET /v1/events after last_event_id (None: the events to
        come), narrowed to a conversation or tool when given. A read that
        hears nothing for idle_timeout seconds raises socket.timeout.
        Returns a stream to read with events.parse and to close."""
        headers = self.headers("text/event-stream")
        if last_event_id is not None:
            headers["Last-Event-ID"] = str(last_event_id)
        query = {k: v for k, v in (("conversationId", conversation_id), ("toolName", tool_name)) if v}
        path = "/v1/events" + ("?" + urllib.parse.urlencode(query) if query else "")
        conn, resp = self._send("GET", path, None, headers, _check_timeout("idle_timeout", idle_timeout))
        if resp.status >= 400:
            try:
                raw = resp.read()
            except (OSError, http.client.HTTPException):
                raw = b""
            conn.close()
            raise _refusal(resp.status, resp.reason, raw)
        return _Stream(conn, resp)

    # -- waiting -----------------------------------------------------------

    def await_call(self, pending_id, timeout=DEFAULT_AWAIT, until_finished=False, stop=None):
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
        timeout = _check_timeout("timeout", timeout)
        if not isinstance(pending_id, str) or not _PENDING_ID.match(pending_id):
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

    def _follow_call(self, pending_id, entry, wake, until_finished, stop):
        """Follows the call's conversation from now until the call has an
        answer or wake (a monotonic time) comes, reading the call once
        the stream is open and at each of its events; returns the call as
        last read."""
        from .events import GREETING, parse

        idle = max(0.05, min(_IDLE_TIMEOUT, wake - time.monotonic()))
        stream = self.open_events(None, idle, conversation_id=entry.get("conversationId"))
        watcher = None
        if stop is not None:
            done = threading.Event()

            def watch():
                while not done.is_set():
                    if stop.wait(0.05):
                        stream.interrupt()
                        return

            watcher = threading.Thread(target=watch, name="toolgate-await-stop", daemon=True)
            watcher.start()
        try:
            with stream:
                for ev in parse(stream, comments=True):
                    about = ev is GREETING or (isinstance(ev.data, dict) and (ev.data.get("entry") or {}).get("pendingId") == pending_id)
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

    def submit_and_wait(self, tool_name, arguments=None, conversation_id=None, tool_call_id=None, wait=60.0, **options):
        """Submits the call and waits for its verdict within wait seconds:
        see verdict.submit_and_wait."""
        from .verdict import submit_and_wait

        return submit_and_wait(self, tool_name, arguments, conversation_id, tool_call_id, wait, **options)


def _path(pending_id):
    if not isinstance(pending_id, str) or not pending_id:
        raise ValueError("pending_id: required, the call's pendingId")
    return urllib.parse.quote(pending_id, safe="")


def _refusal(status, reason, raw):
    try:
        body = json.loads(raw)["error"]
        return api_error(status, body.get("code", ""), body.get("message", ""), body.get("entry"))
    except (ValueError, KeyError, TypeError):
        return api_error(status, "", raw.decode("utf-8", "replace").strip() or reason)
