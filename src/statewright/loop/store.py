"""SQLite persistence for the loop layer: its own ``loop_*`` tables in the statewright file.

    loop_runs       one row per run: loop name, status, newest state, line count,
                    the clear (who, why) after STUCK, a pending stop request
    loop_lines      the record: one line per transition (state, event or check, written)
    loop_items      the item ledger per loop: status, attempts, last failure, payload;
                    carried across runs, so a parked item stays parked
    loop_passes     the pass records appended in RECORDING (idempotent by record_no)
    loop_approvals  gate requests and decisions, keyed by the fingerprint shown

Every line is appended in one transaction with the run's new state and the item
ledger, after checking the expected line count (a stale writer loses cleanly).
stdlib ``sqlite3``, WAL, ``synchronous=FULL``.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from statewright._errors import (
    InputError,
    NotAStatewrightDatabaseError,
    StoreError,
    VersionConflictError,
)
from statewright.loop._schema import SCHEMA
from statewright.loop.codec import (
    command_to_dict,
    dumps,
    event_to_dict,
    state_from_dict,
    state_to_dict,
)
from statewright.loop.errors import RunHeldError
from statewright.loop.events import AppendRecord, Command, Event, RequestApproval
from statewright.loop.model import (
    ItemLedger,
    ItemStatus,
    LineKind,
    LoopState,
    LoopStatus,
    RecordLine,
)


@dataclass(frozen=True)
class RunRow:
    """A run as stored: its newest state and its bookkeeping."""

    run_id: str
    loop: str
    status: LoopStatus
    state: LoopState
    lines: int
    definition_path: str
    definition_sha256: str
    opened_at_ms: int
    updated_at_ms: int
    assets: Mapping[str, str]
    stop_requested: str | None
    owner_pid: int | None
    cleared_by: str | None
    cleared_reason: str | None
    cleared_at_ms: int | None

    @property
    def held(self) -> bool:
        """A STUCK run that nobody has cleared holds every new run of its loop."""
        return self.status is LoopStatus.STUCK and self.cleared_by is None


@dataclass(frozen=True)
class StoredLine:
    seq: int
    state: LoopStatus
    next_state: LoopStatus
    kind: LineKind
    event_type: str
    event: str
    summary: str
    written: Mapping[str, Any]
    commands: Sequence[Mapping[str, Any]]
    at_ms: int


@dataclass(frozen=True)
class ApprovalRow:
    run_id: str
    fingerprint: str
    item_id: str
    attempt: int
    role: str
    shown: Mapping[str, Any]
    requested_at_ms: int
    timeout_at_ms: int | None
    decision: str | None
    who: str | None
    reason: str | None
    decided_at_ms: int | None


class LoopStore:
    """The loop tables in one SQLite file. Use as a context manager, or call close()."""

    def __init__(self, conn: sqlite3.Connection, path: str) -> None:
        self._conn = conn
        self.path = path

    @classmethod
    def open(cls, path: str | Path) -> LoopStore:
        p = Path(path)
        if p.exists() and p.is_dir():
            msg = f"database path {p} is a directory; give a file path (--db or STATEWRIGHT_DB)"
            raise InputError(msg)
        p.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(str(p), isolation_level=None, timeout=30.0)
        conn.row_factory = sqlite3.Row
        try:
            conn.execute("PRAGMA busy_timeout=30000")
            # Look before writing anything: a foreign file must be left exactly as it was.
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")} - {
                "sqlite_sequence"
            }
            if tables and "sw_meta" not in tables and not any(t.startswith("loop_") for t in tables):
                conn.close()
                msg = (
                    f"{p} has tables but is not a statewright database (found:"
                    f" {', '.join(sorted(tables)[:5])}); pass another --db"
                )
                raise NotAStatewrightDatabaseError(msg)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")
            conn.executescript(SCHEMA)
            columns = {r[1] for r in conn.execute("PRAGMA table_info(loop_items)")}
            if "reopened_after" not in columns:  # a database from before unparking
                conn.execute("ALTER TABLE loop_items ADD COLUMN reopened_after INTEGER NOT NULL DEFAULT 0")
        except sqlite3.DatabaseError as exc:
            conn.close()
            msg = f"{p} is not a statewright database ({exc}); pass another --db"
            raise NotAStatewrightDatabaseError(msg) from None
        return cls(conn, str(p))

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> LoopStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _txn(self) -> Iterator[sqlite3.Connection]:
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    # ---------------------------------------------------------------- runs

    def create_run(
        self,
        *,
        loop: str,
        definition_path: str,
        definition_sha256: str,
        make_state: Callable[[str, tuple[ItemLedger, ...]], LoopState],
        assets: Mapping[str, str],
        at_ms: int,
    ) -> RunRow:
        """Open a new IDLE run that carries the loop's item ledger. Refuses while held."""
        with self._txn() as conn:
            newest = self._latest_txn(conn, loop)
            if newest is not None and newest.held:
                msg = (
                    f"loop {loop!r}: run {newest.run_id} ended STUCK ({newest.state.reason})"
                    f" and holds new runs; clear it with 'statewright loop clear"
                    f" {newest.run_id} --reason TEXT' with an operator's token"
                )
                raise RunHeldError(msg, run_id=newest.run_id, loop=loop)
            ledger = self._ledger_txn(conn, loop)
            cur = conn.execute(
                "INSERT INTO loop_runs (loop, status, definition_path, definition_sha256,"
                " opened_at_ms, updated_at_ms, state_json, assets_json)"
                " VALUES (?, ?, ?, ?, ?, ?, '{}', ?)",
                (
                    loop,
                    str(LoopStatus.IDLE),
                    definition_path,
                    definition_sha256,
                    at_ms,
                    at_ms,
                    dumps(dict(assets)),
                ),
            )
            run_id = str(cur.lastrowid)
            state = make_state(run_id, ledger)
            conn.execute(
                "UPDATE loop_runs SET state_json = ? WHERE run_id = ?",
                (dumps(state_to_dict(state)), int(run_id)),
            )
        return self.run(run_id)

    def run(self, run_id: str) -> RunRow:
        row = self._conn.execute("SELECT * FROM loop_runs WHERE run_id = ?", (_run_key(run_id),)).fetchone()
        if row is None:
            msg = f"no loop run with id {run_id!r}; list runs with 'statewright loop status'"
            raise InputError(msg)
        return _run_row(row)

    def latest_run(self, loop: str) -> RunRow | None:
        return self._latest_txn(self._conn, loop)

    def runs(self, *, loop: str | None = None, limit: int = 20) -> list[RunRow]:
        sql = "SELECT * FROM loop_runs"
        args: tuple[object, ...] = ()
        if loop is not None:
            sql += " WHERE loop = ?"
            args = (loop,)
        rows = self._conn.execute(sql + " ORDER BY run_id DESC LIMIT ?", (*args, limit))
        return [_run_row(r) for r in rows]

    def set_owner(self, run_id: str, pid: int | None) -> None:
        with self._txn() as conn:
            conn.execute("UPDATE loop_runs SET owner_pid = ? WHERE run_id = ?", (pid, _run_key(run_id)))

    def request_stop(self, run_id: str, why: str) -> None:
        with self._txn() as conn:
            conn.execute("UPDATE loop_runs SET stop_requested = ? WHERE run_id = ?", (why, _run_key(run_id)))

    def stop_requested(self, run_id: str) -> str | None:
        row = self._conn.execute(
            "SELECT stop_requested FROM loop_runs WHERE run_id = ?", (_run_key(run_id),)
        ).fetchone()
        return None if row is None else row["stop_requested"]

    def clear(self, run_id: str, *, who: str, reason: str, at_ms: int) -> RunRow:
        """Lift the hold a STUCK run puts on its loop. The clear is kept with the run."""
        if not who.strip() or not reason.strip():
            raise InputError("clear needs a person (--as WHO) and a reason (--reason TEXT)")
        with self._txn() as conn:
            run = self._run_txn(conn, run_id)
            if run.status is not LoopStatus.STUCK:
                msg = f"run {run_id} is {run.status}, not STUCK; only a STUCK run needs a clear"
                raise InputError(msg)
            if run.cleared_by is not None:
                msg = f"run {run_id} was already cleared by {run.cleared_by}: {run.cleared_reason}"
                raise InputError(msg)
            conn.execute(
                "UPDATE loop_runs SET cleared_by = ?, cleared_reason = ?, cleared_at_ms = ? WHERE run_id = ?",
                (who.strip(), reason.strip(), at_ms, run.run_id),
            )
        return self.run(run_id)

    # ---------------------------------------------------------------- the record

    def append(
        self,
        run_id: str,
        *,
        expected_lines: int,
        line: RecordLine,
        state: LoopState,
        event: Event,
        commands: Sequence[Command],
    ) -> int:
        """Append one line with the new state and ledger in one transaction; return its seq."""
        with self._txn() as conn:
            row = conn.execute("SELECT lines, loop FROM loop_runs WHERE run_id = ?", (_run_key(run_id),)).fetchone()
            if row is None:
                raise InputError(f"no loop run with id {run_id!r}")
            if row["lines"] != expected_lines:
                raise VersionConflictError(run_id, expected_lines, row["lines"])
            seq = expected_lines + 1
            conn.execute(
                "INSERT INTO loop_lines (run_id, seq, state, next_state, kind, event_type, event,"
                " summary, written_json, event_json, commands_json, at_ms)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    int(run_id),
                    seq,
                    str(line.state),
                    str(line.next_state),
                    str(line.kind),
                    line.event_type,
                    line.event,
                    line.summary,
                    dumps(_jsonable(line.written)),
                    dumps(event_to_dict(event)),
                    dumps([command_to_dict(c) for c in commands]),
                    line.at_ms,
                ),
            )
            clear_stop = ", stop_requested = NULL" if line.kind is LineKind.CLEAN_STOP else ""
            conn.execute(
                f"UPDATE loop_runs SET status = ?, state_json = ?, lines = ?,"
                f" updated_at_ms = ?{clear_stop} WHERE run_id = ?",
                (str(state.status), dumps(state_to_dict(state)), seq, line.at_ms, int(run_id)),
            )
            for item in state.items:
                conn.execute(
                    "INSERT INTO loop_items (loop, item_id, status, attempts, last_failure,"
                    " reopened_after, updated_at_ms) VALUES (?, ?, ?, ?, ?, ?, ?)"
                    " ON CONFLICT (loop, item_id) DO UPDATE SET status = excluded.status,"
                    " attempts = excluded.attempts, last_failure = excluded.last_failure,"
                    " reopened_after = excluded.reopened_after, updated_at_ms = excluded.updated_at_ms"
                    " WHERE loop_items.status != excluded.status"
                    " OR loop_items.attempts != excluded.attempts"
                    " OR loop_items.last_failure != excluded.last_failure"
                    " OR loop_items.reopened_after != excluded.reopened_after",
                    (
                        row["loop"],
                        item.id,
                        str(item.status),
                        item.attempts,
                        item.last_failure,
                        item.reopened_after,
                        line.at_ms,
                    ),
                )
        return seq

    def lines(self, run_id: str) -> list[StoredLine]:
        rows = self._conn.execute("SELECT * FROM loop_lines WHERE run_id = ? ORDER BY seq", (_run_key(run_id),))
        return [
            StoredLine(
                seq=r["seq"],
                state=LoopStatus(r["state"]),
                next_state=LoopStatus(r["next_state"]),
                kind=LineKind(r["kind"]),
                event_type=r["event_type"],
                event=r["event"],
                summary=r["summary"],
                written=json.loads(r["written_json"]),
                commands=json.loads(r["commands_json"]),
                at_ms=r["at_ms"],
            )
            for r in rows
        ]

    # ---------------------------------------------------------------- items

    def ledger(self, loop: str) -> tuple[ItemLedger, ...]:
        return self._ledger_txn(self._conn, loop)

    def remember_items(self, loop: str, payloads: Mapping[str, Mapping[str, Any]], at_ms: int) -> None:
        """Keep each found item's payload (for briefs after a restart)."""
        with self._txn() as conn:
            for item_id, payload in payloads.items():
                conn.execute(
                    "INSERT INTO loop_items (loop, item_id, payload_json, updated_at_ms)"
                    " VALUES (?, ?, ?, ?) ON CONFLICT (loop, item_id)"
                    " DO UPDATE SET payload_json = excluded.payload_json",
                    (loop, item_id, dumps(_jsonable(payload)), at_ms),
                )

    def item_payload(self, loop: str, item_id: str) -> Mapping[str, Any] | None:
        row = self._conn.execute(
            "SELECT payload_json FROM loop_items WHERE loop = ? AND item_id = ?", (loop, item_id)
        ).fetchone()
        return None if row is None else json.loads(row["payload_json"])

    # ---------------------------------------------------------------- passes

    def append_pass(self, run_id: str, record: AppendRecord, at_ms: int) -> str:
        """Append the pass record once; a repeat (after a restart) returns the same receipt."""
        with self._txn() as conn:
            conn.execute(
                "INSERT OR IGNORE INTO loop_passes (run_id, record_no, item_id, attempt, verdict,"
                " record_json, at_ms) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    int(run_id),
                    record.record_no,
                    record.item,
                    record.attempt,
                    str(record.verdict),
                    dumps(command_to_dict(record)),
                    at_ms,
                ),
            )
        return f"run {run_id} record {record.record_no}"

    def passes(self, run_id: str) -> list[Mapping[str, Any]]:
        rows = self._conn.execute(
            "SELECT record_json FROM loop_passes WHERE run_id = ? ORDER BY record_no",
            (_run_key(run_id),),
        )
        return [json.loads(r["record_json"]) for r in rows]

    # ---------------------------------------------------------------- approvals

    def request_approval(self, run_id: str, req: RequestApproval, at_ms: int) -> ApprovalRow:
        with self._txn() as conn:
            conn.execute(
                "INSERT OR IGNORE INTO loop_approvals (run_id, fingerprint, item_id, attempt, role,"
                " shown_json, requested_at_ms, timeout_at_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    int(run_id),
                    req.fingerprint,
                    req.item,
                    req.attempt,
                    req.role,
                    dumps(_jsonable(req.shown)),
                    at_ms,
                    req.timeout_at_ms,
                ),
            )
        found = self.approval(run_id, req.fingerprint)
        if found is None:
            raise StoreError(f"run {run_id}: the approval request did not persist")
        return found

    def approval(self, run_id: str, fingerprint: str) -> ApprovalRow | None:
        row = self._conn.execute(
            "SELECT * FROM loop_approvals WHERE run_id = ? AND fingerprint = ?",
            (_run_key(run_id), fingerprint),
        ).fetchone()
        return None if row is None else _approval_row(row)

    def pending_approvals(self, run_id: str | None = None) -> list[ApprovalRow]:
        """Undecided requests of runs that still wait at their gate."""
        sql = (
            "SELECT a.* FROM loop_approvals a JOIN loop_runs r ON r.run_id = a.run_id"
            " WHERE a.decision IS NULL AND r.status = 'AWAITING_HUMAN'"
        )
        args: tuple[object, ...] = ()
        if run_id is not None:
            sql += " AND a.run_id = ?"
            args = (_run_key(run_id),)
        rows = self._conn.execute(sql + " ORDER BY a.run_id, a.requested_at_ms", args)
        return [_approval_row(r) for r in rows]

    def expire_approval(self, run_id: str, fingerprint: str, at_ms: int) -> None:
        """The gate's time limit passed: the request can no longer be decided."""
        with self._txn() as conn:
            conn.execute(
                "UPDATE loop_approvals SET decision = 'timed out', decided_at_ms = ?"
                " WHERE run_id = ? AND fingerprint = ? AND decision IS NULL",
                (at_ms, _run_key(run_id), fingerprint),
            )

    def decide_approval(
        self,
        run_id: str,
        *,
        fingerprint: str,
        who: str,
        role: str,
        approve: bool,
        reason: str,
        at_ms: int,
    ) -> ApprovalRow:
        """Record a person's decision on the proposal with this fingerprint (once)."""
        with self._txn() as conn:
            row = conn.execute(
                "SELECT * FROM loop_approvals WHERE run_id = ? AND fingerprint = ?",
                (_run_key(run_id), fingerprint),
            ).fetchone()
            if row is None:
                msg = (
                    f"run {run_id} has no approval request with fingerprint {fingerprint!r};"
                    " see 'statewright loop status' for the fingerprint shown"
                )
                raise InputError(msg)
            pending = _approval_row(row)
            if pending.decision is not None:
                msg = f"run {run_id}: this proposal was already {pending.decision} by {pending.who}"
                raise InputError(msg)
            if role != pending.role:
                msg = f"run {run_id}: the gate needs role {pending.role!r}, you acted as {role!r}"
                raise InputError(msg)
            if not who.strip():
                raise InputError("say who decides with --as WHO")
            conn.execute(
                "UPDATE loop_approvals SET decision = ?, who = ?, reason = ?, decided_at_ms = ?"
                " WHERE run_id = ? AND fingerprint = ?",
                (
                    "approved" if approve else "denied",
                    who.strip(),
                    reason,
                    at_ms,
                    _run_key(run_id),
                    fingerprint,
                ),
            )
        found = self.approval(run_id, fingerprint)
        if found is None:
            raise StoreError(f"run {run_id}: the decision did not persist")
        return found

    # ---------------------------------------------------------------- inside a txn

    def _latest_txn(self, conn: sqlite3.Connection, loop: str) -> RunRow | None:
        row = conn.execute("SELECT * FROM loop_runs WHERE loop = ? ORDER BY run_id DESC LIMIT 1", (loop,)).fetchone()
        return None if row is None else _run_row(row)

    def _run_txn(self, conn: sqlite3.Connection, run_id: str) -> RunRow:
        row = conn.execute("SELECT * FROM loop_runs WHERE run_id = ?", (_run_key(run_id),)).fetchone()
        if row is None:
            msg = f"no loop run with id {run_id!r}; list runs with 'statewright loop status'"
            raise InputError(msg)
        return _run_row(row)

    def _ledger_txn(self, conn: sqlite3.Connection, loop: str) -> tuple[ItemLedger, ...]:
        rows = conn.execute(
            "SELECT item_id, status, attempts, last_failure, reopened_after FROM loop_items"
            " WHERE loop = ? ORDER BY item_id",
            (loop,),
        )
        return tuple(
            ItemLedger(r["item_id"], ItemStatus(r["status"]), r["attempts"], r["last_failure"], r["reopened_after"])
            for r in rows
        )


