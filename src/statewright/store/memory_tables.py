"""The tables of an in-memory database (store/memory.py) and the transaction that writes
them: each write is recorded with how to undo it, so a refused transaction leaves nothing."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from statewright._errors import NotAStatewrightDatabaseError
from statewright._record import record
from statewright.store.chain import RawEvent
from statewright.store.remote import RemoteRow

_MISSING = object()


@record
class TaskRow:
    task_id: str
    workflow: str
    workflow_hash: str
    status: str
    version: int
    state: str  # JSON text, as the SQL stores keep it
    idem_key: str | None
    last_hash: str
    created_at_ms: int
    updated_at_ms: int
    parent_id: str | None = None
    kind: str = "task"


@record
class CommandRow:
    command_id: str
    task_id: str
    type: str
    body: str
    available_at_ms: int
    lease_owner: str | None = None
    lease_expires_ms: int | None = None
    token: int = 0
    deliveries: int = 0
    failures: int = 0
    last_error: str = ""
    priority: int = 0
    tenant: str = ""
    fair: int = 0
    gates: str | None = None
    waiting: str | None = None
    wait_gate: str | None = None
    slot_token: int | None = None  # the token of the claim admitted holding slots (store/admission.py)


@record
class TimerRow:
    timer_id: str
    task_id: str
    due_at_ms: int
    purpose: str
    lease_owner: str | None = None
    lease_expires_ms: int | None = None
    token: int = 0


@record
class RemoteEntry:
    row: RemoteRow
    token_hash: str | None = None


class Txn:
    """The writes of one transaction, each with how to undo it."""

    def __init__(self) -> None:
        self._undo: list[tuple[dict[Any, Any], Any, Any]] = []

    def put(self, table: dict[Any, Any], key: Any, value: Any) -> None:
        self._undo.append((table, key, table.get(key, _MISSING)))
        table[key] = value

    def delete(self, table: dict[Any, Any], key: Any) -> bool:
        if key not in table:
            return False
        self._undo.append((table, key, table[key]))
        del table[key]
        return True

    def rollback(self) -> None:
        for table, key, old in reversed(self._undo):
            if old is _MISSING:
                table.pop(key, None)
            else:
                table[key] = old
        self._undo.clear()


class Database:
    """The tables of one in-memory database."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.definitions: dict[str, tuple[str, int, str]] = {}  # hash -> (name, version, body)
        self.tasks: dict[str, TaskRow] = {}
        self.events: dict[str, tuple[RawEvent, ...]] = {}
        self.event_ids: dict[str, tuple[str, int]] = {}  # event id -> (task id, version)
        self.idem_keys: dict[str, str] = {}
        self.outbox: dict[str, CommandRow] = {}
        self.timers: dict[str, TimerRow] = {}
        self.remote: dict[str, RemoteEntry] = {}  # command id -> a parked remote attempt
        self.users: dict[str, tuple[tuple[str, ...], bool, int]] = {}  # name -> (roles, active, updated)
        self.tokens: dict[str, tuple[str, str, int, int | None]] = {}  # id -> (hash, name, issued, revoked)
        self.people_log: dict[int, Any] = {}  # seq -> RawPeopleRow
        # The fleet (store/admission.py): its config, rate log, usage per day.
        self.fleet: Any = None  # FleetConfig, or None: nothing configured
        self.rate_log: dict[str, list[list[Any]]] = {}  # gate -> [[at_ms, command id, tokens, starts]]
        self.rate_horizon: dict[str, int] = {}  # gate -> rows at or before this may have been forgotten
        self.usage: dict[tuple[str, int], tuple[int, float]] = {}  # (tenant, day) -> (tokens, usd)

    @contextmanager
    def txn(self) -> Iterator[Txn]:
        with self.lock:
            txn = Txn()
            try:
                yield txn
            except BaseException:
                txn.rollback()
                raise


_NAMED: dict[str, Database] = {}
_NAMED_LOCK = threading.Lock()


def name_of(url: str) -> str:
    return url.removeprefix("memory:").lstrip("/")


def database(name: str, create: bool) -> Database:
    if not name:
        return Database()
    with _NAMED_LOCK:
        if name not in _NAMED and not create:
            msg = f"memory:{name}: no in-memory database of that name in this process"
            raise NotAStatewrightDatabaseError(msg)
        return _NAMED.setdefault(name, Database())


def drop_database(url: str) -> None:
    """Forget the named in-memory database ``url``; stores still open on it keep its tables."""
    with _NAMED_LOCK:
        _NAMED.pop(name_of(url), None)


def database_exists(url: str) -> bool:
    """Whether this process holds the named in-memory database ``url`` (``memory:NAME``)."""
    with _NAMED_LOCK:
        return bool(name_of(url)) and name_of(url) in _NAMED
