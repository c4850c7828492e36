"""The shared SQL of both backends. Dialects override a few hooks: how a transaction is
opened, the placeholder style, the row-lock clause, how driver errors are classified, and
how idle workers learn that work was added (``_work_added_txn`` / ``wait_for_work``)."""

from __future__ import annotations

import json
import re
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import replace
from typing import Any

from statewright._canonical import canonical_json, compact_json
from statewright._crash import crash_point
from statewright._errors import (
    NotAStatewrightDatabaseError,
    SchemaVersionError,
    StaleLeaseError,
    VersionConflictError,
)
from statewright._record import record
from statewright.store.base import (
    CLAIMABLE_AT_ONCE,
    TASK_KIND,
    AppendRequest,
    AppendResult,
    Claim,
    EventRow,
    NewCommand,
    PollingWaits,
    StoredTask,
    TimerClaim,
    Wake,
)
from statewright.store.chain import GENESIS_HASH, Chain, RawEvent
from statewright.store.fleet_sql import FleetSql, fair_params
from statewright.store.people import PeopleSql
from statewright.store.remote import RemoteSql
from statewright.store.schema import MIGRATIONS, SCHEMA_VERSION

__all__ = ["GENESIS_HASH", "SqlStore"]
_CLAIM_COLS = "command_id, task_id, type, body, token, deliveries, failures, lease_expires_ms"
_LAST_HASH_CACHE_MAX = 10_000  # tasks whose (version, last event hash) a store remembers
_ADD_COLUMN = re.compile(r"ALTER TABLE (\w+) ADD COLUMN (\w+)")
_TASK_COLS = "task_id, workflow, workflow_hash, status, version, state, created_at_ms, updated_at_ms"


