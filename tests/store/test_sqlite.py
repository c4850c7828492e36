"""What only the SQLite store has. The rest of its promises are the conformance suite's
(``test_conformance.py`` runs on it)."""

from __future__ import annotations

from pathlib import Path

from statewright.definition.fleet import FleetConfig, TenantShare
from statewright.store import NewCommand, open_store
from statewright.store.base import Wake
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


def _queue(store: SQLiteStore, tenant: str, n: int) -> None:
    store.append(f"{tenant}-{n}", 0, {"event_id": f"{tenant}-{n}:submitted", "type": "Noted", "at_ms": 1},
                 {"status": "running"}, [NewCommand(f"{tenant}-{n}/s/1", "RunStep", {"step": "s"}, 0, tenant=tenant)],
                 workflow="wf", workflow_hash="h" * 64)


def _stored(store: SQLiteStore) -> list[str]:
    return [str(r[0]) for r in store._conn.execute("SELECT command_id FROM sw_outbox ORDER BY rowid")]


def _drain(store: SQLiteStore) -> list[str]:
    claimed: list[str] = []
    while batch := store.claim("w1", 1_000, 60_000, 1):
        claimed += [c.command_id for c in batch]
    return claimed


def test_commands_lie_in_the_table_in_the_order_claims_take_them(tmp_path: Path) -> None:
    """An outbox row's rowid follows its place in the fair queue: the commands of tenants of
    different weights, submitted in turn, lie in the table in the order claims take them, so
    the rows a claim takes lie together, not in as many places as there are tenants."""
    store = open_store(f"sqlite:///{tmp_path / 'sw.db'}")
    assert isinstance(store, SQLiteStore)
    store.put_fleet(FleetConfig(tenants={"a": TenantShare("a", weight=1), "b": TenantShare("b", weight=4)}), 0)
    for n in range(6):
        for tenant in ("a", "b"):
            _queue(store, tenant, n)
    stored = _stored(store)
    claimed = _drain(store)
    assert claimed == stored and len(claimed) == 12
    assert claimed[:6] == ["a-0/s/1", "b-0/s/1", "b-1/s/1", "b-2/s/1", "b-3/s/1", "a-1/s/1"]  # b's 4 to a's 1
    store.close()


def test_a_place_in_the_queue_whose_rowids_are_taken_leaves_the_row_to_sqlite(tmp_path: Path) -> None:
    """Each place in the fair queue has 64 rowids. Past them (here 71 first commands of as
    many tenants, all at the head of the queue), a command takes SQLite's next rowid, after
    every row there is: it is written, and claimed in its turn all the same."""
    store = open_store(f"sqlite:///{tmp_path / 'sw.db'}")
    assert isinstance(store, SQLiteStore)
    _queue(store, "z", 0)
    _queue(store, "z", 1)  # one place further on, at rowid 64 * 1,000,000
    tenants = [f"t{i:02d}" for i in range(70)]
    for tenant in tenants:
        _queue(store, tenant, 0)
    stored = _stored(store)
    assert stored[:64] == ["z-0/s/1"] + [f"{t}-0/s/1" for t in tenants[:63]]
    assert stored[64:] == ["z-1/s/1"] + [f"{t}-0/s/1" for t in tenants[63:]]
    assert _drain(store) == stored[:64] + stored[65:] + ["z-1/s/1"]  # in the queue's order, not the table's
    store.close()


def _gated(store: SQLiteStore, n: int, gate: str = "step:wf/s") -> None:
    store.append(f"g-{n}", 0, {"event_id": f"g-{n}:submitted", "type": "Noted", "at_ms": 1}, {"status": "running"},
                 [NewCommand(f"g-{n}/s/1", "RunStep", {"step": "s"}, 0, gates=f'[["{gate}",1]]')],
                 workflow="wf", workflow_hash="h" * 64)


def _due_at(store: SQLiteStore, task_id: str) -> int:
    [row] = [r for r in store.outbox() if r["task_id"] == task_id]
    return int(row["available_at_ms"])


