"""The bounds the API puts on what a caller sends (wire.MaxString,
MaxID), checked before a request is sent, so that a bad input is named
at its call."""

from __future__ import annotations

import math
from typing import Optional

MAX_ID = 256
MAX_REASON = 4096


def check_id(name: str, value: Optional[str], required: bool = True) -> None:
    """Raises ValueError (TypeError) unless value is an id of 1 to MAX_ID
    bytes; None or "" passes when it is not required."""
    if value is None or value == "":
        if required:
            raise ValueError("%s: required, 1 to %d bytes" % (name, MAX_ID))
        return
    if not isinstance(value, str):
        raise TypeError("%s: want a str, got %s" % (name, type(value).__name__))
    n = len(value.encode("utf-8"))
    if n > MAX_ID:
        raise ValueError("%s: at most %d bytes, got %d" % (name, MAX_ID, n))


def check_reason(reason: str) -> None:
    """Raises ValueError when reason is over MAX_REASON bytes."""
    n = len(reason.encode("utf-8"))
    if n > MAX_REASON:
        raise ValueError("reason: at most %d bytes, got %d" % (MAX_REASON, n))


def check_timeout(name: str, value: object) -> float:
    """value, a finite number of seconds above 0, as a float; raises
    ValueError for anything else."""
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0 or not math.isfinite(value):
        raise ValueError("%s: want a finite number of seconds above 0, got %r" % (name, value))
    return float(value)