class SqlStore(PollingWaits, PeopleSql, RemoteSql, FleetSql, ABC):
    url: str = ""
    skip_locked: str = ""
    announces_work: bool = False  # True: wait_for_work wakes on new work, so idle waits can be long
    chain: Chain = Chain()  # how event rows are linked; open_store keys it from the environment
    _last_hash: dict[str, tuple[int, str, str]]  # task -> (version, last hash, status) as stored

    # --- dialect hooks ---------------------------------------------------------------
    @abstractmethod
    def close(self) -> None:
        """Release connections."""

    @abstractmethod
    def _tx(self) -> AbstractContextManager[Any]:
        """Each dialect defines it."""

    def _stmt(self) -> AbstractContextManager[Any]:
        """For reads and single-statement writes, where each statement is atomic on its own:
        PostgreSQL runs them in autocommit (no BEGIN/COMMIT round trips); by default (SQLite)
        this is an ordinary ``_tx()``."""
        return self._tx()

    @abstractmethod
    def _is_unique_violation(self, exc: BaseException) -> bool:
        """Each dialect defines it."""

    def _sql(self, sql: str) -> str:
        return sql

    @abstractmethod
    def _tables(self, cur: Any) -> set[str]:
        """Each dialect defines it."""

    def _columns(self, cur: Any, table: str) -> set[str]:
        """The column names of ``table`` (the standard catalogue; SQLite overrides it)."""
        rows = self._x(cur, "SELECT column_name FROM information_schema.columns"
                            " WHERE table_schema = current_schema() AND table_name = ?", (table,)).fetchall()
        return {str(r[0]) for r in rows}

    def _work_added_txn(self, cur: Any) -> None:
        """Inside a transaction that leaves claimable work for other workers (new outbox rows
        or timers, a released command). PostgreSQL sends NOTIFY; SQLite has no one to tell."""
        return None

    def _x(self, cur: Any, sql: str, params: Sequence[Any] = ()) -> Any:
        cur.execute(self._sql(sql), tuple(params))
        return cur

    # --- schema ----------------------------------------------------------------------
    def schema_version(self) -> int:
        with self._stmt() as cur:
            tables = self._tables(cur)
            if "sw_meta" not in tables:
                return 0
            row = self._x(cur, "SELECT value FROM sw_meta WHERE key = ?", ("schema_version",)).fetchone()
            return int(row[0]) if row else 0

    def ensure_schema(self, *, upgrade: bool = True) -> int:
        """Create a fresh schema, or apply pending migrations; refuse foreign or newer ones."""
        with self._tx() as cur:
            tables = self._tables(cur)
            if "sw_meta" not in tables:
                if tables - {"sw_meta"} and not any(t.startswith("loop_") for t in tables):
                    msg = (
                        f"{self.url}: this database has tables but is not a statewright database "
                        f"(found: {', '.join(sorted(tables)[:5])}); point --db at another file"
                    )
                    raise NotAStatewrightDatabaseError(msg)
                self._x(cur, "CREATE TABLE IF NOT EXISTS sw_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
                self._x(cur, "INSERT INTO sw_meta (key, value) VALUES (?, ?)", ("app", "statewright"))
                self._x(cur, "INSERT INTO sw_meta (key, value) VALUES (?, ?)", ("schema_version", "0"))
                current = 0
            else:
                row = self._x(cur, "SELECT value FROM sw_meta WHERE key = ?", ("schema_version",)).fetchone()
                current = int(row[0]) if row else 0
            if current > SCHEMA_VERSION:
                msg = (
                    f"{self.url}: the database schema is version {current}, newer than this "
                    f"statewright understands ({SCHEMA_VERSION}); upgrade statewright"
                )
                raise SchemaVersionError(msg)
            if current < SCHEMA_VERSION and not upgrade:
                msg = f"{self.url}: schema version {current} needs an upgrade; run 'statewright db upgrade'"
                raise SchemaVersionError(msg)
            for v in range(current + 1, SCHEMA_VERSION + 1):
                for stmt in MIGRATIONS[v]:
                    added = _ADD_COLUMN.match(stmt)
                    if added is not None and added[2] in self._columns(cur, added[1]):
                        continue  # a migration run again (the version was set back): it is there
                    self._x(cur, stmt)
                self._x(cur, "UPDATE sw_meta SET value = ? WHERE key = ?", (str(v), "schema_version"))
            return SCHEMA_VERSION

    # --- definitions -----------------------------------------------------------------
    def put_definition(self, content_hash: str, name: str, version: int, body: Mapping[str, Any]) -> None:
        with self._tx() as cur:
            if self._x(cur, "SELECT 1 FROM sw_definitions WHERE hash = ?", (content_hash,)).fetchone():
                return
            self._x(
                cur, "INSERT INTO sw_definitions (hash, name, version, body) VALUES (?, ?, ?, ?)",
                (content_hash, name, version, canonical_json(body)),
            )

    def get_definition(self, content_hash: str) -> Mapping[str, Any] | None:
        with self._stmt() as cur:
            row = self._x(cur, "SELECT body FROM sw_definitions WHERE hash = ?", (content_hash,)).fetchone()
        return json.loads(row[0]) if row else None

    def definition_by_name(self, name: str) -> str | None:
        with self._stmt() as cur:
            row = self._x(cur, "SELECT hash FROM sw_definitions WHERE name = ? ORDER BY version DESC, hash LIMIT 1",
                          (name,)).fetchone()
        return str(row[0]) if row else None

    # --- the one transaction ---------------------------------------------------------
    def append(
        self,
        task_id: str,
        expected_version: int,
        event: Mapping[str, Any],
        state: Mapping[str, Any],
        commands: Sequence[NewCommand],
        *,
        workflow: str = "",
        workflow_hash: str = "",
        idem_key: str | None = None,
        complete: tuple[str, int] | None = None,
        complete_timer: tuple[str, int] | None = None,
        terminal: bool = False,
        claim_for: tuple[str, int] | None = None,
        complete_remote: str | None = None,
        kind: str = TASK_KIND,
    ) -> AppendResult:
        req = AppendRequest(task_id, expected_version, event, state, commands, complete=complete,
                            complete_timer=complete_timer, terminal=terminal, claim_for=claim_for,
                            complete_remote=complete_remote, workflow=workflow, workflow_hash=workflow_hash,
                            idem_key=idem_key, kind=kind)
        event_id = str(event["event_id"])
        encoded = _Encoded.of(req)
        try:
            with self._tx() as cur:
                if expected_version == 0:
                    dup = self._duplicate_txn(cur, event_id)
                    if dup is not None:
                        return dup
                    if idem_key is not None:
                        row = self._x(
                            cur, "SELECT task_id, version FROM sw_tasks WHERE idem_key = ?", (idem_key,)
                        ).fetchone()
                        if row is not None:
                            return AppendResult(version=int(row[1]), duplicate=True)
                res, h = self._append_txn(cur, req, encoded)
        except (VersionConflictError, StaleLeaseError):
            raise
        except Exception as exc:
            if self._is_unique_violation(exc):
                if expected_version != 0:
                    # Past version 0 the event id is not looked up first: its unique index
                    # refuses a duplicate, which is reported as before.
                    with self._tx() as cur:
                        dup = self._duplicate_txn(cur, event_id)
                    if dup is not None:
                        return dup
                raise VersionConflictError(task_id, expected_version, expected_version + 1) from None
            raise
        if not res.duplicate:
            self._remember(task_id, res.version, h, str(state.get("status", "")))
        return res

    def encode(self, request: AppendRequest) -> AppendRequest:
        return replace(request, encoded=_Encoded.of(request))

    def append_batch(
        self, requests: Sequence[AppendRequest], *, wake: Wake | None = None
    ) -> list[AppendResult] | None:
        """Every request in ONE transaction, or none: any refusal (a version conflict, a stale
        lease, a duplicate event id) rolls the whole batch back and returns None. ``wake``
        joins the transaction."""
        encoded = [_Encoded.of(r) for r in requests]  # outside the transaction: less time holding the lock
        try:
            with self._tx() as cur:
                done = [self._append_txn(cur, r, e) for r, e in zip(requests, encoded, strict=True)]
                if any(res.duplicate for res, _ in done):
                    raise _Refused
                if wake is not None:
                    self.wake(wake.gates, wake.now_ms, wake.count)
        except (VersionConflictError, StaleLeaseError, _Refused):
            return None
        except Exception as exc:
            if self._is_unique_violation(exc):
                return None
            raise
        for r, (res, h) in zip(requests, done, strict=True):
            if not res.duplicate:
                self._remember(r.task_id, res.version, h, str(r.state.get("status", "")))
        return [res for res, _ in done]

    def append_all(self, requests: Sequence[AppendRequest]) -> list[AppendResult]:
        encoded = [_Encoded.of(r) for r in requests]
        first = requests[0]
        try:
            with self._tx() as cur:
                dup = self._duplicate_txn(cur, str(first.event["event_id"]))
                if dup is not None:
                    return [dup]
                done = [self._append_txn(cur, r, e) for r, e in zip(requests, encoded, strict=True)]
                if any(res.duplicate for res, _ in done):
                    raise VersionConflictError(first.task_id, first.expected_version, -1)
        except (VersionConflictError, StaleLeaseError):
            raise
        except Exception as exc:
            if self._is_unique_violation(exc):
                raise VersionConflictError(first.task_id, first.expected_version, -1) from None
            raise
        for r, (res, h) in zip(requests, done, strict=True):
            self._remember(r.task_id, res.version, h, str(r.state.get("status", "")))
        return [res for res, _ in done]

    def _remember(self, task_id: str, version: int, last_hash: str, status: str) -> None:
        """Remember the hash of a task's event at ``version`` and the status it left (an
        event never changes once written), so the next append chained to it needs no read,
        and writes the status only when it changes."""
        if len(self._last_hash) >= _LAST_HASH_CACHE_MAX:
            self._last_hash.clear()
        self._last_hash[task_id] = (version, last_hash, status)

    def _append_txn(self, cur: Any, req: AppendRequest, encoded: _Encoded) -> tuple[AppendResult, str]:
        """The writes of one append inside the caller's transaction; raises on a refusal
        (the caller rolls back). Returns the result and the new event's hash."""
        task_id, expected_version, event = req.task_id, req.expected_version, req.event
        body, state_json = encoded.body, encoded.state_json
        event_id = str(event["event_id"])
        at_ms = int(event["at_ms"])
        version = expected_version + 1
        status = str(req.state.get("status", ""))
        event_type = str(event["type"])
        if expected_version == 0:
            prev = GENESIS_HASH
            h = self.chain.link(task_id, version, event_id, event_type, at_ms, prev, body)
            self._x(
                cur,
                "INSERT INTO sw_tasks (task_id, workflow, workflow_hash, status, version, state,"
                " idem_key, last_hash, created_at_ms, updated_at_ms, parent_id, kind)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (task_id, req.workflow, req.workflow_hash, status, version, state_json, req.idem_key, h, at_ms,
                 at_ms, req.parent_id, req.kind),
            )
        else:
            known = self._last_hash.get(task_id)
            remembered = known is not None and known[0] == expected_version
            for _ in range(2):
                if remembered and known is not None:
                    prev, was = known[1], known[2]
                else:
                    row = self._x(
                        cur, "SELECT version, last_hash, status FROM sw_tasks WHERE task_id = ?", (task_id,)
                    ).fetchone()
                    if row is None or int(row[0]) != expected_version:
                        dup = self._duplicate_txn(cur, event_id)
                        if dup is not None:
                            return dup, ""
                        actual = int(row[0]) if row is not None else 0
                        raise VersionConflictError(task_id, expected_version, actual)
                    prev, was = str(row[1]), str(row[2])
                h = self.chain.link(task_id, version, event_id, event_type, at_ms, prev, body)
                # The link must follow the task's last one as stored, not a remembered one
                # that was since rewritten (``rechain``) or moved on: then read it and try again.
                # The status is set only when it changes: SQLite rewrites the status index's
                # entry for every UPDATE that names the column, a page more in every commit.
                if status == was:
                    upd = self._x(
                        cur,
                        "UPDATE sw_tasks SET version = ?, state = ?, last_hash = ?, updated_at_ms = ?"
                        " WHERE task_id = ? AND version = ? AND last_hash = ? AND status = ?",
                        (version, state_json, h, at_ms, task_id, expected_version, prev, status),
                    )
                else:
                    upd = self._x(
                        cur,
                        "UPDATE sw_tasks SET status = ?, version = ?, state = ?, last_hash = ?,"
                        " updated_at_ms = ? WHERE task_id = ? AND version = ? AND last_hash = ?",
                        (status, version, state_json, h, at_ms, task_id, expected_version, prev),
                    )
                if upd.rowcount == 1:
                    break
                if not remembered:
                    raise VersionConflictError(task_id, expected_version, expected_version + 1)
                self._last_hash.pop(task_id, None)
                remembered = False
        self._x(
            cur,
            "INSERT INTO sw_events (task_id, version, event_id, type, body, at_ms, prev_hash, hash)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (task_id, version, event_id, event_type, body, at_ms, prev, h),
        )
        if req.complete is not None:
            self._finish_command_txn(cur, *req.complete)
        if req.complete_timer is not None:
            gone = self._x(cur, "DELETE FROM sw_timers WHERE timer_id = ? AND token = ?", req.complete_timer)
            if gone.rowcount != 1:
                raise StaleLeaseError(req.complete_timer[0], req.complete_timer[1], -1)
        if req.complete_remote is not None:
            self._close_remote_txn(cur, req.complete_remote)
        if req.terminal:  # what is left to do ends with the task; its notifications are still sent
            self._x(cur, "DELETE FROM sw_outbox WHERE task_id = ? AND type <> 'Notify'", (task_id,))
            self._x(cur, "DELETE FROM sw_timers WHERE task_id = ?", (task_id,))
        claimed = None
        claim_for = req.claim_for
        for c, body_json in zip(req.commands, encoded.command_bodies, strict=True):
            if c.timer:
                self._x(
                    cur,
                    "INSERT INTO sw_timers (timer_id, task_id, due_at_ms, purpose) VALUES (?, ?, ?, ?)",
                    (c.command_id, task_id, c.available_at_ms, c.purpose),
                )
                continue
            if claim_for is not None and claimed is None and c.type in CLAIMABLE_AT_ONCE and c.chainable:
                claimed = self._insert_claimed_txn(cur, task_id, c, body_json, *claim_for)
                continue
            self._insert_outbox_txn(
                cur, "command_id, task_id, type, body, available_at_ms, priority, tenant, gates",
                "?, ?, ?, ?, ?, ?, ?, ?",
                (c.command_id, task_id, c.type, body_json, c.available_at_ms, c.priority, c.tenant, c.gates), c,
            )
        if any(c.timer or claimed is None or c.command_id != claimed.command_id for c in req.commands):
            self._work_added_txn(cur)
        crash_point("in_append_txn")
        return AppendResult(version=version, claimed=claimed), h

    def _duplicate_txn(self, cur: Any, event_id: str) -> AppendResult | None:
        """The recorded result when ``event_id`` is already in the log."""
        dup = self._x(cur, "SELECT task_id, version FROM sw_events WHERE event_id = ?", (event_id,)).fetchone()
        return AppendResult(version=int(dup[1]), duplicate=True) if dup is not None else None

    def _insert_outbox_txn(self, cur: Any, columns: str, values: str, params: tuple[Any, ...], c: NewCommand) -> None:
        """Insert one outbox row: ``columns``, their ``values`` and ``params``, and the
        place in the fair queue of ``c`` (``_fair_sql``)."""
        self._x(cur, f"INSERT INTO sw_outbox ({columns}, fair) VALUES ({values}, {self._fair_sql()})",
                (*params, *fair_params(c)))

    def _finish_command_txn(self, cur: Any, command_id: str, token: int) -> None:
        gone = self._x(cur, "DELETE FROM sw_outbox WHERE command_id = ? AND token = ?", (command_id, token))
        if gone.rowcount != 1:
            row = self._x(cur, "SELECT token FROM sw_outbox WHERE command_id = ?", (command_id,)).fetchone()
            raise StaleLeaseError(command_id, token, int(row[0]) if row else -1)

    def _insert_claimed_txn(
        self, cur: Any, task_id: str, c: NewCommand, body_json: str, worker_id: str, lease_expires_ms: int
    ) -> Claim:
        """Insert a new command already claimed by ``worker_id``: one statement that leaves the
        row, and returns the Claim, that inserting it and then claiming it would (token and
        deliveries 0 -> 1)."""
        self._insert_outbox_txn(
            cur, "command_id, task_id, type, body, available_at_ms, lease_owner, lease_expires_ms, token, deliveries,"
            " priority", "?, ?, ?, ?, ?, ?, ?, 1, 1, ?",
            (c.command_id, task_id, c.type, body_json, c.available_at_ms, worker_id, lease_expires_ms, c.priority), c,
        )
        return Claim(
            command_id=c.command_id, task_id=task_id, type=c.type, body=json.loads(body_json),
            token=1, deliveries=1, failures=0, lease_expires_ms=int(lease_expires_ms),
        )

    # --- reads -----------------------------------------------------------------------
    def load(self, task_id: str) -> StoredTask | None:
        """A task's row; its last event's hash is remembered for the next append."""
        found = self.load_many([task_id])
        return found.get(task_id)

    def load_many(self, task_ids: Sequence[str]) -> dict[str, StoredTask]:
        """The rows of the tasks that exist among ``task_ids``, in one query."""
        if not task_ids:
            return {}
        marks = ", ".join("?" * len(task_ids))
        with self._stmt() as cur:
            rows = self._x(
                cur, f"SELECT {_TASK_COLS}, last_hash, kind FROM sw_tasks WHERE task_id IN ({marks})",
                tuple(task_ids),
            ).fetchall()
        out = {}
        for row in rows:
            self._remember(str(row[0]), int(row[4]), str(row[8]), str(row[3]))
            out[str(row[0])] = _task(row)
        return out

    def children(self, parent_id: str) -> list[StoredTask]:
        with self._stmt() as cur:
            rows = self._x(
                cur, f"SELECT {_TASK_COLS} FROM sw_tasks WHERE parent_id = ? ORDER BY created_at_ms, task_id",
                (parent_id,),
            ).fetchall()
        return [_task(r) for r in rows]

    def task_by_key(self, idem_key: str) -> str | None:
        with self._stmt() as cur:
            row = self._x(cur, "SELECT task_id FROM sw_tasks WHERE idem_key = ?", (idem_key,)).fetchone()
        return str(row[0]) if row else None

    def list_tasks(
        self, status: str | None = None, workflow: str | None = None, limit: int = 1000, *, kind: str = TASK_KIND
    ) -> list[StoredTask]:
        where, params = ["kind = ?"], [kind]
        if status:
            where.append("status = ?")
            params.append(status)
        if workflow:
            where.append("workflow = ?")
            params.append(workflow)
        clause = f" WHERE {' AND '.join(where)}" if where else ""
        with self._stmt() as cur:
            rows = self._x(
                cur, f"SELECT {_TASK_COLS}, last_hash, kind FROM sw_tasks{clause} ORDER BY created_at_ms, task_id"
                " LIMIT ?",
                (*params, limit),
            ).fetchall()
        return [_task(r) for r in rows]

    def task_ids(self) -> list[str]:
        with self._stmt() as cur:
            rows = self._x(cur, "SELECT task_id FROM sw_tasks ORDER BY task_id").fetchall()
        return [str(r[0]) for r in rows]

    def events(self, task_id: str, after: int = 0) -> list[EventRow]:
        with self._stmt() as cur:
            rows = self._x(
                cur,
                "SELECT task_id, version, event_id, type, body, at_ms, prev_hash, hash FROM sw_events"
                " WHERE task_id = ? AND version > ? ORDER BY version",
                (task_id, after),
            ).fetchall()
        return [
            EventRow(str(r[0]), int(r[1]), str(r[2]), str(r[3]), json.loads(r[4]), int(r[5]), str(r[6]), str(r[7]))
            for r in rows
        ]

    # --- what verify reads: rows as stored, nothing parsed ------------------------------
    def raw_events(self, task_id: str) -> list[RawEvent]:
        """A task's event rows exactly as the database returns them, in version order."""
        with self._stmt() as cur:
            rows = self._x(
                cur,
                "SELECT task_id, version, event_id, type, body, at_ms, prev_hash, hash FROM sw_events"
                " WHERE task_id = ? ORDER BY version",
                (task_id,),
            ).fetchall()
        return [RawEvent(*r) for r in rows]

    def raw_task(self, task_id: str) -> tuple[Any, ...] | None:
        """The task row as stored: task_id, workflow, workflow_hash, status, version, state,
        created_at_ms, updated_at_ms, last_hash."""
        with self._stmt() as cur:
            row = self._x(cur, f"SELECT {_TASK_COLS}, last_hash FROM sw_tasks WHERE task_id = ?", (task_id,)).fetchone()
        return tuple(row) if row is not None else None

    def logged_task_ids(self) -> list[str]:
        """Every task id with a task row or an event row: a task row deleted behind the
        store's back still shows through its events."""
        with self._stmt() as cur:
            rows = self._x(cur, "SELECT task_id FROM sw_tasks UNION SELECT task_id FROM sw_events").fetchall()
        return sorted({str(r[0]) for r in rows})

    def rechain(self, task_id: str, version: int, links: Sequence[tuple[str, str]]) -> bool:
        """Replace the (prev_hash, hash) of events 1..``version`` with ``links`` and the task's
        last hash with the last of them, in one transaction, only while the task is still at
        ``version``. False (nothing written) when it moved on."""
        with self._tx() as cur:
            row = self._x(cur, "SELECT version, last_hash FROM sw_tasks WHERE task_id = ?", (task_id,)).fetchone()
            if row is None or int(row[0]) != version or len(links) != version:
                return False
            # The task row first: its row lock holds off appends (theirs check the last hash)
            # until this commits; when one got in first, nothing is written.
            upd = self._x(
                cur, "UPDATE sw_tasks SET last_hash = ? WHERE task_id = ? AND version = ? AND last_hash = ?",
                (links[-1][1], task_id, version, row[1]),
            )
            if upd.rowcount != 1:
                return False
            for v, (prev, h) in enumerate(links, start=1):
                self._x(cur, "UPDATE sw_events SET prev_hash = ?, hash = ? WHERE task_id = ? AND version = ?",
                        (prev, h, task_id, v))
        self._last_hash.pop(task_id, None)
        return True

    def replace_projection(self, task_id: str, version: int, state: Mapping[str, Any]) -> bool:
        """Write ``state`` as the task's projection, only while the task is still at
        ``version`` (for ``db upgrade``, with the state replayed from the log). False when
        it moved on."""
        with self._stmt() as cur:
            upd = self._x(cur, "UPDATE sw_tasks SET state = ? WHERE task_id = ? AND version = ?",
                          (compact_json(state), task_id, version))
            return bool(upd.rowcount == 1)

    def has_event(self, event_id: str) -> bool:
        with self._stmt() as cur:
            return self._x(cur, "SELECT 1 FROM sw_events WHERE event_id = ?", (event_id,)).fetchone() is not None

    def counts_by_status(self) -> dict[str, int]:
        with self._stmt() as cur:
            rows = self._x(cur, "SELECT status, COUNT(*) FROM sw_tasks WHERE kind = ? GROUP BY status",
                           (TASK_KIND,)).fetchall()
        return {str(r[0]): int(r[1]) for r in rows}

    def outbox(self, task_id: str | None = None) -> list[dict[str, Any]]:
        sql = f"SELECT {_CLAIM_COLS}, available_at_ms, lease_owner, priority, tenant, waiting, fair FROM sw_outbox"
        params: tuple[Any, ...] = ()
        if task_id is not None:
            sql += " WHERE task_id = ?"
            params = (task_id,)
        with self._stmt() as cur:
            rows = self._x(cur, sql + " ORDER BY available_at_ms", params).fetchall()
        return [
            {"command_id": r[0], "task_id": r[1], "type": r[2], "token": int(r[4]),
             "deliveries": int(r[5]), "failures": int(r[6]), "lease_expires_ms": r[7],
             "available_at_ms": int(r[8]), "lease_owner": r[9], "priority": int(r[10]), "tenant": str(r[11]),
             "waiting": r[12], "fair": int(r[13])}
            for r in rows
        ]

    def timers(self, task_id: str | None = None) -> list[dict[str, Any]]:
        sql = "SELECT timer_id, task_id, due_at_ms, purpose FROM sw_timers"
        params: tuple[Any, ...] = ()
        if task_id is not None:
            sql += " WHERE task_id = ?"
            params = (task_id,)
        with self._stmt() as cur:
            rows = self._x(cur, sql + " ORDER BY due_at_ms", params).fetchall()
        return [{"timer_id": r[0], "task_id": r[1], "due_at_ms": int(r[2]), "purpose": r[3]} for r in rows]

    # --- leases (claim: store/fleet_sql.py) -------------------------------------------
    def renew(self, command_id: str, token: int, now_ms: int, lease_ms: int) -> bool:
        with self._stmt() as cur:
            r = self._x(
                cur, "UPDATE sw_outbox SET lease_expires_ms = ? WHERE command_id = ? AND token = ?"
                     " AND lease_expires_ms IS NOT NULL",  # a lease given back is not taken again
                (now_ms + lease_ms, command_id, token),
            )
            return bool(r.rowcount == 1)

    def release(
        self, command_id: str, token: int, available_at_ms: int, *, failed: bool, error: str = "",
        started: bool = True,
    ) -> None:
        with self._tx() as cur:
            self._x(cur, _RELEASE_SQL, _release_params(command_id, token, available_at_ms, failed, error, started))
            self._work_added_txn(cur)

    def ack(self, command_id: str, token: int, *, wake: Wake | None = None) -> None:
        if wake is None:
            with self._stmt() as cur:
                self._x(cur, _ACK_SQL, (command_id, token))
            return
        with self._tx() as cur:
            self._x(cur, _ACK_SQL, (command_id, token))
            self.wake(wake.gates, wake.now_ms, wake.count)

    def claim_timers(
        self, worker_id: str, now_ms: int, lease_ms: int, limit: int = 10, *, task_id: str | None = None
    ) -> list[TimerClaim]:
        one, params = (" AND task_id = ?", (task_id,)) if task_id is not None else ("", ())
        with self._stmt() as cur:
            rows = self._x(
                cur,
                "UPDATE sw_timers SET lease_owner = ?, lease_expires_ms = ?, token = token + 1"
                " WHERE timer_id IN (SELECT timer_id FROM sw_timers WHERE due_at_ms <= ?"
                f" AND (lease_expires_ms IS NULL OR lease_expires_ms <= ?){one}"
                f" ORDER BY due_at_ms LIMIT ?{self.skip_locked})"
                " RETURNING timer_id, task_id, due_at_ms, purpose, token",
                (worker_id, now_ms + lease_ms, now_ms, now_ms, *params, limit),
            ).fetchall()
        return [TimerClaim(str(r[0]), str(r[1]), int(r[2]), str(r[3]), int(r[4])) for r in rows]

    def drop_timer(self, timer_id: str, token: int) -> None:
        with self._stmt() as cur:
            self._x(cur, "DELETE FROM sw_timers WHERE timer_id = ? AND token = ?", (timer_id, token))

    def next_due_ms(self, *, task_id: str | None = None) -> int | None:
        """When a command or timer (of ``task_id``, or any) next becomes claimable."""
        one, where, params = ("", "", ()) if task_id is None else (" AND task_id = ?", " WHERE task_id = ?", (task_id,))
        with self._stmt() as cur:
            a = self._x(cur, _NEXT_COMMAND_SQL.format(one), params * 2).fetchone()
            b = self._x(
                cur,
                "SELECT MIN(CASE WHEN lease_expires_ms IS NULL THEN due_at_ms"
                f" ELSE lease_expires_ms END) FROM sw_timers{where}", params,
            ).fetchone()
        vals = [int(v[0]) for v in (a, b) if v is not None and v[0] is not None]
        return min(vals) if vals else None


