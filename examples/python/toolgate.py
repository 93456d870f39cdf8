"""A small client of toolgate's HTTP API, Python standard library only.

approver.py and analytics.py build on it. What it reads is the contract in
docs/events.md and api/openapi.json, nothing of toolgate's Go:

- JSON requests with a bearer token; an error is {"error": {"code",
  "message", "entry"?}}, raised here as APIError.
- GET /v1/events: server-sent events. The SSE `id` is the event's
  position in the TOOL_EVENTS stream, `event` its subject and `data` the
  envelope. A client that reconnects with `Last-Event-ID: <id>` gets
  everything after it, so follow() below misses nothing across a lost
  connection or a toolgate restart.

Python 3.9 or later.
"""

import collections
import http.client
import json
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

# SCHEMA_VERSION is the envelope's `v` this code understands. Fields are
# added without a new version; a removed or changed one raises it.
SCHEMA_VERSION = 1

# The states a call ends in (docs/events.md, the state diagram).
TERMINAL_STATES = frozenset(
    [
        "COMPLETED_SUCCESS",
        "COMPLETED_FAILURE",
        "REJECTED_BY_USER",
        "REJECTED_BY_TIMEOUT",
        "REJECTED_BY_POLICY",
        "CANCELLED_BY_SYSTEM",
    ]
)

# The server sends a comment every 15 s on an idle stream: a read that
# waits much longer than that is a dead connection, not a quiet system.
DEFAULT_IDLE_TIMEOUT = 45.0


class APIError(Exception):
    """A refusal from the API: its HTTP status and its error body."""

    def __init__(self, status, code, message, entry=None):
        super().__init__("%d %s: %s" % (status, code, message))
        self.status = status
        self.code = code
        self.message = message
        self.entry = entry  # on a 409 conflict: the entry as it is now

    @classmethod
    def from_http_error(cls, err):
        raw = err.read()
        try:
            body = json.loads(raw)["error"]
            return cls(err.code, body.get("code", ""), body.get("message", ""), body.get("entry"))
        except (ValueError, KeyError, TypeError):
            return cls(err.code, "", raw.decode("utf-8", "replace").strip() or str(err.reason))


class FatalStreamError(Exception):
    """The event stream refuses this client (a bad token, a role that may
    not read events, a Last-Event-ID past the stream's end): reconnecting
    would only be refused again."""


def log(prefix, message):
    print("%s: %s" % (prefix, message), file=sys.stderr, flush=True)


class Client:
    """Client sends the API's JSON requests as one identity: its bearer
    token (none for a toolgate serving without tokens)."""

    def __init__(self, url, token=None, timeout=30.0):
        self.url = url.rstrip("/")
        self.token = token
        self.timeout = timeout

    def headers(self):
        h = {"Accept": "application/json"}
        if self.token:
            h["Authorization"] = "Bearer " + self.token
        return h

    def request(self, method, path, body=None):
        headers = self.headers()
        data = None
        if method == "POST":
            # Every POST takes JSON, a body-less one too.
            data = json.dumps(body if body is not None else {}).encode()
            headers["Content-Type"] = "application/json"
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                return json.load(resp)
        except urllib.error.HTTPError as err:
            raise APIError.from_http_error(err) from None

    def decide(self, pending_id, approved, reason):
        """POST /v1/tool-calls/{id}/decision; returns the entry decided.
        Raises APIError: 409 `conflict` when someone decided first (its
        entry says who), 409 `expired` past the approval deadline, 403
        when this identity is not one the call's policy lets decide."""
        path = "/v1/tool-calls/%s/decision" % urllib.parse.quote(pending_id, safe="")
        return self.request("POST", path, {"approved": approved, "reason": reason})

    def pending(self):
        """Every call waiting for a decision, and the event stream's
        position read before them: following the stream after it misses
        no call that arrives while the list is read."""
        entries, events_seq, cursor = [], None, ""
        while True:
            query = {"status": "PENDING_APPROVAL"}
            if cursor:
                query["cursor"] = cursor
            page = self.request("GET", "/v1/tool-calls?" + urllib.parse.urlencode(query))
            if events_seq is None:
                events_seq = page.get("eventsSeq", 0)
            entries.extend(page.get("items") or [])
            cursor = page.get("nextCursor")
            if not cursor:
                return entries, str(events_seq)


