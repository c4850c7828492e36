"""Remote attempts in the store (both backends): the ai attempts parked on a queue until a
remote agent claims them (``runtime/remote.py`` is the cycle they serve).

    park      the worker moves a claimed RunStep from the outbox to ``sw_remote`` (only with
              its fencing token), with the step's timeout as a timer row, in one transaction
    claim     one unclaimed row of the queue is given to an agent (``SKIP LOCKED`` on
              PostgreSQL: two claimers never get the same row) with the sha256 of a fresh
              task token, and the heartbeat deadline as a timer row
    heartbeat moves the heartbeat timer on, and takes it back from a worker about to fire it
              (its fencing token changes, so that worker's TimerFired is refused)
    close     the append that ends the attempt (a report, a deadline, a cancel) deletes the
              row and its timers (``AppendRequest.complete_remote``), so a late report finds
              no row: the token is no longer open"""

from __future__ import annotations

import json
from abc import abstractmethod
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any

from statewright._canonical import canonical_json
from statewright._errors import StaleLeaseError
from statewright._names import remote_timer_ids
from statewright._record import record

_COLS = "command_id, task_id, queue, body, parked_at_ms, heartbeat_ms, agent, claimed_at_ms"


@record
class RemoteRow:
    """One parked attempt: its RunStep command's body (the brief among it), the queue, and
    who claimed it (``agent`` is None while it waits)."""

    command_id: str
    task_id: str
    queue: str
    body: Mapping[str, Any]
    parked_at_ms: int
    heartbeat_ms: int  # the longest an agent that claimed it may go without a heartbeat
    agent: str | None
    claimed_at_ms: int | None


def timeout_timer(command_id: str) -> str:
    return remote_timer_ids(command_id)[0]


def heartbeat_timer(command_id: str) -> str:
    return remote_timer_ids(command_id)[1]


class RemoteSql:
    """The remote-attempt SQL of ``SqlStore`` (a mixin: it uses the store's transaction hooks)."""

    skip_locked: str

    @abstractmethod
    def _tx(self) -> AbstractContextManager[Any]: ...

    @abstractmethod
    def _stmt(self) -> AbstractContextManager[Any]: ...

    @abstractmethod
    def _x(self, cur: Any, sql: str, params: Sequence[Any] = ()) -> Any: ...

    @abstractmethod
    def _work_added_txn(self, cur: Any) -> None: ...

    def park_remote(
        self, command_id: str, token: int, task_id: str, queue: str, body: Mapping[str, Any], now_ms: int,
        timeout_due_ms: int | None, heartbeat_ms: int,
    ) -> None:
        """Park a claimed RunStep on ``queue``; StaleLeaseError (nothing written) when the
        claim is no longer ours."""
        with self._tx() as cur:
            gone = self._x(cur, "DELETE FROM sw_outbox WHERE command_id = ? AND token = ?", (command_id, token))
            if gone.rowcount != 1:
                raise StaleLeaseError(command_id, token, -1)
            self._x(
                cur, "INSERT INTO sw_remote (command_id, task_id, queue, body, parked_at_ms, heartbeat_ms)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (command_id, task_id, queue, canonical_json(dict(body)), now_ms, heartbeat_ms),
            )
            if timeout_due_ms is not None:
                self._x(cur, "INSERT INTO sw_timers (timer_id, task_id, due_at_ms, purpose) VALUES (?, ?, ?, ?)",
                        (timeout_timer(command_id), task_id, timeout_due_ms, "remote_timeout"))
                self._work_added_txn(cur)

    def claim_remote(self, queue: str, agent: str, token_hash: str, now_ms: int) -> RemoteRow | None:
        """The oldest unclaimed attempt of ``queue``, now ``agent``'s under ``token_hash``;
        None when none waits."""
        with self._tx() as cur:
            row = self._x(
                cur,
                "UPDATE sw_remote SET agent = ?, token_hash = ?, claimed_at_ms = ? WHERE agent IS NULL AND"
                " command_id IN (SELECT command_id FROM sw_remote WHERE queue = ? AND agent IS NULL"
                f" ORDER BY parked_at_ms, command_id LIMIT 1{self.skip_locked}) RETURNING {_COLS}",
                (agent, token_hash, now_ms, queue),
            ).fetchone()
            if row is None:
                return None
            found = _row(row)
            self._x(cur, "INSERT INTO sw_timers (timer_id, task_id, due_at_ms, purpose) VALUES (?, ?, ?, ?)",
                    (heartbeat_timer(found.command_id), found.task_id, now_ms + found.heartbeat_ms, "remote_heartbeat"))
            self._work_added_txn(cur)
            return found

    def remote_by_token(self, token_hash: str) -> RemoteRow | None:
        """The open attempt claimed under ``token_hash``; None once it was closed."""
        with self._stmt() as cur:
            row = self._x(cur, f"SELECT {_COLS} FROM sw_remote WHERE token_hash = ?", (token_hash,)).fetchone()
        return _row(row) if row is not None else None

    def heartbeat_remote(self, token_hash: str, now_ms: int) -> RemoteRow | None:
        """Move the heartbeat deadline of the attempt claimed under ``token_hash`` on to a
        full interval from ``now_ms``; None when the attempt is closed or its deadline passed
        (the timer fails the attempt, whether or not a worker fired it yet)."""
        with self._tx() as cur:
            row = self._x(cur, f"SELECT {_COLS} FROM sw_remote WHERE token_hash = ?", (token_hash,)).fetchone()
            if row is None:
                return None
            found = _row(row)
            moved = self._x(
                cur,
                "UPDATE sw_timers SET due_at_ms = ?, token = token + 1, lease_owner = NULL, lease_expires_ms = NULL"
                " WHERE timer_id = ? AND due_at_ms > ?",
                (now_ms + found.heartbeat_ms, heartbeat_timer(found.command_id), now_ms),
            )
            return found if moved.rowcount == 1 else None

    def remote_row(self, command_id: str) -> RemoteRow | None:
        """The parked attempt of ``command_id``, if it is parked."""
        with self._stmt() as cur:
            row = self._x(cur, f"SELECT {_COLS} FROM sw_remote WHERE command_id = ?", (command_id,)).fetchone()
        return _row(row) if row is not None else None

    def remote_rows(self, queue: str | None = None) -> list[RemoteRow]:
        """The parked attempts (of ``queue``), oldest first."""
        where, params = ("WHERE queue = ?", (queue,)) if queue is not None else ("", ())
        with self._stmt() as cur:
            rows = self._x(cur, f"SELECT {_COLS} FROM sw_remote {where} ORDER BY parked_at_ms, command_id",
                           params).fetchall()
        return [_row(r) for r in rows]

    def _close_remote_txn(self, cur: Any, command_id: str) -> None:
        """Inside an append that ends the attempt ``command_id``: its row and timers go."""
        self._x(cur, "DELETE FROM sw_remote WHERE command_id = ?", (command_id,))
        self._x(cur, "DELETE FROM sw_timers WHERE timer_id IN (?, ?)",
                (timeout_timer(command_id), heartbeat_timer(command_id)))


def _row(r: Any) -> RemoteRow:
    return RemoteRow(
        command_id=str(r[0]), task_id=str(r[1]), queue=str(r[2]), body=json.loads(r[3]), parked_at_ms=int(r[4]),
        heartbeat_ms=int(r[5]), agent=None if r[6] is None else str(r[6]),
        claimed_at_ms=None if r[7] is None else int(r[7]),
    )
