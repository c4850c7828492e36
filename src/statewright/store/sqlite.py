"""The embedded default: one SQLite file (stdlib sqlite3), WAL, synchronous=FULL."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from statewright._errors import NotAStatewrightDatabaseError, StoreError
from statewright.store.base import Claim, NewCommand, TimerClaim, Wake
from statewright.store.fleet_sql import fair_params
from statewright.store.sql import SqlStore

SYNCHRONOUS_MODES = ("OFF", "NORMAL", "FULL", "EXTRA")
BUSY_TIMEOUT_SECONDS = 30.0
# Waits between tries for the write lock. SQLite's own busy handler sleeps 1, 2, 5, 10, 15,
# 20, 25 ... ms, far longer than a statewright transaction holds the lock (well under 1 ms),
# so with two workers on one file most of the time went to sleeping on a free lock.
_FIRST_PAUSE_SECONDS = 0.00005
_LONGEST_PAUSE_SECONDS = 0.001


# Whether any command waits for a slot (parameter: now): one seek into the index of waiters.
# A command parked on a spent budget waits for none (its gate is the budget's).
_ANY_WAITER = ("SELECT 1 FROM sw_outbox INDEXED BY sw_outbox_waiters WHERE wait_gate IS NOT NULL"
               " AND wait_gate NOT LIKE 'budget:%' AND lease_expires_ms IS NULL AND available_at_ms > ? LIMIT 1")
# An ack (parameters: command, token, now) that deletes only while no command waits.
_ACK_UNLESS_WAITING = f"DELETE FROM sw_outbox WHERE command_id = ? AND token = ? AND NOT EXISTS ({_ANY_WAITER})"


class SQLiteStore(SqlStore):
    _place = ""  # _place_sql's text, once made
    # SQLite would read the gate's rows by the key instead, every one of them.
    _horizon_of = ("(SELECT MAX(at_ms) FROM sw_rate_log INDEXED BY sw_rate_log_marks"
                   " WHERE command_id = '' AND gate = ?)")

    def __init__(self, path: str | Path, *, synchronous: str = "FULL", create: bool = True) -> None:
        sync = synchronous.upper()
        if sync not in SYNCHRONOUS_MODES:
            msg = f"synchronous must be one of {', '.join(SYNCHRONOUS_MODES)}, got {synchronous!r}"
            raise StoreError(msg)
        self.path = Path(path)
        self.url = str(self.path)
        if not create and not self.path.exists():
            msg = f"{self.path}: no statewright database here; submit a task first or pass --db"
            raise NotAStatewrightDatabaseError(msg)
        if self.path.parent and not self.path.parent.exists():
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        self._last_hash = {}
        try:
            self._conn = sqlite3.connect(
                self.path, isolation_level=None, check_same_thread=False, timeout=30.0
            )
        except sqlite3.DatabaseError as exc:
            msg = f"{self.path}: not a statewright database ({exc})"
            raise NotAStatewrightDatabaseError(msg) from None
        self._depth = 0
        try:
            self._conn.execute("PRAGMA busy_timeout = 30000")
            # Check the schema first: WAL mode is written into the file, and a file that is
            # not a statewright database must be left exactly as it was.
            self.ensure_schema()
            self._conn.execute("PRAGMA journal_mode = WAL")
            self._conn.execute(f"PRAGMA synchronous = {sync}")
            # From here on every statement runs inside _tx, whose BEGIN IMMEDIATE waits for
            # the write lock itself (up to BUSY_TIMEOUT_SECONDS): SQLite must not sleep first.
            self._conn.execute("PRAGMA busy_timeout = 0")
        except sqlite3.DatabaseError as exc:
            self._conn.close()
            msg = f"{self.path}: not a statewright database ({exc})"
            raise NotAStatewrightDatabaseError(msg) from None
        except BaseException:
            self._conn.close()
            raise

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    @contextmanager
    def _tx(self) -> Iterator[Any]:
        with self._lock:
            if self._depth:
                self._depth += 1
                try:
                    yield self._conn.cursor()
                finally:
                    self._depth -= 1
                return
            cur = self._conn.cursor()
            _begin_immediate(cur)
            self._depth = 1
            try:
                yield cur
            except BaseException:
                self._depth = 0
                cur.execute("ROLLBACK")
                raise
            else:
                self._depth = 0
                cur.execute("COMMIT")

    @contextmanager
    def _stmt(self) -> Iterator[Any]:
        """Reads and single-statement writes run in autocommit: each statement is its own
        transaction, so a read takes no write lock and costs no BEGIN and COMMIT (WAL readers
        never wait for the writer). Inside a ``_tx`` they join it."""
        with self._lock:
            yield self._conn.cursor()

    def _x(self, cur: Any, sql: str, params: Sequence[Any] = ()) -> Any:
        """A statement outside a transaction that finds the database locked changed nothing:
        it is tried again, as BEGIN IMMEDIATE is, for up to BUSY_TIMEOUT_SECONDS."""
        if self._depth:
            return super()._x(cur, sql, params)
        try:
            return super()._x(cur, sql, params)
        except sqlite3.OperationalError as exc:
            if not _is_busy(exc):
                raise
        return _when_free(lambda: super(SQLiteStore, self)._x(cur, sql, params))

    def claim(
        self, worker_id: str, now_ms: int, lease_ms: int, limit: int = 1, *, task_id: str | None = None
    ) -> list[Claim]:
        """The shared claim, once a read finds a command due: the poll of an idle worker is a
        read, which takes no write lock from the workers that are committing."""
        if not self._depth and not self._command_due(now_ms, task_id):
            return []
        return super().claim(worker_id, now_ms, lease_ms, limit, task_id=task_id)

    def _claim_where(self, cur: Any, now_ms: int, limit: int, task_id: str | None) -> tuple[str, tuple[Any, ...]]:
        """The due ones, read first and named by id: the claim's transaction holds the write
        lock, so none can be taken in between. An UPDATE ... RETURNING whose rows a compound
        subquery picks took SQLite about 190 us for 8 rows, the two statements about 65."""
        ids = tuple(str(r[0]) for r in self._x(cur, *self._due(now_ms, limit, task_id)).fetchall())
        return (f"command_id IN ({', '.join('?' * len(ids))})" if ids else "0 = 1"), ids

    def claim_timers(
        self, worker_id: str, now_ms: int, lease_ms: int, limit: int = 10, *, task_id: str | None = None
    ) -> list[TimerClaim]:
        """The shared timer claim, once a read finds a timer due (as ``claim``)."""
        if not self._depth and not self._due_now("sw_timers", "due_at_ms", now_ms, task_id):
            return []
        return super().claim_timers(worker_id, now_ms, lease_ms, limit, task_id=task_id)

    def _command_due(self, now_ms: int, task_id: str | None) -> bool:
        """Whether a command is due: a free one by when it is (``sw_outbox_free_due``), or a
        lease that expired (``sw_outbox_leased``); the running steps are not read."""
        one, params = (" AND task_id = ?", (task_id,)) if task_id is not None else ("", ())
        return self._found("SELECT 1 FROM sw_outbox WHERE lease_expires_ms IS NULL AND available_at_ms <= ?"
                           f"{one} UNION ALL SELECT 1 FROM sw_outbox WHERE lease_expires_ms IS NOT NULL"
                           f" AND lease_expires_ms <= ? AND available_at_ms <= ?{one} LIMIT 1",
                           (now_ms, *params, now_ms, now_ms, *params))

    def _due_now(self, table: str, due: str, now_ms: int, task_id: str | None) -> bool:
        one, params = (" AND task_id = ?", (task_id,)) if task_id is not None else ("", ())
        return self._found(f"SELECT 1 FROM {table} WHERE {due} <= ? AND (lease_expires_ms IS NULL"
                           f" OR lease_expires_ms <= ?){one} LIMIT 1", (now_ms, now_ms, *params))

    def _found(self, sql: str, params: Sequence[Any]) -> bool:
        """Whether a read (``LIMIT 1``) returns a row: on its own, or in the caller's
        transaction. Read to its end, so that no read is left open under a write after it."""
        with self._stmt() as cur:
            return bool(self._x(cur, sql, params).fetchall())

    def wake(self, gates: Sequence[str], now_ms: int, count: int = 1) -> None:
        """The shared wake, written only when a command waits for one of ``gates``: reads
        look first, in the caller's transaction (the commit of outcomes that ends the
        claims) or on their own. Writers are serialized, so an admission that counted the
        slot of a claim and gave a command back to wait for it committed before the end of
        that claim could, and a read after that end sees the waiter. The shared UPDATE picks
        its waiters in their order with a sort of its own: a transaction that woke none took
        about 80 us with the UPDATE alone, about 9 with the read first. The first read asks
        whether any command waits at all (one seek); only then is a waiter for ``gates``
        looked for, which costs more (a seek per gate, and SQLite's own index of the list)."""
        with self._lock:
            if not self._found(_ANY_WAITER, (now_ms,)):
                return
            marks = ", ".join("?" * len(gates))
            if not self._found(f"SELECT 1 FROM sw_outbox WHERE wait_gate IN ({marks})"
                               " AND lease_expires_ms IS NULL AND available_at_ms > ? LIMIT 1", (*gates, now_ms)):
                return
            super().wake(gates, now_ms, count)

    def ack(self, command_id: str, token: int, *, wake: Wake | None = None) -> None:
        """With ``wake``, while no command waits for a slot at all, the ack is one DELETE
        that deletes only if none waits, read in its own write: writers are serialized, so
        no command can be given back to wait meanwhile, and none waits once it commits. In
        the claim loop, the shared ack (BEGIN, the delete, the reads, COMMIT) made the last
        ack of a batch cost 26 to 33 us more than one without a wake (bench/README.md). Where
        a command waits, or no claim of ``token`` is there, the shared ack follows."""
        if wake is not None and not self._depth:
            with self._stmt() as cur:
                if self._x(cur, _ACK_UNLESS_WAITING, (command_id, token, wake.now_ms)).rowcount:
                    return
        super().ack(command_id, token, wake=wake)

    def _insert_outbox_txn(self, cur: Any, columns: str, values: str, params: tuple[Any, ...], c: NewCommand) -> None:
        """The row's rowid follows its place in the fair queue: each place has 64 rowids,
        and the row takes the one after the last taken; past them (or at a place of 2**56
        or more), SQLite's own next rowid. So the commands claimed together lie together in
        the table, as they lie in the queue's index, whatever order their tenants' tasks came
        in. With four tenants of weights 1 to 4 submitted in turn, a claim of 8 in the order
        of insertion wrote 8.8 pages to the WAL against 4.8 with no tenants, from four places
        in the table; in the queue's order, 6.2 (bench/README.md, the run of 2026-12-07
        20:09 UTC). The place and its rowid are read first, in the caller's transaction
        (writers are serialized): an INSERT that reads its own table copies its rows first.
        A command of no tenant is inserted as SQLite would: those take their places in the
        order they come, so SQLite's next rowid keeps them in it."""
        if not c.tenant:
            super()._insert_outbox_txn(cur, columns, values, params, c)
            return
        fair, rowid = self._x(cur, self._place_sql(), fair_params(c)).fetchone()
        self._x(cur, f"INSERT INTO sw_outbox (rowid, {columns}, fair) VALUES (?, {values}, ?)", (rowid, *params, fair))

    def _place_sql(self) -> str:
        """A new command's place in the fair queue and the rowid it takes (parameters:
        ``fair_params``), made once."""
        if not self._place:
            place = "f.v * 64"
            self._place = (
                f"SELECT f.v, CASE WHEN f.v < {2 ** 56} THEN (SELECT CASE WHEN n.r < {place} + 64 THEN n.r END FROM"
                f" (SELECT COALESCE(MAX(rowid) + 1, {place}) AS r FROM sw_outbox"
                f" WHERE rowid >= {place} AND rowid < {place} + 64) n) END FROM (SELECT {self._fair_sql()} AS v) f")
        return self._place

    def _is_unique_violation(self, exc: BaseException) -> bool:
        return isinstance(exc, sqlite3.IntegrityError) and "UNIQUE" in str(exc).upper()

    def _tables(self, cur: Any) -> set[str]:
        rows = cur.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
        return {str(r[0]) for r in rows if not str(r[0]).startswith("sqlite_")}

    def _columns(self, cur: Any, table: str) -> set[str]:
        return {str(r[1]) for r in cur.execute(f"PRAGMA table_info({table})").fetchall()}


def _begin_immediate(cur: Any) -> None:
    """BEGIN IMMEDIATE, waiting up to BUSY_TIMEOUT_SECONDS for another writer to finish,
    then failing as SQLite's busy timeout does ("database is locked")."""
    try:
        cur.execute("BEGIN IMMEDIATE")
        return
    except sqlite3.OperationalError as exc:
        if not _is_busy(exc):
            raise
    _when_free(lambda: cur.execute("BEGIN IMMEDIATE"))


def _when_free(attempt: Callable[[], Any]) -> Any:
    """Try ``attempt`` again after short, growing pauses while the database is locked."""
    deadline = time.monotonic() + BUSY_TIMEOUT_SECONDS
    pause = _FIRST_PAUSE_SECONDS
    while True:
        time.sleep(pause)
        try:
            return attempt()
        except sqlite3.OperationalError as exc:
            if not _is_busy(exc) or time.monotonic() >= deadline:
                raise
        pause = min(pause * 2, _LONGEST_PAUSE_SECONDS)


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return (int(code) & 0xFF) == sqlite3.SQLITE_BUSY
    return "locked" in str(exc) or "busy" in str(exc)
