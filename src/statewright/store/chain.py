"""The hash chain over a task's event rows: what a link covers, and how it may be keyed.

Every event row holds ``prev_hash`` (the hash of the row before it, or ``GENESIS_HASH``) and
``hash``, its link. A link's text says its format, so a database keeps verifying across
versions and a task's chain may mix formats (a link covers the text of the one before it):

    <64 hex>                 format 1 (legacy): sha256 of "PREV|VERSION|BODY". The other
                             columns are not covered; verify checks them against the body,
                             and ``statewright db upgrade`` rewrites such chains in format 2
    sha256:<64 hex>          format 2, unkeyed: sha256 over every column of the row
    hmac:<key id>:<64 hex>   format 2, keyed: HMAC-SHA256 under STATEWRIGHT_CHAIN_KEY; the key
                             id (8 hex digits of a hash of the key) tells keys apart

Format 2 covers the row's task id, version, event id, type, time, previous link and body,
each length-prefixed, the body last. Unkeyed, the chain shows accidental damage and naive
edits, but whoever can write to the database can recompute it; keyed, nobody without the
key can produce a link that verifies."""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from statewright._errors import StoreError

GENESIS_HASH = "0" * 64
KEY_ENV = "STATEWRIGHT_CHAIN_KEY"
MIN_KEY_BYTES = 16
_HEX = frozenset("0123456789abcdef")


class RawEvent(NamedTuple):
    """One ``sw_events`` row as the database returned it: nothing parsed or converted."""

    task_id: Any
    version: Any
    event_id: Any
    type: Any
    body: Any
    at_ms: Any
    prev_hash: Any
    hash: Any


def legacy_link(prev_hash: str, version: int, body: str) -> str:
    """Format 1: the hash of one event row written before format 2."""
    return hashlib.sha256(f"{prev_hash}|{version}|{body}".encode()).hexdigest()


def _message(task_id: str, version: int, event_id: str, type_: str, at_ms: int, prev: str, body: str) -> bytes:
    text = (
        f"statewright-chain/2\n{len(task_id)}:{task_id}\n{version}\n{len(event_id)}:{event_id}\n"
        f"{len(type_)}:{type_}\n{at_ms}\n{len(prev)}:{prev}\n{body}"
    )
    return text.encode("utf-8", "surrogatepass")


def key_id(key: bytes) -> str:
    """8 hex digits naming a key without revealing it."""
    return hashlib.sha256(b"statewright chain key id\0" + key).hexdigest()[:8]


@dataclass(frozen=True)
class LinkFormat:
    """What a stored link's text says about how it was made."""

    version: int  # 1 (legacy) or 2; 0 when the text is no link statewright writes
    keyed: bool = False
    key_id: str = ""

    @property
    def name(self) -> str:
        if self.version == 1:
            return "legacy sha256"
        if self.version == 2:
            return f"hmac (key id {self.key_id})" if self.keyed else "sha256"
        return "unknown"


def link_format(link: str) -> LinkFormat:
    if len(link) == 64 and set(link) <= _HEX:
        return LinkFormat(1)
    head, _, digest = link.rpartition(":")
    if len(digest) != 64 or not set(digest) <= _HEX:
        return LinkFormat(0)
    if head == "sha256":
        return LinkFormat(2)
    kind, _, kid = head.partition(":")
    if kind == "hmac" and len(kid) == 8 and set(kid) <= _HEX:
        return LinkFormat(2, keyed=True, key_id=kid)
    return LinkFormat(0)


@dataclass(frozen=True, repr=False)
class Chain:
    """Makes and checks links; keyed when it holds a key (never shown by repr)."""

    key: bytes | None = None
    key_id: str = field(init=False, default="")

    def __post_init__(self) -> None:
        object.__setattr__(self, "key_id", key_id(self.key) if self.key else "")

    def __repr__(self) -> str:
        return f"Chain(key id {self.key_id})" if self.key else "Chain(unkeyed)"

    def link(self, task_id: str, version: int, event_id: str, type_: str, at_ms: int, prev: str, body: str) -> str:
        """The link of a new event row, in format 2 (keyed when this chain has a key)."""
        message = _message(task_id, version, event_id, type_, at_ms, prev, body)
        if self.key is None:
            return "sha256:" + hashlib.sha256(message).hexdigest()
        return f"hmac:{self.key_id}:" + hmac.digest(self.key, message, "sha256").hex()

    def recompute(self, row: RawEvent) -> str | None:
        """What the row's link should be, made the way its stored text says it was made;
        None when that cannot be known here (a keyed link and no key, or another key's)."""
        fmt = link_format(str(row.hash))
        if fmt.version == 1:
            return legacy_link(str(row.prev_hash), int(row.version), str(row.body))
        args = (str(row.task_id), int(row.version), str(row.event_id), str(row.type), int(row.at_ms),
                str(row.prev_hash), str(row.body))
        if fmt.version == 2 and not fmt.keyed:
            return Chain().link(*args)
        if fmt.version == 2 and self.key is not None and fmt.key_id == self.key_id:
            return self.link(*args)
        return None

    def is_current(self, link: str) -> bool:
        """True when ``link`` is in the format this chain writes (so a rewrite gains nothing)."""
        fmt = link_format(link)
        return fmt.version == 2 and fmt.keyed == (self.key is not None) and fmt.key_id == self.key_id


def chain_from_env(environ: Mapping[str, str] | None = None) -> Chain:
    """The chain the worker's environment asks for: keyed by STATEWRIGHT_CHAIN_KEY (its UTF-8
    bytes, at least 16) when set and not empty."""
    value = (os.environ if environ is None else environ).get(KEY_ENV, "")
    if not value:
        return Chain()
    key = value.encode("utf-8", "surrogatepass")
    if len(key) < MIN_KEY_BYTES:
        msg = (
            f"{KEY_ENV} is {len(key)} bytes long; a chain key needs at least {MIN_KEY_BYTES} "
            "(make one with: python -c 'import secrets; print(secrets.token_hex(32))')"
        )
        raise StoreError(msg)
    return Chain(key)
