"""One conformance suite for every store backend (the ``backend`` fixture is a parameter).

Times are explicit ``now_ms`` values: no test sleeps or polls wall time."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from statewright._errors import (
    NotAStatewrightDatabaseError,
    SchemaVersionError,
    StaleLeaseError,
    StoreError,
    VersionConflictError,
)
from statewright.store import AppendRequest, AppendResult, NewCommand, open_store
from statewright.store.base import Store
from statewright.store.chain import GENESIS_HASH, Chain, RawEvent
from statewright.store.schema import SCHEMA_VERSION

from .backends import SQL_BACKENDS, raw_sql

T0 = 1_700_000_000_000
LEASE_MS = 30_000


def event(event_id: str, at_ms: int = T0, type_: str = "Noted") -> dict[str, Any]:
    return {"event_id": event_id, "type": type_, "at_ms": at_ms}


def run_step(command_id: str, at_ms: int = T0, type_: str = "RunStep") -> NewCommand:
    return NewCommand(command_id, type_, {"step": "a", "command_id": command_id}, at_ms)


def timer(timer_id: str, due_at_ms: int) -> NewCommand:
    return NewCommand(timer_id, "TimerFired", {}, due_at_ms, timer=True, purpose="wait")


def submit(
    store: Store, task_id: str = "t1", commands: Sequence[NewCommand] = (), **kw: Any
) -> AppendResult:
    return store.append(
        task_id, 0, event(f"{task_id}:submitted"), {"status": "running", "n": 0}, list(commands),
        workflow="wf", workflow_hash="h" * 64, **kw,
    )


def step(
    store: Store, task_id: str, version: int, event_id: str,
    commands: Sequence[NewCommand] = (), *, status: str = "running", **kw: Any,
) -> AppendResult:
    return store.append(
        task_id, version, event(event_id, T0 + version), {"status": status, "n": version},
        list(commands), **kw,
    )


def verify_chain(rows: Sequence[RawEvent]) -> list[int]:
    """Versions whose stored hash does not match a recomputation from the row before."""
    bad, prev = [], GENESIS_HASH
    for row in rows:
        if row.prev_hash != prev or Chain().recompute(row) != row.hash:
            bad.append(int(row.version))
        prev = row.hash
    return bad


def outbox_ids(store: Store, task_id: str | None = None) -> list[str]:
    return sorted(str(r["command_id"]) for r in store.outbox(task_id))


# --- schema --------------------------------------------------------------------------------
def test_fresh_database_gets_the_current_schema_version(store: Store) -> None:
    """A new database is created at the current schema version, and ensuring it again is a no-op."""
    assert store.schema_version() == SCHEMA_VERSION
    assert store.ensure_schema() == SCHEMA_VERSION
    assert store.ensure_schema(upgrade=False) == SCHEMA_VERSION


@pytest.mark.parametrize("backend", SQL_BACKENDS)
def test_db_upgrade_migrates_an_older_schema(store_url: str, opener: Callable[[], Store]) -> None:
    """``open_store(url).ensure_schema()`` (statewright db upgrade) brings an old schema current."""
    opener()
    raw_sql(store_url, "UPDATE sw_meta SET value = ? WHERE key = ?", ("0", "schema_version"))
    again = opener()
    assert again.ensure_schema() == SCHEMA_VERSION
    assert again.schema_version() == SCHEMA_VERSION


def index_names(backend: str, store_url: str) -> set[str]:
    if backend == "sqlite":
        rows = raw_sql(store_url, "SELECT name FROM sqlite_master WHERE type = 'index'")
    else:
        rows = raw_sql(store_url, "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema()")
    return {str(r[0]) for r in rows}


@pytest.mark.parametrize("backend", SQL_BACKENDS)
def test_db_upgrade_from_version_1_replaces_the_status_index(
    backend: str, store_url: str, opener: Callable[[], Store],
) -> None:
    """Version 2 indexes tasks by status alone: upgrading a version 1 database drops the old
    (status, updated_at_ms) index and keeps every row."""
    store = opener()
    submit(store, "t1", [run_step("t1/a/1")])
    raw_sql(store_url, "DROP INDEX sw_tasks_by_status")
    raw_sql(store_url, "CREATE INDEX sw_tasks_status ON sw_tasks (status, updated_at_ms)")
    raw_sql(store_url, "UPDATE sw_meta SET value = ? WHERE key = ?", ("1", "schema_version"))
    again = opener()
    assert again.schema_version() == SCHEMA_VERSION
    names = index_names(backend, store_url)
    assert "sw_tasks_by_status" in names and "sw_tasks_status" not in names
    assert again.counts_by_status() == {"running": 1} and outbox_ids(again) == ["t1/a/1"]


@pytest.mark.parametrize("backend", SQL_BACKENDS)
def test_newer_schema_version_is_refused(store_url: str, opener: Callable[[], Store]) -> None:
    """A database written by a newer statewright is refused with a message saying what to do."""
    opener()
    newer = str(SCHEMA_VERSION + 1)
    raw_sql(store_url, "UPDATE sw_meta SET value = ? WHERE key = ?", (newer, "schema_version"))
    with pytest.raises(SchemaVersionError, match=rf"version {newer}, newer .*upgrade statewright"):
        opener()


@pytest.mark.parametrize("backend", SQL_BACKENDS)
def test_a_foreign_database_is_refused(backend: str, store_url: str, tmp_path: Path) -> None:
    """Tables that statewright did not make mean the database is someone else's: refuse it."""
    if backend == "sqlite":
        raw_sql(store_url, "CREATE TABLE customers (id INTEGER PRIMARY KEY)")
    else:
        from statewright.store.postgres import split_url

        schema = split_url(store_url)[1]
        raw_sql(store_url, f'CREATE SCHEMA "{schema}"')
        raw_sql(store_url, "CREATE TABLE customers (id INTEGER PRIMARY KEY)")
    with pytest.raises(NotAStatewrightDatabaseError, match=r"not a statewright database.*customers"):
        open_store(store_url)