class Event:
    """One server-sent event: `id` (the stream position to resume after),
    `type` (the subject, as the SSE event name) and `data` (the envelope,
    a dict, or None when it was not JSON)."""

    def __init__(self, id, type, data):
        self.id = id
        self.type = type
        self.data = data


def follow(client, last_event_id=None, prefix="toolgate", idle_timeout=DEFAULT_IDLE_TIMEOUT):
    """Yields every event of GET /v1/events after last_event_id (None:
    only events from now on; "0": everything the stream still holds),
    reconnecting for ever with Last-Event-ID after a lost connection.
    Raises FatalStreamError when the server refuses the stream."""
    backoff = 0.1
    while True:
        headers = client.headers()
        headers["Accept"] = "text/event-stream"
        if last_event_id is not None:
            headers["Last-Event-ID"] = last_event_id
        req = urllib.request.Request(client.url + "/v1/events", headers=headers)
        try:
            resp = urllib.request.urlopen(req, timeout=idle_timeout)
        except urllib.error.HTTPError as err:
            api = APIError.from_http_error(err)
            if 400 <= err.code < 500 and err.code not in (408, 429):
                raise FatalStreamError("GET /v1/events: %s" % api) from None
            lost = str(api)
        except urllib.error.URLError as err:
            lost = str(err.reason)  # connection refused, a name that does not resolve, …
        except (OSError, http.client.HTTPException) as err:
            lost = str(err) or type(err).__name__
        else:
            backoff = 0.1
            where = "after event %s" % last_event_id if last_event_id is not None else "from now on"
            log(prefix, "following %s/v1/events %s" % (client.url, where))
            try:
                with resp:
                    for ev in _parse(resp):
                        if ev.id is not None:
                            last_event_id = ev.id
                        yield ev
                lost = "the server closed the stream"
            except (OSError, http.client.HTTPException) as err:
                # socket.timeout is an OSError: no keep-alive for too long.
                lost = str(err) or type(err).__name__
        log(prefix, "event stream lost (%s); reconnecting in %.1fs" % (lost, backoff))
        time.sleep(backoff)
        backoff = min(backoff * 2, 5.0)


def _parse(resp):
    """Parses a text/event-stream (the WHATWG format: fields, comments,
    a blank line ending each event) into Events with JSON data."""
    id, type, data = None, None, []
    while True:
        raw = resp.readline()
        if not raw:
            return  # EOF
        line = raw.decode("utf-8", "replace").rstrip("\r\n")
        if line == "":
            if data:
                try:
                    envelope = json.loads("\n".join(data))
                except ValueError:
                    envelope = None  # check_envelope says why it is unread
                yield Event(id, type or "message", envelope)
            id, type, data = None, None, []
            continue
        if line.startswith(":"):
            continue  # a comment: the greeting and the keep-alives
        field, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if field == "id" and "\0" not in value:
            id = value
        elif field == "event":
            type = value
        elif field == "data":
            data.append(value)


def check_envelope(envelope):
    """Returns why an envelope cannot be read as version 1 (None when it
    can). A subscriber that must not misread an envelope checks `v`."""
    if not isinstance(envelope, dict):
        return "not a JSON object"
    if envelope.get("v") != SCHEMA_VERSION:
        return "schema version v=%r, this code reads v=%d" % (envelope.get("v"), SCHEMA_VERSION)
    for field in ("id", "type", "to", "entry"):
        if field not in envelope:
            return "no %r field" % field
    return None


class Seen:
    """The last `size` keys seen, oldest forgotten first: de-duplication
    for a process that runs for ever in bounded memory."""

    def __init__(self, size=100000):
        self.size = size
        self.keys = collections.OrderedDict()

    def add(self, key):
        """Records key; returns False if it was already there."""
        if key in self.keys:
            self.keys.move_to_end(key)
            return False
        self.keys[key] = None
        if len(self.keys) > self.size:
            self.keys.popitem(last=False)
        return True
