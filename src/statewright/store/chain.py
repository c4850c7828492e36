"""The hash chains over the append-only logs: what a link covers, how it may be keyed, and
how a chain is walked. Two logs are chained the same way: each task's event rows
(``sw_events``, one chain per task) and the people log (``sw_user_log``, one chain).

Every row holds ``prev_hash`` (the link of the row before it, or ``GENESIS_HASH``) and
``hash``, its link. A link's text says its format, so a database keeps verifying across
versions and a chain may mix formats (a link covers the text of the one before it):

    <64 hex>                 format 1 (legacy): sha256 of "PREV|POSITION|BODY" (POSITION is an
                             event's version, a people log row's seq). The other columns are
                             not covered; verify checks them against the body, and
                             ``statewright db upgrade`` rewrites such chains in format 2
    sha256:<64 hex>          format 2, unkeyed: sha256 over every column of the row
    hmac:<key id>:<64 hex>   format 2, keyed: HMAC-SHA256 under STATEWRIGHT_CHAIN_KEY; the key
                             id (8 hex digits of a hash of the key) tells keys apart

Format 2 covers every column but the link itself, each length-prefixed, the previous link
and then the body last, after a first line naming the log (so a row of one log is never a
row of the other): an event's task id, version, event id, type and time; a people log
row's seq, time, actor, action and subject. Unkeyed, a chain shows accidental damage and
naive edits, but whoever can write to the database can recompute it; keyed, nobody without
the key can produce a link that verifies."""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from statewright._errors import StoreError
from statewright._record import record

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


class RawPeopleRow(NamedTuple):
    """One ``sw_user_log`` row as the database returned it: nothing parsed or converted."""

    seq: Any
    at_ms: Any
    actor: Any
    action: Any
    subject: Any
    body: Any
    prev_hash: Any
    hash: Any


RawRow = RawEvent | RawPeopleRow
_EVENTS = "statewright-chain/2"
_PEOPLE = "statewright-people/2"


def position(row: RawRow) -> Any:
    """Where a row says it stands in its chain (an event's version, a people row's seq)."""
    return row.seq if isinstance(row, RawPeopleRow) else row.version


def legacy_link(prev_hash: str, position: int, body: str) -> str:
    """Format 1: the link of one row written before format 2."""
    return hashlib.sha256(f"{prev_hash}|{position}|{body}".encode()).hexdigest()


def _message(log: str, columns: Sequence[str | int], prev: str, body: str) -> bytes:
    parts = [log, *(f"{len(c)}:{c}" if isinstance(c, str) else str(c) for c in columns), f"{len(prev)}:{prev}", body]
    return "\n".join(parts).encode("utf-8", "surrogatepass")


def _columns(row: RawRow) -> tuple[str, tuple[str | int, ...]]:
    """The log a row belongs to and its columns as a link covers them (raises TypeError or
    ValueError when an edit left a non-number in a number column)."""
    if isinstance(row, RawPeopleRow):
        return _PEOPLE, (int(row.seq), int(row.at_ms), str(row.actor), str(row.action), str(row.subject))
    return _EVENTS, (str(row.task_id), int(row.version), str(row.event_id), str(row.type), int(row.at_ms))


def key_id(key: bytes) -> str:
    """8 hex digits naming a key without revealing it."""
    return hashlib.sha256(b"statewright chain key id\0" + key).hexdigest()[:8]


@record
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
        return self._link(_message(_EVENTS, (task_id, version, event_id, type_, at_ms), prev, body))

    def people_link(self, seq: int, at_ms: int, actor: str, action: str, subject: str, prev: str, body: str) -> str:
        """The link of a new people log row, in format 2 (keyed when this chain has a key)."""
        return self._link(_message(_PEOPLE, (seq, at_ms, actor, action, subject), prev, body))

    def _link(self, message: bytes) -> str:
        if self.key is None:
            return "sha256:" + hashlib.sha256(message).hexdigest()
        return f"hmac:{self.key_id}:" + hmac.digest(self.key, message, "sha256").hex()

    def recompute(self, row: RawRow) -> str | None:
        """What the row's link should be, made the way its stored text says it was made;
        None when that cannot be known here (a keyed link and no key, or another key's)."""
        fmt = link_format(str(row.hash))
        if fmt.version == 1:
            return legacy_link(str(row.prev_hash), int(position(row)), str(row.body))
        log, columns = _columns(row)
        message = _message(log, columns, str(row.prev_hash), str(row.body))
        if fmt.version == 2 and not fmt.keyed:
            return Chain()._link(message)
        if fmt.version == 2 and self.key is not None and fmt.key_id == self.key_id:
            return self._link(message)
        return None

    def is_current(self, link: str) -> bool:
        """True when ``link`` is in the format this chain writes (so a rewrite gains nothing)."""
        fmt = link_format(link)
        return fmt.version == 2 and fmt.keyed == (self.key is not None) and fmt.key_id == self.key_id


NOT_KEYED = "the chain is not keyed"


def _why(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def check_chain(rows: Sequence[RawRow], chain: Chain, say: Callable[[str], None], *,
                row: str = "event", number: str = "version") -> None:
    """Walk one chain (a task's events, or the people log), saying each problem in one line:
    positions 1..N without gaps, each ``prev_hash`` the link before it, each link recomputed,
    keyed links with the key given, nothing unkeyed after a keyed link, and with a key given
    the last link keyed by it (it covers all before it). The first broken link ends the walk.
    ``row`` and ``number`` name a row and its position in the findings."""
    prev: str = GENESIS_HASH
    keyed_seen = False
    unchecked_key = ""
    for at, r in enumerate(rows, start=1):
        value = position(r)
        if not isinstance(value, int) or isinstance(value, bool):
            say(f"{row} at position {at}: {number} {value!r} is not an integer")
            return
        if value != at:
            say(f"{row} {number}s jump to {value} at position {at}")
            return
        where = f"{row} {number} {value}"
        if not isinstance(r.hash, str) or not isinstance(r.prev_hash, str):
            say(f"{where}: its hash columns are not text")
            return
        fmt = link_format(r.hash)
        if fmt.version == 0:
            say(f"hash chain broken at {where}: {r.hash[:20]!r} is not a link statewright writes")
            return
        if r.prev_hash != prev:
            say(f"hash chain broken at {where}: prev_hash is not the link before it")
            return
        if keyed_seen and not fmt.keyed:
            say(f"hash chain broken at {where}: an unkeyed link follows keyed ones (the chain was rewritten)")
            return
        keyed_seen = keyed_seen or fmt.keyed
        if fmt.keyed and fmt.key_id != chain.key_id:
            if chain.key is not None:
                say(f"hash chain broken at {where}: keyed with key id {fmt.key_id}, not the key given "
                    f"(key id {chain.key_id})")
                return
            unchecked_key = fmt.key_id
        else:
            try:
                expected = chain.recompute(r)
            except (TypeError, ValueError) as exc:
                say(f"hash chain broken at {where}: a column cannot be read ({_why(exc)})")
                return
            if expected != r.hash:
                say(f"hash chain broken at {where}")
                return
        prev = r.hash
    if unchecked_key:
        say(f"the chain is keyed (key id {unchecked_key}); set {KEY_ENV} to check its links")
    elif chain.key is not None and rows and not chain.is_current(prev):
        say(f"{NOT_KEYED} (its last link is {link_format(prev).name}): anyone with write "
            f"access could have rewritten it; 'statewright db upgrade' with {KEY_ENV} set keys it")


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