# --- definitions ---------------------------------------------------------------------------
def test_definitions_are_stored_by_content_hash(store: Store, opener: Callable[[], Store]) -> None:
    """A definition is kept under its hash; storing the same hash again keeps the first body."""
    store.put_definition("abc", "wf", 1, {"workflow": "wf", "steps": [1]})
    store.put_definition("abc", "wf", 1, {"workflow": "other"})
    assert opener().get_definition("abc") == {"workflow": "wf", "steps": [1]}
    assert store.get_definition("nope") is None


# --- append --------------------------------------------------------------------------------
def test_append_at_version_zero_creates_the_task(store: Store) -> None:
    """The first append creates the task row, its first event (chained to genesis) and commands."""
    res = submit(store, "t1", [run_step("t1/a/1")])
    assert res == AppendResult(version=1)
    task = store.load("t1")
    assert task is not None
    assert (task.task_id, task.workflow, task.status, task.version) == ("t1", "wf", "running", 1)
    assert task.state == {"status": "running", "n": 0}
    assert task.created_at_ms == T0
    [ev] = store.events("t1")
    assert (ev.version, ev.event_id, ev.type, ev.prev_hash) == (1, "t1:submitted", "Noted", GENESIS_HASH)
    assert outbox_ids(store, "t1") == ["t1/a/1"]
    assert store.task_ids() == ["t1"]
    assert store.counts_by_status() == {"running": 1}
    assert [t.task_id for t in store.list_tasks(status="running")] == ["t1"]
    assert store.load("missing") is None


