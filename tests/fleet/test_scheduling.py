"""Scheduling the fleet on every backend: priorities, fair shares across tenants,
concurrency and rate limits, daily budgets, and why a queued step is not running."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from people.support import People
from statewright._errors import InputError
from statewright.cli import cli
from statewright.definition.fleet import DAY_MS, FleetConfig, NamedLimit, TenantShare, parse_rate
from statewright.definition.loader import workflow_from_dict
from statewright.definition.model import Workflow
from statewright.runtime.clock import FakeClock
from statewright.runtime.engine import Engine
from statewright.runtime.fleet import waiting_reasons
from statewright.runtime.worker import Worker
from statewright.store import AppendRequest, AppendResult
from statewright.store.admission import CONCURRENCY_RECHECK_MS
from statewright.store.base import Wake
from store.backends import SQL_BACKENDS, raw_sql

from . import fl_steps

LEASE_MS = 60_000


def workflow(name: str, *, step: dict[str, Any] | None = None, **top: Any) -> Workflow:
    body = {"id": "work", "kind": "code", "owner": "tests", "run": {"callable": "fleet.fl_steps:record"},
            **(step or {})}
    return workflow_from_dict({"workflow": name, "steps": [body], **top}, f"<{name}>")


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def engine(open_engine: Callable[..., Engine], clock: FakeClock, tmp_path: Path) -> Engine:
    return open_engine(clock=clock, workspace_root=tmp_path / "ws")


@pytest.fixture(autouse=True)
def _ran() -> Iterator[list[str]]:
    fl_steps.RAN.clear()
    yield fl_steps.RAN
    fl_steps.RAN.clear()


def test_a_task_submitted_last_with_a_higher_priority_runs_next(engine: Engine) -> None:
    """After a backlog of priority 0, a task submitted last with priority 5 is claimed first."""
    wf = workflow("prio")
    backlog = [engine.submit(wf, {"n": i}) for i in range(5)]
    urgent = engine.submit(wf, {"n": 99}, priority=5)
    claims = engine.store.claim("w1", engine.clock.now_ms(), LEASE_MS, 1)
    assert [c.task_id for c in claims] == [urgent]
    for c in claims:
        engine.store.release(c.command_id, c.token, engine.clock.now_ms(), failed=False, started=False)
    Worker(engine, concurrency=1).run(until_idle=True)
    assert [urgent, *backlog] == fl_steps.RAN  # then the backlog, oldest first


def test_a_tenant_with_a_backlog_does_not_starve_one_that_came_later(engine: Engine) -> None:
    """Tenant A submits 200 tasks, then tenant B 10: B's last completes before A's 50th."""
    wf = workflow("fair")
    a = [engine.submit(wf, {"n": i}, tenant="a") for i in range(200)]
    b = [engine.submit(wf, {"n": i}, tenant="b") for i in range(10)]
    Worker(engine, concurrency=1).run(until_idle=True)
    order = fl_steps.RAN
    assert sorted(order) == sorted(a + b)
    assert order.index(b[-1]) < order.index(a[49])
    assert [t for t in order if t in set(a)] == a  # within a tenant: oldest first


def test_weights_give_a_tenant_more_of_the_claims(engine: Engine) -> None:
    """A tenant of weight 3 gets about three claims to every one of a tenant of weight 1."""
    engine.store.put_fleet(FleetConfig(tenants={"big": TenantShare("big", weight=3)}), engine.clock.now_ms())
    wf = workflow("weights")
    small = [engine.submit(wf, {"n": i}, tenant="small") for i in range(20)]
    big = [engine.submit(wf, {"n": i}, tenant="big") for i in range(20)]
    Worker(engine, concurrency=1).run(until_idle=True)
    first = fl_steps.RAN[:16]
    assert sum(t in set(big) for t in first) >= 11 and sum(t in set(small) for t in first) >= 3


def test_a_step_at_its_concurrency_waits_without_a_lease_and_says_why(engine: Engine) -> None:
    """A step with concurrency 1 is admitted once across workers; the other waits unleased,
    with its reason, and is woken when the slot frees."""
    wf = workflow("deploy", step={"concurrency": 1})
    t1, t2 = engine.submit(wf, {"n": 1}), engine.submit(wf, {"n": 2})
    now = engine.clock.now_ms()
    first = engine.store.claim("w1", now, LEASE_MS, 5)
    assert [c.task_id for c in first] == [t1] and first[0].gates == ("step:deploy/work",)
    assert engine.store.claim("w2", now, LEASE_MS, 5) == []
    row = next(r for r in engine.store.outbox() if r["task_id"] == t2)
    assert row["lease_owner"] is None and row["deliveries"] == 0
    why = waiting_reasons(engine.store.outbox(), now)[t2]
    assert "waits for a slot of step 'deploy/work' (concurrency 1, 1 in use)" in why
    engine.store.ack(first[0].command_id, first[0].token)
    engine.store.wake(first[0].gates, now)
    assert [c.task_id for c in engine.store.claim("w2", now, LEASE_MS, 5)] == [t2]


def spy_wakes(store: Any, monkeypatch: pytest.MonkeyPatch) -> tuple[list[Wake], list[Sequence[str]]]:
    """(the wakes each commit of outcomes told, the gates of each wake written on its own,
    outside a commit of outcomes), filled as the store is used."""
    told: list[Wake] = []
    alone: list[Sequence[str]] = []
    committing = threading.local()
    real_batch, real_wake = store.append_batch, store.wake

    def append_batch(requests: Sequence[AppendRequest], *, wake: Wake | None = None) -> list[AppendResult] | None:
        if wake is not None:
            told.append(wake)
        committing.on = True
        try:
            return real_batch(requests, wake=wake)
        finally:
            committing.on = False

    def wake(gates: Sequence[str], now_ms: int, count: int = 1) -> None:
        if not getattr(committing, "on", False):
            alone.append(gates)
        real_wake(gates, now_ms, count)

    monkeypatch.setattr(store, "append_batch", append_batch)
    monkeypatch.setattr(store, "wake", wake)
    return told, alone


def test_the_commit_of_an_outcome_frees_its_slot_and_wakes_the_waiter(
    engine: Engine, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker tells the end of a claim under a limit in the commit of its outcome, not in a
    write of its own: the waiter is due at once, well before it would look again."""
    wf = workflow("deploy1", step={"concurrency": 1})
    tids = [engine.submit(wf, {"n": i}) for i in range(3)]
    store, start = engine.store, clock.now_ms()
    told, alone = spy_wakes(store, monkeypatch)
    Worker(engine, concurrency=2).run(until_idle=True)

    assert len(fl_steps.RAN) == 3
    assert all(engine.state(t).status.value == "completed" for t in tids)
    assert sum(w.count for w in told) == len(tids)
    assert alone == []
    assert clock.now_ms() - start < CONCURRENCY_RECHECK_MS


