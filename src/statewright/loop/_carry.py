"""Carry the loop tables of an earlier release (``loop_runs``, ``loop_lines``, ``loop_items``,
``loop_passes``, ``loop_approvals`` in a SQLite file) over into loop-run streams.

Each old run becomes the stream its lines replay to: ``RunOpened`` with the state the run
opened with (its config, and the items' standing the loop's earlier runs left), then every
old line's event through the reducer, the item payloads and pass records kept with their
lines as the current release keeps them, and a decision a person made at a gate the run has
not yet taken up. A run is carried only when the replay gives the run's stored state back; one
that does not is left in the old tables and named. The old tables are left as they are.
Carrying again skips what is carried (a stream of that number exists).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from statewright.machine.loop.codec import (
    casing_blind,
    command_to_dict,
    event_to_dict,
    line_to_dict,
    state_from_dict,
    state_to_dict,
)
from statewright.machine.loop.events import ApprovalGranted, ApprovalRejected, Event, ItemsFound, RunOpened
from statewright.machine.loop.events import event_from_dict as loop_event_from_dict
from statewright.machine.loop.model import LoopState, LoopStatus
from statewright.machine.loop.reducer import transition
from statewright.machine.seam import StreamKind
from statewright.runtime.children import wake_rows
from statewright.store.base import Store

_RENAMED = {"fingerprint": "proposal_hash", "who": "actor"}


def carry_loop_tables(store: Store) -> tuple[int, list[str]]:
    """Carry every old run not carried yet; returns (runs carried, one line per run that could
    not be). A store without old loop tables has nothing to carry."""
    path = getattr(store, "path", None)
    if not isinstance(path, Path) or not path.exists():
        return 0, []
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=30.0)
    conn.row_factory = sqlite3.Row
    try:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "loop_runs" not in tables:
            return 0, []
        carried, problems = 0, []
        finals: dict[str, LoopState] = {}
        for run in conn.execute("SELECT * FROM loop_runs ORDER BY run_id").fetchall():
            number, loop = int(run["run_id"]), str(run["loop"])
            stream = f"loop-run-{number}"
            ledger = tuple(sorted(finals[loop].items, key=lambda i: i.id)) if loop in finals else ()
            try:
                final = _carry_run(conn, store, run, stream, ledger)
            except Exception as exc:  # an old row of any shape ends as one line, never a traceback
                problems.append(f"loop run {number} ({loop}) is not carried over: {type(exc).__name__}: {exc}")
                continue
            if final is not None:
                finals[loop] = final
                carried += 1
            else:
                existing = store.load(stream)
                if existing is not None:
                    finals[loop] = state_from_dict(existing.state["state"])
        return carried, problems
    finally:
        conn.close()


def _carry_run(
    conn: sqlite3.Connection, store: Store, run: sqlite3.Row, stream: str, ledger: tuple[Any, ...],
) -> LoopState | None:
    """The run's stream written (its final state), or None when it is already there."""
    if store.load(stream) is not None:
        return None
    number = int(run["run_id"])
    stored = state_from_dict(_renamed(json.loads(run["state_json"])))
    start = LoopState(run_id=str(number), config=stored.config, items=ledger)
    meta = {"definition_path": run["definition_path"], "definition_sha256": run["definition_sha256"],
            "assets": json.loads(run["assets_json"]), "opened_at_ms": int(run["opened_at_ms"]),
            "owner_pid": None}
    payloads = {
        r["item_id"]: json.loads(r["payload_json"])
        for r in conn.execute("SELECT item_id, payload_json FROM loop_items WHERE loop = ?", (run["loop"],))
    }
    records = {
        int(r["record_no"]): json.loads(r["record_json"])
        for r in conn.execute("SELECT record_no, record_json FROM loop_passes WHERE run_id = ?", (number,))
    }
    opened = RunOpened(state_to_dict(start), meta["definition_path"], meta["definition_sha256"], meta["assets"],
                       meta["opened_at_ms"], event_id=f"carried-{stream}-1")
    steps: list[tuple[dict[str, Any], LoopState, tuple[Any, ...]]] = [(event_to_dict(opened), start, ())]
    state = start
    lines = conn.execute("SELECT seq, event_json FROM loop_lines WHERE run_id = ? ORDER BY seq", (number,))
    for row in lines.fetchall():
        event = _old_event(json.loads(row["event_json"]), f"carried-{stream}-{int(row['seq']) + 1}",
                           stored.config.gate_role)
        step = transition(state, event)
        body = _line_body(event, step)
        if isinstance(event, ItemsFound):
            body["payloads"] = {i: payloads.get(i, {"id": i}) for i in event.items}
        if event.type == "RecordAppended" and state.records + 1 in records:
            body["record"] = _renamed(records[state.records + 1])
        state = step.state
        steps.append((body, state, step.commands))
    if state != stored and casing_blind(state_to_dict(state)) != casing_blind(state_to_dict(stored)):
        raise ValueError("replaying its lines does not give its stored state back")
    decided = _pending_decision(conn, number, state, f"carried-{stream}-{len(steps) + 1}")
    if decided is not None:
        step = transition(state, decided)
        state = step.state
        steps.append((_line_body(decided, step), state, step.commands))
    for version, (body, after, commands) in enumerate(steps):
        projection = {"status": str(after.status), "loop": after.config.loop, "state": state_to_dict(after),
                      "meta": meta, "lines": version}
        # The last line's wake (a run asleep at a timed gate, or one a decision moved) is still to
        # come: it goes to the outbox, so a worker wakes the carried run as it would any other.
        last = version == len(steps) - 1
        wake = wake_rows(stream, str(body["event_id"]), commands, int(body["at_ms"]), version) if last else []
        store.append(stream, version, body, projection, wake, workflow=str(run["loop"]),
                     workflow_hash=str(run["definition_sha256"]), kind=str(StreamKind.LOOP_RUN))
    return state


