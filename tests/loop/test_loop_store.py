"""The loop tables: one transaction per line, the ledger, clears and approvals."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from statewright._errors import InputError, NotAStatewrightDatabaseError, VersionConflictError
from statewright.loop.errors import RunHeldError
from statewright.loop.events import AppendRecord, ItemsFound, RequestApproval, TriggerArrived
from statewright.loop.model import ItemLedger, ItemStatus, LoopConfig, LoopStatus, Verdict
from statewright.loop.reducer import initial_state, transition
from statewright.loop.store import LoopStore

CFG = LoopConfig(loop="l", check_names=("c",), oracle_names=("o",), max_passes=3)


def _new(store: LoopStore) -> str:
    run = store.create_run(
        loop="l",
        definition_path="l.yaml",
        definition_sha256="0" * 64,
        make_state=lambda run_id, ledger: initial_state(run_id, CFG, ledger),
        assets={},
        at_ms=1,
    )
    return run.run_id


def test_lines_append_with_state_and_ledger_in_one_step(db: Path) -> None:
    """Each append stores the line, the run's state and the items, checking the line count."""
    with LoopStore.open(db) as store:
        run_id = _new(store)
        state = store.run(run_id).state
        ev = TriggerArrived("t", 2)
        step = transition(state, ev)
        assert step.line is not None
        store.append(run_id, expected_lines=0, line=step.line, state=step.state, event=ev, commands=step.commands)
        with pytest.raises(VersionConflictError, match="expected version 0, found 1"):
            store.append(run_id, expected_lines=0, line=step.line, state=step.state, event=ev, commands=step.commands)
        ev2 = ItemsFound(("a",), 3)
        step2 = transition(step.state, ev2)
        assert step2.line is not None
        store.append(run_id, expected_lines=1, line=step2.line, state=step2.state, event=ev2, commands=step2.commands)
        run = store.run(run_id)
        assert run.status is LoopStatus.ASSIGNING and run.lines == 2
        assert run.state == step2.state
        assert [x.event_type for x in store.lines(run_id)] == ["TriggerArrived", "ItemsFound"]
        assert store.lines(run_id)[1].commands == [
            {"type": "BuildBrief", "item": "a", "attempt": 1, "prior_failure": ""}
        ]
        assert store.ledger("l") == (ItemLedger("a"),)


def test_pass_records_are_idempotent(db: Path) -> None:
    """Appending the same record twice (a restart in RECORDING) keeps one row."""
    with LoopStore.open(db) as store:
        run_id = _new(store)
        rec = AppendRecord(record_no=1, item="a", attempt=1, verdict=Verdict.FAIL, cause="x")
        assert store.append_pass(run_id, rec, 5) == store.append_pass(run_id, rec, 6)
        assert len(store.passes(run_id)) == 1


def test_clear_only_a_stuck_run_once_with_who_and_why(db: Path) -> None:
    """A held loop refuses new runs; clear needs a person and a reason, once."""
    with LoopStore.open(db) as store:
        run_id = _new(store)
        with pytest.raises(InputError, match="not STUCK"):
            store.clear(run_id, who="ann", reason="r", at_ms=1)
        store._conn.execute("UPDATE loop_runs SET status = 'STUCK' WHERE run_id = ?", (run_id,))
        with pytest.raises(RunHeldError, match=f"clear {run_id}"):
            _new(store)
        with pytest.raises(InputError, match="a reason"):
            store.clear(run_id, who="ann", reason=" ", at_ms=1)
        store.clear(run_id, who="ann", reason="fixed the disk", at_ms=2)
        with pytest.raises(InputError, match="already cleared by ann"):
            store.clear(run_id, who="bob", reason="again", at_ms=3)
        assert _new(store) != run_id


def test_approvals_bind_to_fingerprint_and_role(db: Path) -> None:
    """A decision needs the pending fingerprint and the gate's role, and happens once."""
    with LoopStore.open(db) as store:
        run_id = _new(store)
        store._conn.execute("UPDATE loop_runs SET status = 'AWAITING_HUMAN' WHERE run_id = ?", (run_id,))
        req = RequestApproval("a", 1, "f" * 64, "maintainer", {"item": "a"}, None)
        store.request_approval(run_id, req, 10)
        store.request_approval(run_id, req, 11)  # idempotent
        assert len(store.pending_approvals(run_id)) == 1
        with pytest.raises(InputError, match="no approval request with fingerprint"):
            store.decide_approval(
                run_id, fingerprint="e" * 64, who="ann", role="maintainer", approve=True, reason="", at_ms=12
            )
        row = store.decide_approval(
            run_id, fingerprint="f" * 64, who="ann", role="maintainer", approve=True, reason="", at_ms=12
        )
        assert (row.decision, row.who, row.decided_at_ms) == ("approved", "ann", 12)
        with pytest.raises(InputError, match="already approved by ann"):
            store.decide_approval(
                run_id, fingerprint="f" * 64, who="bob", role="maintainer", approve=False, reason="no", at_ms=13
            )
        assert store.pending_approvals() == []


def test_ledger_carries_into_the_next_run(db: Path) -> None:
    """A new run starts from the loop's item ledger."""
    with LoopStore.open(db) as store:
        store._conn.execute("INSERT INTO loop_items (loop, item_id, status, attempts) VALUES ('l', 'a', 'parked', 3)")
        run_id = _new(store)
        assert store.run(run_id).state.items == (ItemLedger("a", ItemStatus.PARKED, 3),)


def test_not_a_database(tmp_path: Path) -> None:
    """A file that is not SQLite is refused with a message naming it."""
    bad = tmp_path / "x.db"
    bad.write_bytes(b"this is not sqlite at all, not even close" * 100)
    with pytest.raises(NotAStatewrightDatabaseError, match="is not a statewright database"):
        LoopStore.open(bad)


def test_a_foreign_database_is_left_alone(tmp_path: Path) -> None:
    """A SQLite file with someone else's tables is refused and not written to."""
    path = tmp_path / "app.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE customers (id INTEGER)")
    conn.commit()
    conn.close()
    with pytest.raises(NotAStatewrightDatabaseError, match="found: customers"):
        LoopStore.open(path)
    conn = sqlite3.connect(path)
    try:
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    finally:
        conn.close()
    assert names == {"customers"}


def test_shares_the_file_with_the_task_store(tmp_path: Path) -> None:
    """The loop tables sit beside the task store's tables in one file."""
    from statewright.store import open_store  # the task store (another package)

    path = tmp_path / "state.db"
    LoopStore.open(path).close()
    open_store(path).close()
    with LoopStore.open(path) as store:
        assert store.runs() == []


def test_wal_mode(db: Path) -> None:
    """The file is in WAL mode."""
    LoopStore.open(db).close()
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        conn.close()
