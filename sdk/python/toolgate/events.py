"""toolgate's event stream, GET /v1/events (docs/events.md).

The stream is server-sent events: `id` is the event's position in the
TOOL_EVENTS stream, `event` its subject and `data` the envelope. A client
that reconnects with `Last-Event-ID: <id>` gets everything after it, so
follow() misses nothing across a lost connection or a toolgate restart.
"""

import collections
import http.client
import json
import time

from .errors import APIError, ToolgateError, UnreachableError

# SCHEMA_VERSION is the envelope's `v` this package understands. Fields are
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


class FatalStreamError(ToolgateError):
    """The event stream refuses this client (a bad token, a role that may
    not read events, a malformed Last-Event-ID): reconnecting would only
    be refused again. .error is the APIError."""

    def __init__(self, error):
        super().__init__("GET /v1/events: %s" % error)
        self.error = error


class Event:
    """One server-sent event: `id` (the stream position to resume after),
    `type` (the subject, as the SSE event name) and `data` (the envelope,
    a dict, or None when it was not JSON)."""

    def __init__(self, id, type, data):
        self.id = id
        self.type = type
        self.data = data

    def __repr__(self):
        return "Event(id=%r, type=%r)" % (self.id, self.type)


# A comment line the parser hands on: the server's greeting, sent once it
# follows the stream (every event after it reaches this client).
GREETING = Event(None, "greeting", None)


def parse(lines, comments=False):
    """Parses a text/event-stream (the WHATWG format: fields, comments, a
    blank line ending each event) read line by line from `lines` (a binary
    file-like object) into Events with JSON data. With comments, the
    stream's first comment (its greeting) is yielded as GREETING."""
    id, type, data = None, None, []
    greeted = False
    while True:
        raw = lines.readline()
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
            if comments and not greeted:
                greeted = True
                yield GREETING
            continue  # the greeting and the keep-alives
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


def follow(client, last_event_id=None, idle_timeout=DEFAULT_IDLE_TIMEOUT, log=None,
           conversation_id=None, tool_name=None):
    """Yields every event of GET /v1/events after last_event_id (None: only
    events from now on; "0": everything the stream still holds), narrowed
    to a conversation or a tool when given, reconnecting for ever with
    Last-Event-ID after a lost connection (backing off up to 5 s). log,
    when given, is called with a line on each connection and each loss.
    Raises FatalStreamError when the server refuses the stream."""
    backoff = 0.1
    while True:
        try:
            stream = client.open_events(last_event_id, idle_timeout, conversation_id, tool_name)
        except APIError as err:
            if 400 <= err.status < 500 and err.status not in (408, 429):
                raise FatalStreamError(err) from None
            lost = str(err)
        except UnreachableError as err:
            lost = err.why
        else:
            backoff = 0.1
            if log is not None:
                where = "after event %s" % last_event_id if last_event_id is not None else "from now on"
                log("following %s/v1/events %s" % (client.url, where))
            try:
                with stream:
                    for ev in parse(stream):
                        if ev.id is not None:
                            last_event_id = ev.id
                        yield ev
                lost = "the server closed the stream"
            except (OSError, http.client.HTTPException) as err:
                # socket.timeout is an OSError: no keep-alive for too long.
                lost = str(err) or type(err).__name__
        if log is not None:
            log("event stream lost (%s); reconnecting in %.1fs" % (lost, backoff))
        time.sleep(backoff)
        backoff = min(backoff * 2, 5.0)


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

    def discard(self, key):
        """Forgets key, so that it counts as new again."""
        self.keys.pop(key, None)