def test_a_duplicate_event_id_returns_the_original_version(store: Store) -> None:
    """Appending an event id again writes nothing and reports the version it was first written at."""
    submit(store, "t1")
    step(store, "t1", 1, "e2", [run_step("c2")])
    step(store, "t1", 2, "e3")
    res = step(store, "t1", 3, "e2", [run_step("c-dup")])
    assert res.duplicate and res.version == 2
    assert [e.event_id for e in store.events("t1")] == ["t1:submitted", "e2", "e3"]
    assert outbox_ids(store) == ["c2"]
    assert store.has_event("e2") and not store.has_event("e4")
    loaded = store.load("t1")
    assert loaded is not None and loaded.version == 3


def test_the_same_idem_key_returns_the_first_task(store: Store) -> None:
    """Submitting under an idempotency key that exists creates nothing and names the first task."""
    submit(store, "t1", idem_key="order-7")
    res = submit(store, "t2", [run_step("t2/a/1")], idem_key="order-7")
    assert res.duplicate and res.version == 1
    assert store.task_by_key("order-7") == "t1"
    assert store.load("t2") is None and outbox_ids(store) == []
    assert store.task_by_key("other") is None


def test_a_stale_expected_version_loses_and_writes_nothing(store: Store) -> None:
    """Of two appends on one version the second gets VersionConflictError and leaves no trace."""
    submit(store, "t1")
    step(store, "t1", 1, "winner", [run_step("c-win")])
    with pytest.raises(VersionConflictError) as info:
        step(store, "t1", 1, "loser", [run_step("c-lose"), timer("tm-lose", T0)])
    assert (info.value.task_id, info.value.expected, info.value.actual) == ("t1", 1, 2)
    assert not store.has_event("loser")
    assert outbox_ids(store) == ["c-win"] and store.timers() == []
    loaded = store.load("t1")
    assert loaded is not None and loaded.state == {"status": "running", "n": 1}
    with pytest.raises(VersionConflictError):
        step(store, "nobody", 3, "x")


