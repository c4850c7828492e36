"""What only the SQLite store has. The rest of its promises are the conformance suite's
(``test_conformance.py`` runs on it)."""

from __future__ import annotations

from pathlib import Path

from statewright.store import NewCommand, open_store
from statewright.store.sqlite import SQLiteStore


def test_an_idle_poll_is_a_read(tmp_path: Path) -> None:
    """With nothing due (a command not due yet, a timer not due yet, a command leased), a
    claim of commands or timers reads, and takes no write lock; once a command or a timer is
    due, it is claimed as before."""
    store = open_store(f"sqlite:///{tmp_path / 'sw.db'}")
    assert isinstance(store, SQLiteStore)
    store.append("t1", 0, {"event_id": "t1:submitted", "type": "Noted", "at_ms": 1}, {"status": "running"},
                 [NewCommand("t1/later", "RunStep", {"step": "a"}, 5_000),
                  NewCommand("t1/timer", "Timer", {}, 5_000, timer=True, purpose="wait"),
                  NewCommand("t1/now", "RunStep", {"step": "b"}, 0)],
                 workflow="wf", workflow_hash="h" * 64)
    [held] = store.claim("w1", 1_000, 60_000, 5)
    assert held.command_id == "t1/now"
    seen: list[str] = []
    store._conn.set_trace_callback(lambda sql: seen.append(sql.split()[0].upper()))

    assert store.claim("w2", 2_000, 60_000, 5) == [] and store.claim_timers("w2", 2_000, 60_000) == []
    assert seen == ["SELECT", "SELECT"]

    [due] = store.claim("w2", 5_000, 60_000, 5)
    [timer] = store.claim_timers("w2", 5_000, 60_000)
    assert (due.command_id, timer.timer_id) == ("t1/later", "t1/timer")
    assert "UPDATE" in seen and "BEGIN" in seen
    store.close()