# When a command next becomes claimable (parameters: the ``{}``'s twice): the first free one
# due, or the first lease to expire, each read at the head of its index.
_NEXT_COMMAND_SQL = (
    "SELECT MIN(at) FROM (SELECT MIN(available_at_ms) AS at FROM sw_outbox WHERE lease_expires_ms IS NULL{0}"
    " UNION ALL SELECT MIN(lease_expires_ms) FROM sw_outbox WHERE lease_expires_ms IS NOT NULL{0}) firsts"
)


class _Refused(Exception):
    """A batch holds an event that is already recorded: the batch is rolled back."""


@record
class _Encoded:
    """The JSON text of one append, made before its transaction opens."""

    body: str  # the event, canonical (it is hashed)
    state_json: str
    command_bodies: tuple[str, ...]  # canonical; "" for a timer

    @classmethod
    def of(cls, req: AppendRequest) -> _Encoded:
        if isinstance(req.encoded, _Encoded):
            return req.encoded
        return cls(
            canonical_json(req.event), compact_json(req.state),
            tuple("" if c.timer else canonical_json(c.body) for c in req.commands),
        )


_ACK_SQL = "DELETE FROM sw_outbox WHERE command_id = ? AND token = ?"  # only the claim of that token

# A release frees the lease, and with it the slots it held. ``failures`` counts the
# deliveries that ended in a reported failure (a transient error, a command no failure could
# be recorded for); a command given back before it was started (it waited for a busy
# executor, or its worker stopped first) takes its delivery back, so ``deliveries`` counts
# only the times it was started.
_RELEASE_SQL = (
    "UPDATE sw_outbox SET lease_owner = NULL, lease_expires_ms = NULL, available_at_ms = ?, slot_token = NULL,"
    " failures = failures + ?, last_error = ?,"
    " deliveries = CASE WHEN deliveries > 0 THEN deliveries - ? ELSE 0 END"
    " WHERE command_id = ? AND token = ?"
)


def _release_params(
    command_id: str, token: int, available_at_ms: int, failed: bool, error: str, started: bool
) -> tuple[Any, ...]:
    return (available_at_ms, 1 if failed else 0, error[:2000], 0 if started else 1, command_id, token)


def _task(r: Any) -> StoredTask:
    return StoredTask(
        task_id=str(r[0]), workflow=str(r[1]), workflow_hash=str(r[2]), status=str(r[3]),
        version=int(r[4]), state=json.loads(r[5]), created_at_ms=int(r[6]), updated_at_ms=int(r[7]),
        kind=str(r[9]) if len(r) > 9 else TASK_KIND,
    )