def _run_key(run_id: str) -> int:
    text = str(run_id).strip()
    if not text.isdigit():
        msg = f"a run id is a number, got {run_id!r}; list runs with 'statewright loop status'"
        raise InputError(msg)
    return int(text)


def _run_row(row: sqlite3.Row) -> RunRow:
    state = state_from_dict(json.loads(row["state_json"]))
    return RunRow(
        run_id=str(row["run_id"]),
        loop=row["loop"],
        status=LoopStatus(row["status"]),
        state=state,
        lines=row["lines"],
        definition_path=row["definition_path"],
        definition_sha256=row["definition_sha256"],
        opened_at_ms=row["opened_at_ms"],
        updated_at_ms=row["updated_at_ms"],
        assets=json.loads(row["assets_json"]),
        stop_requested=row["stop_requested"],
        owner_pid=row["owner_pid"],
        cleared_by=row["cleared_by"],
        cleared_reason=row["cleared_reason"],
        cleared_at_ms=row["cleared_at_ms"],
    )


def _approval_row(row: sqlite3.Row) -> ApprovalRow:
    return ApprovalRow(
        run_id=str(row["run_id"]),
        fingerprint=row["fingerprint"],
        item_id=row["item_id"],
        attempt=row["attempt"],
        role=row["role"],
        shown=json.loads(row["shown_json"]),
        requested_at_ms=row["requested_at_ms"],
        timeout_at_ms=row["timeout_at_ms"],
        decision=row["decision"],
        who=row["who"],
        reason=row["reason"],
        decided_at_ms=row["decided_at_ms"],
    )


