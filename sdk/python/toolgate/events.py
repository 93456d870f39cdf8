"""toolgate's event stream, GET /v1/events (docs/events.md).

The stream is server-sent events: `id` is the event's position in the
TOOL_EVENTS stream, `event` its subject and `data` the envelope. A client
that reconnects with `Last-Event-ID: <id>` gets everything after it, so
follow() misses nothing across a lost connection or a toolgate restart.
"""

from __future__ import annotations

import collections
import http.client
import socket
import time
from dataclasses import dataclass
from types import TracebackType
from typing import Callable, Iterator, List, Optional, Protocol, Type

from ._wire import envelope
from .errors import APIError, ToolgateError, UnreachableError
from .model import (
    CANCELLED_BY_SYSTEM,
    COMPLETED_FAILURE,
    COMPLETED_SUCCESS,
    REJECTED_BY_POLICY,
    REJECTED_BY_TIMEOUT,
    REJECTED_BY_USER,
    Envelope,
)

# The states a call ends in (docs/events.md, the state diagram).
TERMINAL_STATES = frozenset(
    [
        COMPLETED_SUCCESS,
        COMPLETED_FAILURE,
        REJECTED_BY_USER,
        REJECTED_BY_TIMEOUT,
        REJECTED_BY_POLICY,
        CANCELLED_BY_SYSTEM,
    ]
)

# The server sends a comment every 15 s on an idle stream: a read that
# waits much longer than that is a dead connection, not a quiet system.
DEFAULT_IDLE_TIMEOUT = 45.0


class FatalStreamError(ToolgateError):
    """The event stream refuses this client (a bad token, a role that may
    not read events, a malformed Last-Event-ID): reconnecting would only
    be refused again. .error is the APIError."""

    def __init__(self, error: APIError) -> None:
        super().__init__("GET /v1/events: %s" % error)
        self.error = error


@dataclass
class Event:
    """One server-sent event: id (the stream position to resume after),
    type (the subject, as the SSE event name) and envelope (its data, as
    version SCHEMA_VERSION of the envelope). When the data cannot be read
    so, envelope is None and unreadable says why."""

    id: Optional[str]
    type: str
    envelope: Optional[Envelope] = None
    unreadable: str = ""


# A comment line the parser hands on: the server's greeting, sent once it
# follows the stream (every event after it reaches this client).
GREETING = Event(None, "greeting", unreadable="the greeting carries no envelope")


class _Lines(Protocol):
    def readline(self) -> bytes: ...


class EventStream:
    """An open event stream: readline() reads it, close() ends it, and
    interrupt() (from another thread) makes a reader blocked on it return
    at once, at the end of the stream or with an error."""

    def __init__(self, conn: http.client.HTTPConnection, resp: http.client.HTTPResponse) -> None:
        self.conn = conn
        self.resp = resp

    def readline(self) -> bytes:
        return self.resp.readline()

    def interrupt(self) -> None:
        sock = self.conn.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self) -> None:
        self.interrupt()
        self.conn.close()

    def __enter__(self) -> EventStream:
        return self

    def __exit__(self, kind: Optional[Type[BaseException]], err: Optional[BaseException], tb: Optional[TracebackType]) -> None:
        self.close()


class EventSource(Protocol):
    """What follow reads events from: a Client."""

    @property
    def url(self) -> str: ...

    def open_events(self, last_event_id: Optional[str] = None, idle_timeout: float = DEFAULT_IDLE_TIMEOUT,
                    conversation_id: Optional[str] = None, tool_name: Optional[str] = None) -> EventStream: ...


def parse(lines: _Lines, comments: bool = False) -> Iterator[Event]:
    """Parses a text/event-stream (the WHATWG format: fields, comments, a
    blank line ending each event) read line by line from `lines` (a binary
    file-like object) into Events. With comments, the stream's first
    comment (its greeting) is yielded as GREETING."""
    id: Optional[str] = None
    type: Optional[str] = None
    data: List[str] = []
    greeted = False
    while True:
        raw = lines.readline()
        if not raw:
            return  # EOF
        line = raw.decode("utf-8", "replace").rstrip("\r\n")
        if line == "":
            if data:
                env, why = envelope("\n".join(data))
                yield Event(id, type or "message", env, why)
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


def follow(source: EventSource, last_event_id: Optional[str] = None, idle_timeout: float = DEFAULT_IDLE_TIMEOUT,
           log: Optional[Callable[[str], None]] = None, conversation_id: Optional[str] = None,
           tool_name: Optional[str] = None) -> Iterator[Event]:
    """Yields every event of GET /v1/events after last_event_id (None: only
    events from now on; "0": everything the stream still holds), narrowed
    to a conversation or a tool when given, reconnecting for ever with
    Last-Event-ID after a lost connection (backing off up to 5 s). log,
    when given, is called with a line on each connection and each loss.
    Raises FatalStreamError when the server refuses the stream."""
    backoff = 0.1
    while True:
        try:
            stream = source.open_events(last_event_id, idle_timeout, conversation_id, tool_name)
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
                log("following %s/v1/events %s" % (source.url, where))
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

    def __init__(self, size: int = 100000) -> None:
        self.size = size
        self.keys: collections.OrderedDict[str, None] = collections.OrderedDict()

    def add(self, key: str) -> bool:
        """Records key; returns False if it was already there."""
        if key in self.keys:
            self.keys.move_to_end(key)
            return False
        self.keys[key] = None
        if len(self.keys) > self.size:
            self.keys.popitem(last=False)
        return True

    def discard(self, key: str) -> None:
        """Forgets key, so that it counts as new again."""
        self.keys.pop(key, None)
