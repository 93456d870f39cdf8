"""The wire's JSON, and the only code that knows its names.

The HTTP API and the event stream name fields in camelCase; this package
names them in snake_case (model.py). A field's wire name is its
camelCase (approved_or_rejected_by_user_id: approvedOrRejectedByUserId),
less the trailing underscore of a name Python keeps for itself (from_:
from). decode reads an answer into a model class by its fields' types;
body makes a request's JSON, or a query, from keyword arguments.
"""

from __future__ import annotations

import dataclasses
import json
import typing
from typing import Any, Dict, List, Optional, Tuple, Type, TypeVar, Union

from .errors import APIError, api_error
from .model import Entry, Envelope

T = TypeVar("T")

# SCHEMA_VERSION is the envelope's `v` this package reads. Fields are
# added without a new version; a removed or changed one raises it.
SCHEMA_VERSION = 1


def wire_name(name: str) -> str:
    """The wire's name of the field name: its camelCase."""
    head, *rest = name.rstrip("_").split("_")
    return head + "".join(part.capitalize() for part in rest)


def decode(cls: Type[T], data: Any) -> T:
    """The model class cls (a dataclass) read from the JSON object data.
    A field data leaves out, or sets to null, keeps its default; one that
    holds a model class, or a list of them, is read as one. Raises
    ValueError when data is not an object."""
    if not isinstance(data, dict):
        raise ValueError("toolgate: want a JSON object for %s, got %s" % (cls.__name__, type(data).__name__))
    hints = typing.get_type_hints(cls)
    values: Dict[str, Any] = {}
    for f in dataclasses.fields(typing.cast(Any, cls)):
        value = data.get(wire_name(f.name))
        if value is not None:
            values[f.name] = _value(hints[f.name], value)
    return cls(**values)


def _value(hint: Any, value: Any) -> Any:
    """value as a field of type hint holds it."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Union:  # Optional[X]
        inner = [a for a in args if a is not type(None)]
        return _value(inner[0], value) if len(inner) == 1 else value
    if origin is list and isinstance(value, list):
        return [_value(args[0], v) for v in value]
    if dataclasses.is_dataclass(hint):
        return decode(hint, value)
    return value


def decode_list(cls: Type[T], data: Any) -> List[T]:
    """A JSON array of cls, read as decode reads one."""
    if not isinstance(data, list):
        raise ValueError("toolgate: want a JSON array of %s, got %s" % (cls.__name__, type(data).__name__))
    return [decode(cls, item) for item in data]


def body(**fields: Any) -> Dict[str, Any]:
    """A request's JSON object (or query) of fields by their wire names;
    a field that is None is left out."""
    return {wire_name(k): v for k, v in fields.items() if v is not None}


def refusal(status: int, reason: str, raw: bytes) -> APIError:
    """The APIError of a refusal: its error body's code, message and (on a
    409) the call as it is now; the body itself, or the status's reason,
    when it is not toolgate's error JSON."""
    try:
        err = json.loads(raw)["error"]
        entry = err.get("entry")
        return api_error(status, err.get("code", ""), err.get("message", ""), None if entry is None else decode(Entry, entry))
    except (ValueError, KeyError, TypeError, AttributeError):
        return api_error(status, "", raw.decode("utf-8", "replace").strip() or reason)


def envelope(data: Optional[str]) -> Tuple[Optional[Envelope], str]:
    """The envelope an event's data holds, and why it cannot be read as
    version SCHEMA_VERSION ("" when it can). A subscriber that must not
    misread an envelope reads only those that can."""
    try:
        raw = json.loads(data) if data is not None else None
    except ValueError:
        return None, "not JSON"
    if not isinstance(raw, dict):
        return None, "not a JSON object"
    if raw.get("v") != SCHEMA_VERSION:
        return None, "schema version v=%r, this code reads v=%d" % (raw.get("v"), SCHEMA_VERSION)
    for name in ("id", "type", "to", "entry"):
        if name not in raw:
            return None, "no %r field" % name
    try:
        return decode(Envelope, raw), ""
    except ValueError as err:
        return None, str(err)

