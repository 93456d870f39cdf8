"""How toolgate names a call: its pendingId, made of its conversation's
id and its tool call id (machine.PendingID), so that a caller knows the
name of a call before toolgate answers."""

from __future__ import annotations

import base64
import hashlib
import re

_PLAIN_TOKEN = re.compile(r"^[A-Za-z0-9_-]+$")
_PENDING_ID = re.compile(r"^(=?[A-Za-z0-9_-]+|==[A-Za-z0-9_-]+)\.(=?[A-Za-z0-9_-]+|==[A-Za-z0-9_-]+)$")


def key_token(s: str) -> str:
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


def pending_id(conversation_id: str, tool_call_id: str) -> str:
    """The pendingId toolgate gives the call tool_call_id of
    conversation_id (machine.PendingID)."""
    return key_token(conversation_id) + "." + key_token(tool_call_id)


def is_pending_id(s: object) -> bool:
    """Whether s has the form of a pendingId."""
    return isinstance(s, str) and _PENDING_ID.match(s) is not None