def test_a_task_run_alone_wakes_the_waiter_for_its_slot_in_the_commit_of_its_outcome(
    engine: Engine, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``Worker.run_one`` (``statewright run``) ends a claim under a limit as ``run`` does:
    the commit of the step's outcome wakes the command that waited for its slot, with no
    write of its own, and the waiter is due at once."""
    wf = workflow("deploy-alone", step={"concurrency": 1, "run": {"callable": "fleet.fl_steps:record_and_call"}})
    t1, t2 = engine.submit(wf, {"n": 1}), engine.submit(wf, {"n": 2})
    store = engine.store
    tried: list[list[str]] = []

    def another_worker_claims() -> None:  # while t1's step holds the slot, t2 is given back to wait
        tried.append([c.task_id for c in store.claim("w2", clock.now_ms(), LEASE_MS, 5)])

    told, alone = spy_wakes(store, monkeypatch)
    fl_steps.DURING.append(another_worker_claims)
    try:
        state = Worker(engine).run_one(t1)
    finally:
        fl_steps.DURING.clear()

    assert state.status.value == "completed"
    assert tried == [[]]
    assert [(w.gates, w.count) for w in told] == [(("step:deploy-alone/work",), 1)]
    assert alone == []
    assert [c.task_id for c in store.claim("w2", clock.now_ms(), LEASE_MS, 5)] == [t2]  # due now: no clock moved


def test_an_ack_that_carries_the_wake_frees_the_slot_and_makes_the_waiter_due(engine: Engine, clock: FakeClock) -> None:
    """A claim that ends with no outcome to record (its ack) may tell its end in the same
    write: the waiter for its slot is due at once; a stale token deletes nothing."""
    wf = workflow("deploy-ack", step={"concurrency": 1})
    t1, t2 = engine.submit(wf, {"n": 1}), engine.submit(wf, {"n": 2})
    now = clock.now_ms()
    [first] = engine.store.claim("w1", now, LEASE_MS, 5)
    assert first.task_id == t1 and engine.store.claim("w2", now, LEASE_MS, 5) == []
    engine.store.ack(first.command_id, first.token + 1, wake=Wake(first.gates, now, 1))  # not its claim
    assert engine.store.claim("w2", now, LEASE_MS, 5) == []  # the slot is still held
    engine.store.ack(first.command_id, first.token, wake=Wake(first.gates, now, 1))
    assert [r["command_id"] for r in engine.store.outbox() if r["task_id"] == t1] == []
    assert [c.task_id for c in engine.store.claim("w2", now, LEASE_MS, 5)] == [t2]


@pytest.mark.parametrize("how", ["run", "run_one"])
def test_the_ack_of_a_refused_outcome_tells_the_end_of_its_slot(
    engine: Engine, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """A step whose task was cancelled while it ran: its outcome is refused, and the ack that
    ends its claim wakes the waiters for its slot in the same write. The commit that refused
    the outcome ran while the claim still held the slot, so a waiter it woke may have been
    given back to wait again."""
    wf = workflow("deploy-cancelled", step={"concurrency": 1, "run": {"callable": "fleet.fl_steps:record_and_call"}})
    t1 = engine.submit(wf, {"n": 1})
    operator = People(engine).add("olga", "operator")
    told: list[tuple[str, ...] | None] = []
    real_ack = engine.store.ack

    def ack(command_id: str, token: int, *, wake: Wake | None = None) -> None:
        told.append(wake.gates if wake is not None else None)
        real_ack(command_id, token, wake=wake)

    monkeypatch.setattr(engine.store, "ack", ack)
    fl_steps.DURING.append(lambda: engine.cancel(t1, operator, "no longer needed"))
    try:
        if how == "run":
            Worker(engine, concurrency=1).run(until_idle=True)
        else:
            Worker(engine).run_one(t1)
    finally:
        fl_steps.DURING.clear()

    assert [t1] == fl_steps.RAN
    assert engine.state(t1).status.value == "cancelled"
    assert told == [("step:deploy-cancelled/work",)]
    assert engine.store.outbox() == []


def test_a_claim_whose_lease_expired_frees_its_slot_with_no_write(engine: Engine, clock: FakeClock) -> None:
    """A slot is held by the claim's lease: once a dead worker's lease has expired, the step
    waiting for the slot is admitted, though nothing told the store the claim ended."""
    wf = workflow("expiry", step={"concurrency": 1})
    t1, t2 = engine.submit(wf, {"n": 1}), engine.submit(wf, {"n": 2})
    first = engine.store.claim("w1", clock.now_ms(), LEASE_MS, 5)
    assert [c.task_id for c in first] == [t1]
    assert engine.store.claim("w2", clock.now_ms(), LEASE_MS, 5) == []
    clock.advance(LEASE_MS / 1000 + 1)  # w1 died: its lease runs out, with no write
    again = engine.store.claim("w2", clock.now_ms(), LEASE_MS, 5)
    assert [c.task_id for c in again] == [t1]  # the expired claim first (it came first), alone
    assert engine.store.claim("w3", clock.now_ms(), LEASE_MS, 5) == []
    assert "(concurrency 1, 1 in use)" in waiting_reasons(engine.store.outbox(), clock.now_ms())[t2]
    engine.store.release(again[0].command_id, again[0].token, clock.now_ms(), failed=False, started=False)
    assert [c.task_id for c in engine.store.claim("w3", clock.now_ms(), LEASE_MS, 5)] == [t1]  # released: free


def test_an_expired_lease_is_claimed_in_its_place_among_the_free_commands(engine: Engine, clock: FakeClock) -> None:
    """A claim takes free commands and expired leases in one order: priority first, then
    fair share, whichever kind each is."""
    wf = workflow("expired")
    a, b, c = (engine.submit(wf, {"n": i}) for i in range(3))
    assert [x.task_id for x in engine.store.claim("w1", clock.now_ms(), LEASE_MS, 1)] == [a]
    urgent = engine.submit(wf, {"n": 9}, priority=3)
    clock.advance(LEASE_MS / 1000 + 1)  # w1 died: its lease of a ran out
    assert [x.task_id for x in engine.store.claim("w2", clock.now_ms(), LEASE_MS, 2)] == [urgent, a]
    assert [x.task_id for x in engine.store.claim("w2", clock.now_ms(), LEASE_MS, 2)] == [b, c]


def test_a_tenant_that_was_idle_starts_level_with_the_queue_not_with_a_running_step(engine: Engine) -> None:
    """A step that runs is not queued: a tenant that comes after it starts level with the
    oldest command still queued, so it does not take the claims the running step's place
    would give it ahead of the others."""
    wf = workflow("level")
    now = engine.clock.now_ms()
    a = [engine.submit(wf, {"n": i}, tenant="a") for i in range(6)]
    running = engine.store.claim("w1", now, LEASE_MS, 1)
    assert [x.task_id for x in running] == a[:1]
    for x in engine.store.claim("w1", now, LEASE_MS, 3):
        engine.store.ack(x.command_id, x.token)
    b = [engine.submit(wf, {"n": i}, tenant="b") for i in range(2)]
    first_two = {x.task_id for x in engine.store.claim("w1", now, LEASE_MS, 2)}
    assert len(first_two & set(a)) == 1 and len(first_two & set(b)) == 1


@pytest.mark.parametrize("backend", SQL_BACKENDS)
@pytest.mark.parametrize("gated", [False, True], ids=["plain", "gated"])
def test_a_claim_reads_no_running_step_after_an_upgrade_from_version_11(
    store_url: str, open_engine: Callable[..., Engine], clock: FakeClock, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, gated: bool,
) -> None:
    """A claim reads the free commands by their order and the leases by when they expire,
    never the steps that are running nor every command queued: its work grows with
    neither, whatever PostgreSQL's statistics say. A version 11 database, whose order
    index held every command, gets the new indexes."""
    engine = open_engine(clock=clock, workspace_root=tmp_path / "ws")
    wf = workflow("many", step={"concurrency": 10_000} if gated else None)
    for i in range(10):
        engine.submit(wf, {"n": i})
    engine.close()
    for sql in ("DROP INDEX sw_outbox_free", "DROP INDEX sw_outbox_free_due", "DROP INDEX sw_outbox_leased",
                "CREATE INDEX sw_outbox_order ON sw_outbox (priority DESC, fair)",
                "CREATE INDEX sw_outbox_due ON sw_outbox (available_at_ms)"):
        raw_sql(store_url, sql)
    raw_sql(store_url, "UPDATE sw_meta SET value = ? WHERE key = ?", ("11", "schema_version"))
    engine = open_engine(clock=clock, workspace_root=tmp_path / "ws")
    store: Any = engine.store
    postgres = store_url.startswith("postgresql://")
    if postgres:  # never analyzed: its statistics say next to nothing is free, whatever is
        raw_sql(store_url, "ALTER TABLE sw_outbox SET (autovacuum_enabled = false)")
    indexes = {str(r[0]) for r in raw_sql(store_url, "SELECT indexname FROM pg_indexes WHERE schemaname ="
                                          " current_schema()" if postgres else
                                          "SELECT name FROM sqlite_master WHERE type = 'index'")}
    assert {"sw_outbox_free", "sw_outbox_free_due", "sw_outbox_leased"} <= indexes
    assert not {"sw_outbox_order", "sw_outbox_due"} & indexes

    def work_of_a_claim() -> int:
        """What the store's claim of 5 reads, replayed as it was sent and rolled back
        (``_replayed_work``)."""
        sent: list[tuple[str, Sequence[Any]]] = []
        if postgres:
            import psycopg

            real = psycopg.Cursor.execute

            def record(cur: Any, query: Any, params: Any = None, **kw: Any) -> Any:
                sent.append((str(query), params or ()))
                return real(cur, query, params, **kw)

            monkeypatch.setattr(psycopg.Cursor, "execute", record)
        else:
            monkeypatch.setattr(store, "_x", lambda cur, sql, params=(): sent.append((sql, params))
                                or type(store)._x(store, cur, sql, params))
        try:
            assert len(store.claim("w0", clock.now_ms(), LEASE_MS, 5)) == 5
        finally:
            monkeypatch.undo()
        at = next(i for i, (q, _) in enumerate(sent) if q.startswith("UPDATE sw_outbox SET lease_owner"))
        return _replayed_work(store_url, [(q, p) for q, p in sent[:at + 1] if q.startswith(("WITH free", "UPDATE"))])

    alone = work_of_a_claim()  # 5 queued
    for i in range(1_200):
        engine.submit(wf, {"n": i})
    queued = work_of_a_claim()  # 1,200 queued
    running = 0
    while running < 1_000:
        running += len(store.claim("w1", clock.now_ms(), LEASE_MS, 100))
    among_running = work_of_a_claim()  # 195 queued, 1,000 running
    # A claim that read every running step, or every due one, would read a thousand rows.
    assert max(queued, among_running) < alone * 1.5 + 20, (alone, queued, among_running)
    clock.advance(LEASE_MS / 1000 + 1)  # every lease runs out: the claim takes them again, oldest first
    again = store.claim("w2", clock.now_ms(), LEASE_MS, 3)
    assert [x.task_id for x in again] == [r["task_id"] for r in sorted(
        (r for r in store.outbox() if r["lease_owner"] == "w2"), key=lambda r: r["fair"])]
    assert len(again) == 3


def _replayed_work(url: str, statements: Sequence[tuple[str, Sequence[Any]]]) -> int:
    """How much ``statements`` read, run again in a transaction that is rolled back: the
    outbox rows PostgreSQL's scans read, or SQLite's virtual machine steps."""
    if url.startswith("postgresql://"):
        import psycopg

        from statewright.store.postgres import split_url

        conninfo, schema = split_url(url)
        with psycopg.connect(conninfo) as conn:
            conn.execute(f'SET search_path TO "{schema}"')
            for sql, params in statements:
                conn.execute(sql, tuple(params))
            # The outbox rows this transaction read: fetched by its index scans, or by whole scans.
            read = conn.execute("SELECT COALESCE(idx_tup_fetch, 0) + COALESCE(seq_tup_read, 0)"
                                " FROM pg_stat_xact_user_tables WHERE relname = 'sw_outbox'"
                                " AND schemaname = current_schema()").fetchone()
            conn.rollback()
        assert read is not None
        return int(read[0])
    import sqlite3

    conn = sqlite3.connect(url.removeprefix("sqlite:///").split("?")[0], isolation_level=None)
    steps = [0]

    def count() -> int:
        steps[0] += 1
        return 0

    try:
        for counted in (False, True):  # compiled before they are counted
            conn.execute("BEGIN")
            conn.set_progress_handler(count if counted else None, 1)
            for sql, params in statements:
                conn.execute(sql, tuple(params)).fetchall()
            conn.set_progress_handler(None, 1)
            conn.execute("ROLLBACK")
    finally:
        conn.close()
    return steps[0]


@pytest.mark.parametrize("backend", SQL_BACKENDS)
def test_an_upgrade_keeps_the_slots_held_in_a_version_7_database(
    store_url: str, open_engine: Callable[..., Engine], clock: FakeClock, tmp_path: Path
) -> None:
    """A version 7 database counted slots in rows of their own: after the upgrade, a claim
    that held one there still holds it (the next waits), and the table is gone."""
    engine = open_engine(clock=clock, workspace_root=tmp_path / "ws")
    wf = workflow("upgrade", step={"concurrency": 1})
    t1, t2 = engine.submit(wf, {"n": 1}), engine.submit(wf, {"n": 2})
    held = engine.store.claim("w1", clock.now_ms(), LEASE_MS, 1)
    assert [c.task_id for c in held] == [t1]
    engine.close()
    for sql in ("ALTER TABLE sw_outbox DROP COLUMN slot_token",
                "CREATE TABLE sw_slots (gate TEXT NOT NULL, command_id TEXT NOT NULL, token INTEGER NOT NULL,"
                " PRIMARY KEY (gate, command_id))"):
        raw_sql(store_url, sql)
    raw_sql(store_url, "INSERT INTO sw_slots (gate, command_id, token) VALUES (?, ?, ?)",
            (held[0].gates[0], held[0].command_id, held[0].token))
    raw_sql(store_url, "UPDATE sw_meta SET value = ? WHERE key = ?", ("7", "schema_version"))

    again = open_engine(clock=clock, workspace_root=tmp_path / "ws")
    assert again.store.claim("w2", clock.now_ms(), LEASE_MS, 5) == []
    assert "(concurrency 1, 1 in use)" in waiting_reasons(again.store.outbox(), clock.now_ms())[t2]
    again.store.ack(held[0].command_id, held[0].token)
    assert [c.task_id for c in again.store.claim("w2", clock.now_ms() + CONCURRENCY_RECHECK_MS, LEASE_MS, 5)] == [t2]
    tables = raw_sql(store_url, "SELECT name FROM sqlite_master WHERE type = 'table'" if not
                     store_url.startswith("postgresql://") else
                     "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")
    assert "sw_slots" not in {str(r[0]) for r in tables}


def test_a_workflow_concurrency_holds_across_its_steps(engine: Engine) -> None:
    """A workflow's concurrency counts the steps of all its tasks performed at once."""
    wf = workflow("batch", concurrency=2)
    for i in range(4):
        engine.submit(wf, {"n": i})
    now = engine.clock.now_ms()
    held = engine.store.claim("w1", now, LEASE_MS, 3)
    assert len(held) == 2 and engine.store.claim("w2", now, LEASE_MS, 3) == []
    for c in held:  # w1 gives them back: the slots free, and the waiters are woken
        engine.store.release(c.command_id, c.token, now, failed=False, started=False)
        engine.store.wake(c.gates, now)
    Worker(engine, concurrency=2).run(until_idle=True)
    assert len(fl_steps.RAN) == 4


def test_a_rate_limit_makes_the_third_start_wait_for_the_window(engine: Engine, clock: FakeClock) -> None:
    """With rate 2/min, the third step waits (unleased, never failed) until the window has room."""
    engine.store.put_fleet(FleetConfig(limits={"model-api": NamedLimit("model-api", rate=parse_rate("2/min"))}),
                           clock.now_ms())
    wf = workflow("calls", step={"limits": ["model-api"]})
    ids = [engine.submit(wf, {"n": i}) for i in range(3)]
    Worker(engine, concurrency=1).run(until_idle=True)
    assert ids[:2] == fl_steps.RAN
    why = waiting_reasons(engine.store.outbox(), clock.now_ms())[ids[2]]
    assert why.startswith("waits for limit 'model-api' (2/min starts; room again at ")
    clock.advance(61)
    Worker(engine, concurrency=1).run(until_idle=True)
    assert ids == fl_steps.RAN
    assert engine.state(ids[2]).status.value == "completed"


def test_a_spent_daily_budget_parks_the_tenant_until_raised(engine: Engine, clock: FakeClock) -> None:
    """A tenant whose tokens today reached its budget has its steps parked until the next UTC
    day, with the reason; raising the budget lets them run at once. Another tenant runs on."""
    fleet = FleetConfig(tenants={"acme": TenantShare("acme", daily_tokens=100)})
    engine.store.put_fleet(fleet, clock.now_ms())
    wf = workflow("budget")
    first = engine.submit(wf, {"n": 1}, tenant="acme")
    claim = engine.store.claim("w1", clock.now_ms(), LEASE_MS, 1)[0]
    assert claim.task_id == first and claim.gates == ("tenant:acme",)
    engine.store.record_usage(claim.command_id, "acme", claim.gates, 100, 0.0, clock.now_ms())
    engine.store.ack(claim.command_id, claim.token)
    parked = engine.submit(wf, {"n": 2}, tenant="acme")
    other = engine.submit(wf, {"n": 3}, tenant="zeta")
    assert [c.task_id for c in engine.store.claim("w1", clock.now_ms(), LEASE_MS, 5)] == [other]
    row = next(r for r in engine.store.outbox() if r["task_id"] == parked)
    day = clock.now_ms() // DAY_MS
    assert row["available_at_ms"] == (day + 1) * DAY_MS
    assert "tenant 'acme' spent its daily token budget (100 of 100)" in row["waiting"]
    engine.store.put_fleet(FleetConfig(tenants={"acme": TenantShare("acme", daily_tokens=1000)}), clock.now_ms())
    assert [c.task_id for c in engine.store.claim("w1", clock.now_ms(), LEASE_MS, 5)] == [parked]
    assert engine.store.usage("acme", day) == (100, 0.0)


def test_the_tenant_is_read_from_the_input_the_workflow_names(engine: Engine) -> None:
    """``tenant: input.customer`` takes a task's tenant from its input; a bad one is refused."""
    wf = workflow("by-input", tenant="input.customer")
    assert engine.state(engine.submit(wf, {"customer": "acme"})).tenant == "acme"
    with pytest.raises(InputError, match=r"reads the tenant from input\.customer: input has no field 'customer'"):
        engine.submit(wf, {})


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"priority": 5000}, "priority must be a whole number from -1000 to 1000 (higher runs first); got 5000"),
    ({"tenant": "bad tenant!"}, "a tenant must be 1-64 letters"),
])
def test_bad_priority_or_tenant_is_refused_and_nothing_is_stored(engine: Engine, kwargs: Any, message: str) -> None:
    """An out-of-range priority or a malformed tenant is one clear error; no task is made."""
    with pytest.raises(InputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        engine.submit(workflow("bad"), {}, **kwargs)
    assert engine.store.list_tasks() == []


def test_a_step_drawing_on_an_unknown_limit_is_refused_at_submit(engine: Engine) -> None:
    """A step naming a limit the fleet config does not have is refused with the fix to make."""
    with pytest.raises(InputError, match="step 'work' draws on limit 'nope', which the fleet config"):
        engine.submit(workflow("unknown", step={"limits": ["nope"]}), {})
    assert engine.store.list_tasks() == []


def test_the_cli_applies_a_fleet_file_and_lists_why_a_task_waits(store_url: str, tmp_path: Path) -> None:
    """limits apply/show, submit --priority/--tenant, and tasks showing why a step waits."""
    runner = CliRunner()
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text("limits:\n  deploys: {concurrency: 1}\ntenants:\n  acme: {weight: 2, daily_usd: 5}\n")
    ok = runner.invoke(cli, ["limits", "apply", str(fleet), "--db", store_url])
    assert ok.exit_code == 0 and "1 limits, 1 tenants applied" in ok.output
    shown = runner.invoke(cli, ["limits", "show", "--db", store_url])
    assert "limit  deploys: concurrency 1" in shown.output and "tenant acme: weight 2, daily_usd 5" in shown.output
    wf = tmp_path / "wf.yaml"
    wf.write_text("workflow: ship\nsteps:\n  - {id: go, kind: code, owner: ops, limits: [deploys],"
                  " run: {callable: 'fleet.fl_steps:record'}}\n")
    ids = [runner.invoke(cli, ["submit", str(wf), "--db", store_url, "--tenant", "acme", "--priority", "3"]
                         ).output.strip() for _ in range(2)]
    engine = Engine.open(store_url)
    try:
        assert len(engine.store.claim("w1", engine.clock.now_ms(), LEASE_MS, 2)) == 1
    finally:
        engine.close()
    listed = runner.invoke(cli, ["tasks", "--db", store_url, "--json"])
    rows = {r["task_id"]: r for r in __import__("json").loads(listed.output)}
    assert rows[ids[1]]["waiting"].startswith("waits for a slot of limit 'deploys' (concurrency 1, 1 in use)")
    assert rows[ids[1]]["priority"] == 3 and rows[ids[1]]["tenant"] == "acme"


@pytest.mark.parametrize(("text", "line"), [
    ("limits:\n  m: {rate: 60 per minute}\n", "limit 'm': rate: a rate must be a whole number, '/', and s, min"),
    ("tenants:\n  a: {weight: 0}\n", "tenant 'a': weight must be a whole number from 1 to 1000; got 0"),
    ("limits:\n  m: {burst: 3}\n", "limit 'm': unknown field 'burst'; allowed: concurrency, rate, tokens"),
])
def test_a_bad_fleet_file_is_one_clear_line_and_changes_nothing(store_url: str, tmp_path: Path, text: str,
                                                                line: str) -> None:
    """Bad rate syntax, a bad weight, an unknown field: one error line naming it; the config stays."""
    runner = CliRunner()
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(text)
    res = runner.invoke(cli, ["limits", "apply", str(fleet), "--db", store_url])
    assert res.exit_code == 1 and "Traceback" not in res.output
    assert line in res.output and len(res.output.strip().splitlines()) == 1
    assert "no limits or tenants configured" in runner.invoke(cli, ["limits", "show", "--db", store_url]).output


def test_bad_priority_on_the_command_line_is_one_line(store_url: str, tmp_path: Path) -> None:
    """submit --priority out of range: one error line, no task."""
    wf = tmp_path / "wf.yaml"
    wf.write_text("workflow: w\nsteps:\n  - {id: go, kind: code, owner: ops,"
                  " run: {callable: 'fleet.fl_steps:record'}}\n")
    res = CliRunner().invoke(cli, ["submit", str(wf), "--db", store_url, "--priority", "-2000"])
    assert res.exit_code == 1
    assert res.output.strip() == ("error: priority must be a whole number from -1000 to 1000 (higher runs first); "
                                  "got -2000")


def _rate_rows(url: str) -> list[tuple[str, str]]:
    """The rate log's starts (not the row that marks up to when rows may be forgotten)."""
    return sorted((str(g), str(c)) for g, c in raw_sql(url, "SELECT gate, command_id FROM sw_rate_log"
                                                            " WHERE command_id <> ''"))


@pytest.mark.parametrize("backend", SQL_BACKENDS)
def test_what_waits_leaves_no_slot_and_no_rate_log_row(
    store_url: str, open_engine: Callable[..., Engine], clock: FakeClock, tmp_path: Path
) -> None:
    """Commands claimed together beyond a limit's concurrency are given back waiting: they
    hold no slot, their deliveries do not count, and the rate log counts only what started."""
    engine = open_engine(clock=clock, workspace_root=tmp_path / "ws")
    engine.store.put_fleet(FleetConfig(limits={"api": NamedLimit("api", concurrency=1, rate=parse_rate("10/min"))}),
                           clock.now_ms())
    wf = workflow("ahead", step={"limits": ["api"]})
    ids = [engine.submit(wf, {"n": i}) for i in range(3)]
    first = engine.store.claim("w1", clock.now_ms(), LEASE_MS, 1)
    assert [c.task_id for c in first] == ids[:1]
    assert engine.store.claim("w2", clock.now_ms(), LEASE_MS, 5) == []
    assert _rate_rows(store_url) == [("limit:api", first[0].command_id)]
    rows = {r["task_id"]: r for r in engine.store.outbox()}
    for t in ids[1:]:
        assert rows[t]["lease_owner"] is None and rows[t]["deliveries"] == 0
        assert "waits for a slot of limit 'api' (concurrency 1, 1 in use)" in str(rows[t]["waiting"])
    assert raw_sql(store_url, "SELECT COUNT(*) FROM sw_outbox WHERE slot_token IS NOT NULL")[0][0] == 1
    engine.store.ack(first[0].command_id, first[0].token)
    engine.store.wake(first[0].gates, clock.now_ms())
    second = engine.store.claim("w2", clock.now_ms(), LEASE_MS, 5)
    assert [c.task_id for c in second] == ids[1:2]
    assert _rate_rows(store_url) == sorted([("limit:api", first[0].command_id), ("limit:api", second[0].command_id)])


@pytest.mark.parametrize("backend", SQL_BACKENDS)
def test_a_rate_added_while_claims_run_counts_the_next_start(
    store_url: str, open_engine: Callable[..., Engine], clock: FakeClock, tmp_path: Path
) -> None:
    """A named limit that gains a rate between two claims counts the next start in its rate
    log, with the start it was claimed with counted once."""
    engine = open_engine(clock=clock, workspace_root=tmp_path / "ws")
    limits = {"api": NamedLimit("api", rate=parse_rate("10/min")), "db": NamedLimit("db", concurrency=5)}
    engine.store.put_fleet(FleetConfig(limits=limits), clock.now_ms())
    wf = workflow("added", step={"limits": ["api", "db"]})
    ids = [engine.submit(wf, {"n": i}) for i in range(2)]
    first = engine.store.claim("w1", clock.now_ms(), LEASE_MS, 1)
    assert [c.task_id for c in first] == ids[:1]
    engine.store.put_fleet(FleetConfig(limits={**limits, "db": NamedLimit("db", concurrency=5,
                                                                           rate=parse_rate("10/min"))}),
                           clock.now_ms())
    second = engine.store.claim("w1", clock.now_ms(), LEASE_MS, 1) or engine.store.claim(
        "w1", clock.now_ms(), LEASE_MS, 1)
    assert [c.task_id for c in second] == ids[1:]
    assert second[0].deliveries == 1
    assert _rate_rows(store_url) == sorted([("limit:api", first[0].command_id), ("limit:api", second[0].command_id),
                                            ("limit:db", second[0].command_id)])


def test_a_lowered_rate_counts_only_the_starts_in_its_window(engine: Engine, clock: FakeClock) -> None:
    """Starts that left the window no longer count, though the rate log still holds them,
    and a rate lowered since the last claim is counted afresh: two of five start at once."""
    api = NamedLimit("api", rate=parse_rate("100/min"))
    engine.store.put_fleet(FleetConfig(limits={"api": api}), clock.now_ms())
    wf = workflow("lowered", step={"limits": ["api"]})
    ids = [engine.submit(wf, {"n": i}) for i in range(8)]
    for _ in range(3):
        (c,) = engine.store.claim("w1", clock.now_ms(), LEASE_MS, 1)
        engine.store.ack(c.command_id, c.token)
    clock.advance(61)  # the three starts left the window; the rate log keeps them for a while
    engine.store.put_fleet(FleetConfig(limits={"api": NamedLimit("api", rate=parse_rate("2/min"))}), clock.now_ms())
    started = engine.store.claim("w1", clock.now_ms(), LEASE_MS, 5)
    assert [c.task_id for c in started] == ids[3:5]
    assert engine.store.claim("w1", clock.now_ms(), LEASE_MS, 5) == []
    assert "waits for limit 'api' (2/min starts" in waiting_reasons(engine.store.outbox(), clock.now_ms())[ids[5]]


def test_a_claim_whose_clock_is_behind_what_was_forgotten_waits(engine: Engine, clock: FakeClock) -> None:
    """Old starts are forgotten after two windows. A claim whose clock is so far behind that
    its window reaches back there cannot count them, so it waits rather than start a second
    step inside a window that already held one."""
    engine.store.put_fleet(FleetConfig(limits={"api": NamedLimit("api", rate=parse_rate("1/s"))}), clock.now_ms())
    wf = workflow("behind", step={"limits": ["api"]})
    ids = [engine.submit(wf, {"n": i}) for i in range(3)]
    t0 = clock.now_ms()
    (first,) = engine.store.claim("w1", t0, LEASE_MS, 1)
    engine.store.ack(first.command_id, first.token)
    (second,) = engine.store.claim("w1", t0 + 11_000, LEASE_MS, 1)  # forgets the start at t0
    engine.store.ack(second.command_id, second.token)
    assert [first.task_id, second.task_id] == ids[:2]
    assert engine.store.claim("w2", t0 + 500, LEASE_MS, 1) == []  # a clock 10.5 s behind
    assert "waits for limit 'api' (1/s starts" in waiting_reasons(engine.store.outbox(), t0 + 500)[ids[2]]
    assert [c.task_id for c in engine.store.claim("w1", t0 + 12_500, LEASE_MS, 1)] == ids[2:]


@pytest.mark.parametrize("backend", SQL_BACKENDS)
def test_an_admission_writes_one_rate_log_row_for_its_starts_and_one_per_start_under_a_token_rate(
    store_url: str, open_engine: Callable[..., Engine], clock: FakeClock, tmp_path: Path
) -> None:
    """Commands admitted together under a limit with a start rate alone share one rate log
    row, named by the first, which counts them all: the rate holds as it did with a row
    each. Under a token rate each start keeps a row of its own, for the tokens it reports."""
    engine = open_engine(clock=clock, workspace_root=tmp_path / "ws")
    limits = {"api": NamedLimit("api", rate=parse_rate("5/min")),
              "llm": NamedLimit("llm", rate=parse_rate("50/min"), tokens=parse_rate("1000/min"))}
    engine.store.put_fleet(FleetConfig(limits=limits), clock.now_ms())
    wf = workflow("together", step={"limits": ["api", "llm"]})
    for i in range(8):
        engine.submit(wf, {"n": i})
    started = engine.store.claim("w1", clock.now_ms(), LEASE_MS, 8)
    assert len(started) == 5
    rows = raw_sql(store_url, "SELECT gate, command_id, starts, metered FROM sw_rate_log WHERE command_id <> ''"
                              " ORDER BY gate, command_id")
    assert [(str(g), str(c), int(n), int(m)) for g, c, n, m in rows] == [
        ("limit:api", started[0].command_id, 5, 0),
        *sorted(("limit:llm", c.command_id, 1, 1) for c in started),
    ]
    assert engine.store.claim("w1", clock.now_ms(), LEASE_MS, 8) == []
    for c in started:
        engine.store.ack(c.command_id, c.token)
    clock.advance(61)
    assert len(engine.store.claim("w1", clock.now_ms(), LEASE_MS, 8)) == 3


def test_tokens_count_for_every_start_admitted_together_once_a_token_rate_is_added(
    engine: Engine, clock: FakeClock
) -> None:
    """Starts admitted together under a start rate alone, whose limit then gains a token
    rate, count the tokens each of them reports, not only the first's."""
    engine.store.put_fleet(FleetConfig(limits={"api": NamedLimit("api", rate=parse_rate("10/min"))}), clock.now_ms())
    wf = workflow("metered", step={"limits": ["api"]})
    ids = [engine.submit(wf, {"n": i}) for i in range(4)]
    started = engine.store.claim("w1", clock.now_ms(), LEASE_MS, 3)
    assert [c.task_id for c in started] == ids[:3]
    engine.store.put_fleet(FleetConfig(limits={"api": NamedLimit("api", rate=parse_rate("10/min"),
                                                                 tokens=parse_rate("100/min"))}), clock.now_ms())
    for c in started:
        engine.store.record_usage(c.command_id, "", c.gates, 40, 0.0, clock.now_ms())
        engine.store.ack(c.command_id, c.token)
    assert engine.store.claim("w1", clock.now_ms(), LEASE_MS, 1) == []  # 120 tokens of 100 in the window
    assert "waits for limit 'api' (100/min tokens" in waiting_reasons(engine.store.outbox(), clock.now_ms())[ids[3]]


@pytest.mark.parametrize("backend", SQL_BACKENDS)
def test_an_upgrade_from_version_12_counts_each_start_once_and_no_mark(
    store_url: str, open_engine: Callable[..., Engine], clock: FakeClock, tmp_path: Path
) -> None:
    """A version 12 rate log has a row per start and marks of what was forgotten, and its
    bound counted rows. After the upgrade each row counts one start, a mark none, and the
    bound is counted afresh: a rate left room for one start has room for one."""
    engine = open_engine(clock=clock, workspace_root=tmp_path / "ws")
    engine.store.put_fleet(FleetConfig(limits={"api": NamedLimit("api", rate=parse_rate("4/min"))}), clock.now_ms())
    wf = workflow("upgraded", step={"limits": ["api"]})
    ids = [engine.submit(wf, {"n": i}) for i in range(6)]
    for _ in range(3):
        (c,) = engine.store.claim("w1", clock.now_ms(), LEASE_MS, 1)
        engine.store.ack(c.command_id, c.token)
    engine.close()
    raw_sql(store_url, "ALTER TABLE sw_rate_log DROP COLUMN starts")
    raw_sql(store_url, "UPDATE sw_rate_log_rows SET at_most = 4")  # version 12 counted the mark's row too
    raw_sql(store_url, "UPDATE sw_meta SET value = ? WHERE key = ?", ("12", "schema_version"))
    again = open_engine(clock=clock, workspace_root=tmp_path / "ws")
    rows = raw_sql(store_url, "SELECT command_id, starts FROM sw_rate_log ORDER BY command_id")
    assert [(str(c) == "", int(n)) for c, n in rows] == [(True, 0), (False, 1), (False, 1), (False, 1)]
    assert int(raw_sql(store_url, "SELECT at_most FROM sw_rate_log_rows")[0][0]) == 3
    assert [c.task_id for c in again.store.claim("w1", clock.now_ms(), LEASE_MS, 3)] == ids[3:4]


@pytest.mark.parametrize("backend", SQL_BACKENDS)
def test_the_rate_logs_start_bound_follows_its_starts_and_survives_an_upgrade(
    store_url: str, open_engine: Callable[..., Engine], clock: FakeClock, tmp_path: Path
) -> None:
    """The most starts the rate log holds, which stands for a window's count while a rate
    has room, follows every start written and every row forgotten. An admission writes one
    row for all its starts under a limit with no token rate. A version 9 database, which
    had no such number, gets its starts counted on upgrade."""
    def bound_starts_rows() -> tuple[int, int, int]:
        return (int(raw_sql(store_url, "SELECT at_most FROM sw_rate_log_rows")[0][0]),
                int(raw_sql(store_url, "SELECT SUM(starts) FROM sw_rate_log")[0][0]),
                int(raw_sql(store_url, "SELECT COUNT(*) FROM sw_rate_log")[0][0]))

    engine = open_engine(clock=clock, workspace_root=tmp_path / "ws")
    # 30/s leaves too little room for a grant (store/grants.py), which would add its starts.
    engine.store.put_fleet(FleetConfig(limits={"api": NamedLimit("api", rate=parse_rate("30/s"))}), clock.now_ms())
    wf = workflow("bounded", step={"limits": ["api"]})
    for i in range(9):
        engine.submit(wf, {"n": i})

    def start(n: int) -> None:
        for c in engine.store.claim("w1", clock.now_ms(), LEASE_MS, n):
            engine.store.ack(c.command_id, c.token)

    start(3)
    assert bound_starts_rows() == (3, 3, 2)  # three starts in one row; the mark of what was forgotten (nothing)
    clock.advance(11)  # past two windows and the time between two forgettings
    start(2)
    assert bound_starts_rows() == (2, 2, 2)  # all three forgotten, two started, a new mark
    engine.close()
    raw_sql(store_url, "DROP TABLE sw_rate_log_rows")
    raw_sql(store_url, "UPDATE sw_meta SET value = ? WHERE key = ?", ("9", "schema_version"))
    again = open_engine(clock=clock, workspace_root=tmp_path / "ws")
    assert bound_starts_rows() == (2, 2, 2)
    for c in again.store.claim("w1", clock.now_ms(), LEASE_MS, 4):
        again.store.ack(c.command_id, c.token)
    assert bound_starts_rows() == (6, 6, 3)  # the mark replaced, four started in a row of their own


@pytest.mark.parametrize("backend", SQL_BACKENDS)
def test_a_slots_bound_follows_its_admissions_and_is_counted_where_it_leaves_no_room(
    store_url: str, open_engine: Callable[..., Engine], clock: FakeClock, tmp_path: Path
) -> None:
    """Each admission adds what it takes to its gates' bounds, and a finished step takes
    nothing away: where a bound leaves no room, the live slots are counted and the bound
    comes down to them, so a bound above them never makes a step wait. A version 10
    database, which kept no bounds, counts its gates' slots at its first admission."""
    gate = "step:bounded/work"

    def bound() -> int:
        return int(raw_sql(store_url, "SELECT at_most FROM sw_slot_bounds WHERE gate = ?", (gate,))[0][0])

    def start(engine: Engine, n: int, *, ack: bool = True) -> list[str]:
        claims = engine.store.claim("w1", clock.now_ms(), LEASE_MS, n)
        for c in claims if ack else ():
            engine.store.ack(c.command_id, c.token)
        return [c.task_id for c in claims]

    engine = open_engine(clock=clock, workspace_root=tmp_path / "ws")
    wf = workflow("bounded", step={"concurrency": 3})
    ids = [engine.submit(wf, {"n": i}) for i in range(9)]
    assert start(engine, 2) == ids[:2]
    assert bound() == 2  # counted (none live), then two taken; their acks change nothing
    assert start(engine, 1) == ids[2:3]
    assert bound() == 3  # no room left under it, though no step holds a slot
    assert start(engine, 2, ack=False) == ids[3:5]  # counted: none live, both fit
    assert bound() == 2
    engine.close()
    raw_sql(store_url, "DROP TABLE sw_slot_bounds")
    raw_sql(store_url, "UPDATE sw_meta SET value = ? WHERE key = ?", ("10", "schema_version"))
    again = open_engine(clock=clock, workspace_root=tmp_path / "ws")
    assert start(again, 3, ack=False) == ids[5:6]  # counted: two live, one fits
    assert bound() == 3
    assert "(concurrency 3, 3 in use)" in waiting_reasons(again.store.outbox(), clock.now_ms())[ids[6]]


@pytest.mark.parametrize("backend", SQL_BACKENDS)
def test_an_admission_with_room_under_its_bounds_reads_no_slots_until_its_next_count(
    store_url: str, open_engine: Callable[..., Engine], clock: FakeClock, tmp_path: Path
) -> None:
    """While a gate's bound leaves room, an admission decides on it alone, so its cost does
    not grow with the steps that hold slots; every ten seconds it counts them anyway. The
    bound is lowered here by hand, below the live slots (which no admission does), to show
    both: a step is admitted past the concurrency, until the next count sees every slot."""
    gate = "step:room/work"
    engine = open_engine(clock=clock, workspace_root=tmp_path / "ws")
    wf = workflow("room", step={"concurrency": 2})
    ids = [engine.submit(wf, {"n": i}) for i in range(5)]
    assert [c.task_id for c in engine.store.claim("w1", clock.now_ms(), LEASE_MS, 2)] == ids[:2]
    raw_sql(store_url, "UPDATE sw_slot_bounds SET at_most = 0 WHERE gate = ?", (gate,))
    assert [c.task_id for c in engine.store.claim("w1", clock.now_ms(), LEASE_MS, 1)] == ids[2:3]
    clock.advance(10)
    assert engine.store.claim("w1", clock.now_ms(), LEASE_MS, 1) == []
    assert "(concurrency 2, 3 in use)" in waiting_reasons(engine.store.outbox(), clock.now_ms())[ids[3]]
    assert raw_sql(store_url, "SELECT at_most FROM sw_slot_bounds WHERE gate = ?", (gate,)) == [(3,)]


@pytest.mark.parametrize("backend", SQL_BACKENDS)
def test_a_limit_given_a_concurrency_again_counts_the_steps_it_had_no_bound_for(
    store_url: str, open_engine: Callable[..., Engine], clock: FakeClock, tmp_path: Path
) -> None:
    """Steps started while a limit had no concurrency added nothing to its bound; once the
    fleet config gives it one again, they are counted, not taken for free slots."""
    engine = open_engine(clock=clock, workspace_root=tmp_path / "ws")

    def put(concurrency: int | None) -> None:
        engine.store.put_fleet(FleetConfig(limits={"api": NamedLimit("api", concurrency=concurrency)}), clock.now_ms())

    def claim(n: int) -> list[str]:
        return [c.task_id for c in engine.store.claim("w1", clock.now_ms(), LEASE_MS, n)]

    put(5)
    wf = workflow("again", step={"concurrency": 10, "limits": ["api"]})
    ids = [engine.submit(wf, {"n": i}) for i in range(6)]
    (first,) = engine.store.claim("w1", clock.now_ms(), LEASE_MS, 1)
    engine.store.ack(first.command_id, first.token)
    put(None)
    assert claim(3) == ids[1:4]  # they hold slots (of the step) while the limit has no concurrency
    put(3)
    assert claim(1) == []
    assert "waits for a slot of limit 'api' (concurrency 3, 3 in use)" in waiting_reasons(
        engine.store.outbox(), clock.now_ms())[ids[4]]