def test_an_ack_with_a_wake_is_one_delete_while_no_command_waits(tmp_path: Path) -> None:
    """An ack that carries a wake is one DELETE while no command waits for a slot at all.
    Where one waits for a gate of the wake, the wake is written and the waiter is due at
    once; where one waits for another gate only, it stays waiting; an ack of another
    claim's token deletes nothing and still wakes."""
    store = open_store(f"sqlite:///{tmp_path / 'sw.db'}")
    assert isinstance(store, SQLiteStore)
    _gated(store, 1)
    [first] = store.claim("w1", 1_000, 60_000, 5)
    seen: list[str] = []
    store._conn.set_trace_callback(lambda sql: seen.append(" ".join(sql.split()[:3]).upper()))
    store.ack(first.command_id, first.token, wake=Wake(first.gates, 1_000, 1))
    assert seen == ["DELETE FROM SW_OUTBOX"] and store.outbox() == []

    _gated(store, 2, "step:other/s")
    _gated(store, 3, "step:other/s")
    _gated(store, 4)
    held = store.claim("w1", 2_000, 60_000, 5)
    assert [c.task_id for c in held] == ["g-2", "g-4"] and _due_at(store, "g-3") > 2_000  # g-3 waits
    seen.clear()
    [mine] = [c for c in held if c.task_id == "g-4"]
    store.ack(mine.command_id, mine.token, wake=Wake(mine.gates, 2_000, 1))
    assert "UPDATE SW_OUTBOX SET" not in seen and _due_at(store, "g-3") > 2_000  # it waits for another gate
    assert [r["task_id"] for r in store.outbox()] == ["g-2", "g-3"]

    [other] = [c for c in held if c.task_id == "g-2"]
    store.ack(other.command_id, other.token + 1, wake=Wake(other.gates, 2_000, 1))  # not its claim
    assert _due_at(store, "g-3") == 2_000  # woken: and given back again, the slot still held
    assert store.claim("w2", 2_000, 60_000, 5) == [] and _due_at(store, "g-3") > 2_000
    store.ack(other.command_id, other.token, wake=Wake(other.gates, 2_000, 1))
    assert [c.task_id for c in store.claim("w2", 2_000, 60_000, 5)] == ["g-3"]
    store.close()


def test_whether_a_command_waits_is_one_seek_past_those_that_waited_before(tmp_path: Path) -> None:
    """A command that once waited for a slot and now runs keeps its gate of waiting; the
    read of whether any command waits seeks the index of the waiting ones by when they are
    due, and neither reads it nor counts it as waiting."""
    from statewright.store.sqlite import _ANY_WAITER

    store = open_store(f"sqlite:///{tmp_path / 'sw.db'}")
    assert isinstance(store, SQLiteStore)
    _gated(store, 1)
    _gated(store, 2)
    [first] = store.claim("w1", 1_000, 60_000, 5)
    assert store._found(_ANY_WAITER, (1_000,))  # g-2 waits for g-1's slot
    store.ack(first.command_id, first.token, wake=Wake(first.gates, 1_000, 1))
    [second] = store.claim("w1", 1_000, 60_000, 5)
    assert second.task_id == "g-2"
    assert store._conn.execute("SELECT COUNT(*) FROM sw_outbox WHERE wait_gate IS NOT NULL").fetchone() == (1,)
    assert not store._found(_ANY_WAITER, (1_000,))  # it ran: it waits no more

    plan = " ".join(str(r[3]) for r in store._conn.execute(f"EXPLAIN QUERY PLAN {_ANY_WAITER}", (0,)))
    assert "USING INDEX sw_outbox_waiters (available_at_ms>?)" in plan, plan
    store.close()


def test_a_command_parked_on_a_spent_budget_waits_for_no_slot(tmp_path: Path) -> None:
    """A command parked until its tenant's budget is raised or the day turns waits for no
    slot (a fleet config put wakes it): an ack with a wake is still the one DELETE."""
    store = open_store(f"sqlite:///{tmp_path / 'sw.db'}")
    assert isinstance(store, SQLiteStore)
    _gated(store, 1)
    _gated(store, 2, "step:other/s")
    [first, parked] = store.claim("w1", 1_000, 60_000, 5)
    store.release(parked.command_id, parked.token, 86_400_000, failed=False, started=False)
    store._conn.execute("UPDATE sw_outbox SET wait_gate = 'budget:acme' WHERE task_id = 'g-2'")
    seen: list[str] = []
    store._conn.set_trace_callback(lambda sql: seen.append(" ".join(sql.split()[:3]).upper()))
    store.ack(first.command_id, first.token, wake=Wake(first.gates, 1_000, 1))
    assert seen == ["DELETE FROM SW_OUTBOX"]
    assert [r["task_id"] for r in store.outbox()] == ["g-2"] and _due_at(store, "g-2") == 86_400_000
    store.close()