def _jsonable(value: Any) -> Any:
    """Round-trip through JSON with a fallback for odd values (Paths, sets)."""
    return json.loads(json.dumps(value, default=str, allow_nan=False))


def run_dict(run: RunRow, *, running: bool) -> dict[str, Any]:
    """A run as plain JSON types (``loop status --json`` and the HTTP API)."""
    s = run.state
    return {
        "run": run.run_id,
        "loop": run.loop,
        "status": str(run.status),
        "reason": s.reason,
        "passes": s.passes,
        "since_last_close": s.passes_since_last_close,
        "tokens_spent": s.tokens_spent,
        "money_spent_usd": s.money_spent_usd,
        "line_count": run.lines,
        "held": run.held,
        "cleared_by": run.cleared_by,
        "cleared_reason": run.cleared_reason,
        "running": running,
        "owner_pid": run.owner_pid,
        "items": {i.id: {"status": str(i.status), "attempts": i.attempts} for i in s.items},
    }


def line_dict(line: StoredLine) -> dict[str, Any]:
    """A record line as plain JSON types (``loop show --json`` and the HTTP API)."""
    return {
        "seq": line.seq,
        "state": str(line.state),
        "event": line.event,
        "written": line.written,
        "summary": line.summary,
        "next_state": str(line.next_state),
        "kind": str(line.kind),
        "event_type": line.event_type,
        "at_ms": line.at_ms,
    }