def run_together(*calls: Callable[[], object]) -> list[object]:
    """Run the calls on threads released at the same instant; each one's result or StoreError."""
    barrier = threading.Barrier(len(calls))
    out: list[object] = [None] * len(calls)

    def run(i: int) -> None:
        barrier.wait()
        try:
            out[i] = calls[i]()
        except StoreError as exc:
            out[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def test_racing_appends_on_separate_connections_have_one_winner(opener: Callable[[], Store]) -> None:
    """Two connections append on the same version at once, many times: exactly one wins each round."""
    stores = [opener(), opener()]
    submit(stores[0], "t1")
    rounds = 15
    for v in range(1, rounds + 1):
        outcomes = run_together(
            *(partial(step, stores[i], "t1", v, f"e{v}-{i}", [run_step(f"c{v}-{i}")]) for i in range(2))
        )
        won = [i for i, o in enumerate(outcomes) if isinstance(o, AppendResult)]
        lost = [i for i, o in enumerate(outcomes) if isinstance(o, VersionConflictError)]
        assert len(won) == 1 and len(lost) == 1, outcomes
        assert not stores[0].has_event(f"e{v}-{lost[0]}")
        assert f"c{v}-{lost[0]}" not in outbox_ids(stores[1])
    events = stores[1].events("t1")
    assert [e.version for e in events] == list(range(1, rounds + 2))
    assert len(outbox_ids(stores[0])) == rounds


def test_concurrent_duplicate_event_is_reported_as_duplicate(opener: Callable[[], Store]) -> None:
    """The same event appended on two connections at once is written once; the other is a duplicate."""
    stores = [opener(), opener()]
    submit(stores[0], "t1")
    for v in range(1, 11):
        results = run_together(
            *(partial(step, stores[i], "t1", v, f"same-{v}", [run_step(f"c{v}")]) for i in range(2))
        )
        assert all(isinstance(r, AppendResult) for r in results), results
        assert sorted(r.duplicate for r in results if isinstance(r, AppendResult)) == [False, True]
        assert {r.version for r in results if isinstance(r, AppendResult)} == {v + 1}
    assert len(stores[0].events("t1")) == 11


def test_the_event_log_is_hash_chained_and_an_edit_shows(backend: str, store_url: str, store: Store) -> None:
    """Each event's hash covers the one before; editing a stored body breaks the chain there."""
    submit(store, "t1")
    for v in range(1, 4):
        step(store, "t1", v, f"e{v}")
    rows = store.raw_events("t1")
    assert verify_chain(rows) == []
    events = store.events("t1")
    assert all(e.prev_hash == p.hash for p, e in itertools.pairwise(events))
    forged = rows[2].body.replace('"Noted"', '"Forged"')
    if backend == "memory":  # its rows, edited where they are kept
        store.db.events["t1"] = (*rows[:2], rows[2]._replace(body=forged), *rows[3:])  # type: ignore[attr-defined]
    else:
        raw_sql(store_url, "UPDATE sw_events SET body = ? WHERE task_id = ? AND version = ?", (forged, "t1", 3))
    assert verify_chain(store.raw_events("t1")) == [3]


# --- outbox and leases ---------------------------------------------------------------------
def test_claim_takes_a_lease_and_increments_the_fencing_token(store: Store) -> None:
    """A claim holds the command until the lease ends; nobody else gets it meanwhile."""
    submit(store, "t1", [run_step("c1", T0 + 10)])
    assert store.claim("w1", T0, LEASE_MS) == []  # not yet available
    [c] = store.claim("w1", T0 + 10, LEASE_MS)
    assert (c.command_id, c.task_id, c.type, c.token, c.deliveries, c.failures) == ("c1", "t1", "RunStep", 1, 1, 0)
    assert c.lease_expires_ms == T0 + 10 + LEASE_MS
    assert c.body == {"step": "a", "command_id": "c1"}
    assert store.claim("w2", T0 + 20, LEASE_MS) == []
    assert store.renew("c1", 1, T0 + 1000, LEASE_MS)
    assert not store.renew("c1", 0, T0 + 1000, LEASE_MS)
    assert store.claim("w2", T0 + 10 + LEASE_MS, LEASE_MS) == []  # renewed past that
    [row] = store.outbox("t1")
    assert (row["lease_owner"], row["lease_expires_ms"]) == ("w1", T0 + 1000 + LEASE_MS)
    assert store.next_due_ms() == T0 + 1000 + LEASE_MS


def test_a_lease_given_back_is_not_taken_again_by_renewing_it(store: Store) -> None:
    """A renewal that comes after its claim was released (a worker's renewer that read its
    claims just before the worker gave one back) changes nothing: the command stays free for
    the next claim, instead of leased to nobody until that lease ran out."""
    submit(store, "t1", [run_step("c1")])
    [c] = store.claim("w1", T0, LEASE_MS)
    store.release("c1", c.token, T0 + 5, failed=False, started=False)
    assert not store.renew("c1", c.token, T0 + 10, LEASE_MS)
    [row] = store.outbox("t1")
    assert (row["lease_owner"], row["lease_expires_ms"]) == (None, None)
    [again] = store.claim("w2", T0 + 10, LEASE_MS)
    assert (again.command_id, again.token) == ("c1", 2)


def test_an_expired_lease_is_redelivered_with_a_new_token(store: Store) -> None:
    """After the lease runs out another worker gets the command under the next token."""
    submit(store, "t1", [run_step("c1")])
    [first] = store.claim("w1", T0, LEASE_MS)
    [second] = store.claim("w2", T0 + LEASE_MS, LEASE_MS)
    assert (first.token, second.token) == (1, 2)
    assert second.deliveries == 2
    assert store.outbox("t1")[0]["lease_owner"] == "w2"


def test_completing_with_an_old_token_is_refused_and_writes_nothing(store: Store) -> None:
    """A late worker's report (old fencing token) raises StaleLeaseError; nothing is written."""
    submit(store, "t1", [run_step("c1")])
    [old] = store.claim("w1", T0, LEASE_MS)
    [new] = store.claim("w2", T0 + LEASE_MS, LEASE_MS)
    with pytest.raises(StaleLeaseError) as info:
        step(store, "t1", 1, "late", [run_step("c2")], complete=("c1", old.token))
    assert (info.value.command_id, info.value.token, info.value.current) == ("c1", 1, 2)
    assert not store.has_event("late")
    loaded = store.load("t1")
    assert loaded is not None and loaded.version == 1
    assert outbox_ids(store) == ["c1"]
    store.ack("c1", old.token)  # an old token cannot ack either
    assert outbox_ids(store) == ["c1"]
    step(store, "t1", 1, "on-time", [run_step("c2")], complete=("c1", new.token))
    assert outbox_ids(store) == ["c2"]


def test_release_with_backoff_makes_the_command_due_later(store: Store) -> None:
    """A released command is free again at the backoff time, with the failure counted."""
    submit(store, "t1", [run_step("c1")])
    [c] = store.claim("w1", T0, LEASE_MS)
    store.release("c1", c.token, T0 + 5000, failed=True, error="TransientError: throttled")
    [row] = store.outbox("t1")
    assert (row["lease_owner"], row["lease_expires_ms"], row["failures"]) == (None, None, 1)
    assert store.next_due_ms() == T0 + 5000
    assert store.claim("w1", T0 + 4999, LEASE_MS) == []
    [again] = store.claim("w2", T0 + 5000, LEASE_MS)
    assert (again.token, again.failures, again.deliveries) == (2, 1, 2)
    store.release("c1", c.token, T0, failed=True)  # stale token: ignored
    assert store.outbox("t1")[0]["lease_owner"] == "w2"


def test_concurrent_claimers_never_share_a_command(opener: Callable[[], Store]) -> None:
    """Four connections claim from one outbox at once; every command goes to exactly one."""
    first = opener()
    submit(first, "t1", [run_step(f"c{i:02d}") for i in range(40)])
    stores = [opener() for _ in range(4)]
    got: list[list[str]] = [[] for _ in stores]
    barrier = threading.Barrier(len(stores))

    def drain(i: int) -> None:
        barrier.wait()
        while claims := stores[i].claim(f"w{i}", T0, LEASE_MS, 3):
            got[i].extend(c.command_id for c in claims)

    threads = [threading.Thread(target=drain, args=(i,)) for i in range(len(stores))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    claimed = [cid for g in got for cid in g]
    assert sorted(claimed) == [f"c{i:02d}" for i in range(40)]
    assert all(r["token"] == 1 for r in first.outbox())


def test_claim_for_returns_the_next_command_in_the_same_transaction(store: Store) -> None:
    """Recording an outcome with claim_for completes the command and claims the next one for us."""
    submit(store, "t1", [run_step("t1/a/1")])
    [c] = store.claim("w1", T0, LEASE_MS)
    res = step(
        store, "t1", 1, "t1/a/1:result",
        [NewCommand("t1/approve", "RequestApproval", {}, T0), run_step("t1/b/1")],
        complete=("t1/a/1", c.token), claim_for=("w1", T0 + LEASE_MS),
    )
    assert res.claimed is not None
    assert (res.claimed.command_id, res.claimed.token, res.claimed.lease_expires_ms) == ("t1/b/1", 1, T0 + LEASE_MS)
    assert outbox_ids(store) == ["t1/approve", "t1/b/1"]
    [other] = store.claim("w2", T0, LEASE_MS, 5)  # only the unclaimed one is left for others
    assert other.command_id == "t1/approve"


# --- timers --------------------------------------------------------------------------------
def test_a_timer_is_claimed_once_and_deleted_when_it_fires(store: Store) -> None:
    """A due timer goes to one worker; firing it deletes it; an old token cannot fire it."""
    submit(store, "t1", [timer("tm1", T0 + 1000)])
    assert store.timers("t1") == [{"timer_id": "tm1", "task_id": "t1", "due_at_ms": T0 + 1000, "purpose": "wait"}]
    assert store.next_due_ms() == T0 + 1000
    assert store.claim_timers("w1", T0 + 999, LEASE_MS) == []
    [t] = store.claim_timers("w1", T0 + 1000, LEASE_MS)
    assert (t.timer_id, t.task_id, t.token, t.purpose) == ("tm1", "t1", 1, "wait")
    assert store.claim_timers("w2", T0 + 1000, LEASE_MS) == []
    with pytest.raises(StaleLeaseError):
        step(store, "t1", 1, "tm1:fired", complete_timer=("tm1", 0))
    assert store.timers() != []
    step(store, "t1", 1, "tm1:fired", complete_timer=("tm1", t.token))
    assert store.timers() == [] and store.next_due_ms() is None
    assert store.claim_timers("w2", T0 + 10 * LEASE_MS, LEASE_MS) == []


def test_drop_timer_needs_the_current_token(store: Store) -> None:
    """drop_timer with the claim's token removes the timer; with another token it does nothing."""
    submit(store, "t1", [timer("tm1", T0)])
    [t] = store.claim_timers("w1", T0, LEASE_MS)
    store.drop_timer("tm1", t.token + 1)
    assert len(store.timers()) == 1
    store.drop_timer("tm1", t.token)
    assert store.timers() == []


def test_a_terminal_append_clears_the_tasks_outbox_and_timers(store: Store) -> None:
    """When a task ends, its pending commands and timers go; other tasks' stay."""
    submit(store, "t1", [run_step("t1/a"), run_step("t1/b"), timer("t1/tm", T0 + 50)])
    submit(store, "t2", [run_step("t2/a"), timer("t2/tm", T0 + 50)])
    step(store, "t1", 1, "t1:cancelled", status="cancelled", terminal=True)
    assert outbox_ids(store) == ["t2/a"]
    assert [t["timer_id"] for t in store.timers()] == ["t2/tm"]
    assert store.counts_by_status() == {"cancelled": 1, "running": 1}


# --- waiting for work ----------------------------------------------------------------------
def test_wait_for_work_returns_by_the_timeout_or_the_wake_event(store: Store) -> None:
    """An idle wait never outlasts its timeout and ends at once when the wake event is set."""
    wake = threading.Event()
    wake.set()
    store.wait_for_work(0.0)  # a first call may report "maybe work" (nothing was heard yet)
    assert store.wait_for_work(30.0, wake) is False  # ends now, not in 30 s
    assert store.wait_for_work(0.0) is False


def test_interrupt_waits_ends_a_wait_whose_wake_event_was_set_meanwhile(store: Store) -> None:
    """A wait in progress ends when its wake event is set and the store is told so (work
    handed to the waiting worker in-process); with nothing waiting, telling it is harmless."""
    store.interrupt_waits()
    store.wait_for_work(0.0)
    wake, ended = threading.Event(), threading.Event()

    def idle() -> None:
        store.wait_for_work(3600.0, wake)
        ended.set()

    waiter = threading.Thread(target=idle, daemon=True)
    waiter.start()
    wake.set()
    store.interrupt_waits()
    assert ended.wait(timeout=30)
    waiter.join(timeout=30)


def test_stores_close_cleanly_and_open_again(store_url: str, store: Store) -> None:
    """Closing a store and opening the same database again sees what was written."""
    submit(store, "t1")
    store.close()
    store.close()  # closing twice is harmless
    again = open_store(store_url)
    try:
        assert again.task_ids() == ["t1"]
    finally:
        again.close()


# --- through the engine and a real worker ---------------------------------------------------
def _two_step_workflow() -> Any:
    from statewright.definition.builder import WorkflowBuilder

    return (
        WorkflowBuilder("conformance")
        .code("build", owner="ci", run={"command": ["true"]})
        .code("ship", owner="ci", run={"command": ["true"]})
        .build()
    )


def test_engine_submit_with_a_key_returns_the_same_task(store: Store, tmp_path: Path) -> None:
    """Engine.submit under one idempotency key twice gives one task; the key with other input
    is refused and adds nothing."""
    from statewright import Engine
    from statewright._errors import KeyReusedError

    engine = Engine(store, workspace_root=tmp_path / "ws")
    first = engine.submit(_two_step_workflow(), {"n": 1}, key="deploy-42")
    again = engine.submit(_two_step_workflow(), {"n": 1}, key="deploy-42")
    assert first == again
    with pytest.raises(KeyReusedError, match=f"key 'deploy-42' already names task {first}, submitted with other input"):
        engine.submit(_two_step_workflow(), {"n": 2}, key="deploy-42")
    assert store.task_ids() == [first]


def test_a_task_runs_to_completion_through_a_real_worker(store: Store, tmp_path: Path) -> None:
    """Submit, then the worker claims, runs both steps and records them: completed, chain intact."""
    from statewright import Engine, run_task

    engine = Engine(store, workspace_root=tmp_path / "ws")
    tid = engine.submit(_two_step_workflow(), {})
    st = run_task(engine, tid, lease_seconds=5)
    assert st.status == "completed" and st == engine.state(tid)
    assert [e.type for e in store.events(tid)] == ["TaskSubmitted", "AttemptReported", "AttemptReported"]
    assert verify_chain(store.raw_events(tid)) == []
    assert store.outbox() == [] and store.timers() == []


# --- group commit --------------------------------------------------------------------------
def batch_step(task_id: str, version: int, event_id: str, commands: Sequence[NewCommand] = (),
               **kw: Any) -> AppendRequest:
    return AppendRequest(task_id, version, event(event_id, T0 + version), {"status": "running", "n": version},
                         list(commands), **kw)


def test_append_batch_writes_every_append_in_one_transaction(store: Store, opener: Callable[[], Store]) -> None:
    """A batch of appends to several tasks: each is written as ``append`` would write it (the
    event chained, the projection, the completed command gone, the next one claimed)."""
    for tid in ("t1", "t2", "t3"):
        submit(store, tid, [run_step(f"{tid}/a/1")])
    claims = {c.task_id: c for c in store.claim("w1", T0, LEASE_MS, 3)}
    results = store.append_batch([
        batch_step(tid, 1, f"{tid}:r1", [run_step(f"{tid}/b/1")],
                   complete=(f"{tid}/a/1", claims[tid].token), claim_for=("w1", T0 + LEASE_MS))
        for tid in ("t1", "t2", "t3")
    ])
    assert results is not None and [r.version for r in results] == [2, 2, 2]
    assert [r.claimed.command_id if r.claimed else None for r in results] == ["t1/b/1", "t2/b/1", "t3/b/1"]
    other = opener()
    for tid in ("t1", "t2", "t3"):
        loaded = other.load(tid)
        assert loaded is not None and loaded.version == 2 and loaded.state["n"] == 1
        assert verify_chain(other.raw_events(tid)) == []
        assert [r["lease_owner"] for r in other.outbox(tid)] == ["w1"]
    assert outbox_ids(other) == ["t1/b/1", "t2/b/1", "t3/b/1"]
    # the claimed commands are held: nobody else can claim them
    assert other.claim("w2", T0, LEASE_MS, 10) == []
    # and the next batch chains on from what the first one wrote
    again = store.append_batch([batch_step(tid, 2, f"{tid}:r2") for tid in ("t1", "t2")])
    assert again is not None and [r.version for r in again] == [3, 3]
    assert verify_chain(other.raw_events("t1")) == []


@pytest.mark.parametrize("refusal", ["stale_version", "stale_token", "duplicate_event"])
def test_a_refused_append_rolls_the_whole_batch_back(store: Store, refusal: str) -> None:
    """One refused append (a stale version, an old fencing token, an event already recorded)
    and append_batch writes none of the batch and returns None."""
    for tid in ("t1", "t2"):
        submit(store, tid, [run_step(f"{tid}/a/1")])
    claims = {c.task_id: c for c in store.claim("w1", T0, LEASE_MS, 2)}
    good = batch_step("t1", 1, "t1:r1", [run_step("t1/b/1")], complete=("t1/a/1", claims["t1"].token))
    if refusal == "stale_version":
        step(store, "t2", 1, "t2:other")
        bad = batch_step("t2", 1, "t2:r1")
    elif refusal == "stale_token":
        bad = batch_step("t2", 1, "t2:r1", complete=("t2/a/1", claims["t2"].token + 5))
    else:
        step(store, "t2", 1, "t2:r1")
        bad = batch_step("t2", 1, "t2:r1")
    before = {tid: store.load(tid) for tid in ("t1", "t2")}
    assert store.append_batch([good, bad]) is None
    assert store.append_batch([bad, good]) is None
    assert {tid: store.load(tid) for tid in ("t1", "t2")} == before
    assert not store.has_event("t1:r1")
    assert outbox_ids(store, "t1") == ["t1/a/1"]
    # the good one alone still goes through
    res = store.append_batch([good])
    assert res is not None and res[0].version == 2


def test_load_many_reads_the_tasks_that_exist(store: Store) -> None:
    """One query for several tasks: those that exist, as ``load`` reads each one."""
    for tid in ("t1", "t2", "t3"):
        submit(store, tid)
    step(store, "t2", 1, "t2:e2")
    found = store.load_many(["t3", "nobody", "t2"])
    assert sorted(found) == ["t2", "t3"]
    assert found["t2"] == store.load("t2") and found["t2"].version == 2
    assert store.load_many([]) == {}
    # what it read chains the next append, as a load does
    assert store.append_batch([batch_step("t2", 2, "t2:e3"), batch_step("t3", 1, "t3:e2")]) is not None
    assert verify_chain(store.raw_events("t2")) == [] and verify_chain(store.raw_events("t3")) == []



def test_a_command_given_back_unstarted_takes_its_delivery_back(store: Store) -> None:
    """A release of a command that was never started (``started=False``) lowers its
    deliveries again; a release after starting keeps the delivery counted."""
    submit(store, "t1", [run_step("c1")])
    [c] = store.claim("w1", T0, LEASE_MS)
    assert c.deliveries == 1
    store.release("c1", c.token, T0, failed=False, started=False)
    [row] = store.outbox("t1")
    assert (row["lease_owner"], row["deliveries"], row["failures"]) == (None, 0, 0)
    [again] = store.claim("w2", T0, LEASE_MS)
    assert (again.token, again.deliveries) == (2, 1)
    store.release("c1", again.token, T0, failed=False)  # started, then given back
    [third] = store.claim("w3", T0, LEASE_MS)
    assert (third.token, third.deliveries) == (3, 2)
    store.release("c1", again.token, T0, failed=False, started=False)  # stale token: ignored
    assert store.outbox("t1")[0]["deliveries"] == 2


def test_a_command_claimed_by_its_commit_given_back_unstarted_is_fresh_again(store: Store) -> None:
    """A next command claimed inside the commit that made it (deliveries 1), given back
    unstarted, is delivered next time as a first delivery."""
    submit(store, "t1", [run_step("c1")])
    [c] = store.claim("w1", T0, LEASE_MS)
    res = step(store, "t1", 1, "e2", [run_step("c2")], complete=("c1", c.token), claim_for=("w1", T0 + LEASE_MS))
    assert res.claimed is not None and res.claimed.deliveries == 1
    store.release("c2", res.claimed.token, T0, failed=False, started=False)
    [again] = store.claim("w2", T0, LEASE_MS)
    assert (again.command_id, again.deliveries) == ("c2", 1)