def _line_body(event: Event, step: Any) -> dict[str, Any]:
    return {**event_to_dict(event), "line": line_to_dict(step.line),
            "commands": [command_to_dict(c) for c in step.commands]}


def _old_event(data: Mapping[str, Any], event_id: str, gate_role: str | None) -> Event:
    """An event as an earlier release logged it, in today's vocabulary."""
    body = _renamed(dict(data))
    if body.get("type") in ("ApprovalGranted", "ApprovalDenied"):
        body["roles"] = [gate_role] if gate_role else []
    if body.get("type") == "ApprovalDenied":
        body["type"] = ApprovalRejected.type
        body["reason_code"] = body.pop("reason", "")
    body["event_id"] = event_id
    return loop_event_from_dict(body)


def _pending_decision(conn: sqlite3.Connection, number: int, state: LoopState, event_id: str) -> Event | None:
    """A decision made at the gate the run waits at, which the run has not taken up yet."""
    if state.status is not LoopStatus.AWAITING_HUMAN or state.current is None:
        return None
    row = conn.execute(
        "SELECT * FROM loop_approvals WHERE run_id = ? AND fingerprint = ? AND decision IN ('approved', 'denied')",
        (number, state.current.proposal_hash),
    ).fetchone()
    if row is None:
        return None
    at_ms = int(row["decided_at_ms"] or 0)
    roles = (str(row["role"]),)  # an earlier release checked the gate's role before it kept the row
    if row["decision"] == "approved":
        return ApprovalGranted(state.current.proposal_hash, str(row["who"]), at_ms, roles, event_id=event_id)
    return ApprovalRejected(state.current.proposal_hash, str(row["who"]), str(row["reason"] or ""), at_ms, roles,
                            event_id=event_id)


def _renamed(value: Any) -> Any:
    """Keys of an earlier release's records in today's vocabulary (fingerprint, who)."""
    if isinstance(value, Mapping):
        return {_RENAMED.get(str(k), str(k)): _renamed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_renamed(v) for v in value]
    return value

