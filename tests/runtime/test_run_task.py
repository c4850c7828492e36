"""``statewright.run_task`` works one task in the calling thread: only that task's commands and timers,
one commit per step, and no read between two steps of the task it holds."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from people.support import People
from statewright.machine.state import TaskState, TaskStatus
from statewright.runtime.clock import FakeClock
from statewright.runtime.engine import Engine
from statewright.runtime.run import approve_and_run, run_task, start_task
from statewright.runtime.worker import Worker

from .support import STEPS, code, workflow

EIGHT = workflow("eight-steps", *(code(f"s{i}", "record") for i in range(1, 9)))
GATED = workflow(
    "gated", code("build", "record"),
    {"id": "approve", "kind": "human", "owner": "leads", "approvers": {"role": "maintainer"}},
    code("ship", "record"),
)
WAIT_THEN_SHIP = workflow(
    "wait-then-ship",
    {"id": "wait-ci", "kind": "wait", "owner": "ops", "check": {"callable": f"{STEPS}:flag_exists"},
     "every": "5m", "max_checks": 3},
    code("ship", "record"),
)


@contextmanager
def traced(engine: Engine) -> Iterator[list[str]]:
    """Every statement the engine's SQLite connection runs, as SQLite traces it."""
    conn = engine.store._conn  # type: ignore[attr-defined]
    assert isinstance(conn, sqlite3.Connection)
    seen: list[str] = []
    conn.set_trace_callback(lambda sql: seen.append(" ".join(sql.split())))
    try:
        yield seen
    finally:
        conn.set_trace_callback(None)


def transactions(statements: list[str]) -> list[list[str]]:
    """The statements grouped into transactions (a statement outside one is its own)."""
    out: list[list[str]] = []
    current: list[str] | None = None
    for sql in statements:
        head = sql.split(None, 1)[0].upper()
        if head == "BEGIN":
            current = []
        elif head in ("COMMIT", "ROLLBACK") and current is not None:
            out.append(current)
            current = None
        elif current is not None:
            current.append(sql)
        else:
            out.append([sql])
    return out


def test_run_task_works_only_its_own_task(open_engine: Callable[..., Engine], workspace: Path) -> None:
    engine = open_engine()
    other = engine.submit(EIGHT, {"workspace": str(workspace / "other")})
    mine = engine.submit(EIGHT, {"workspace": str(workspace / "mine")})

    view = run_task(engine, mine)

    assert type(view) is TaskState and view == engine.state(mine)  # one handle type: engine.state's
    assert view.status is TaskStatus.COMPLETED
    assert engine.state(other).status is TaskStatus.RUNNING  # its first step not yet started
    assert [c["lease_owner"] for c in engine.store.outbox(other)] == [None]
    assert not (workspace / "other").exists()


@pytest.mark.parametrize("backend", ["sqlite"])  # counted from SQLite's own trace of statements
def test_between_two_steps_of_a_task_alone_there_is_one_commit_and_no_read(
    open_engine: Callable[..., Engine], workspace: Path,
) -> None:
    engine = open_engine()
    tid = engine.submit(EIGHT, {"workspace": str(workspace)})

    with traced(engine) as seen:
        assert run_task(engine, tid).status is TaskStatus.COMPLETED

    txs = transactions(seen)
    writes = [tx for tx in txs if any(s.split(None, 1)[0] in ("INSERT", "UPDATE", "DELETE") for s in tx)]
    # the claim of the first step, then one commit per step (each claiming the next step)
    assert len(writes) == 1 + 8
    assert [s.split(None, 2)[:2] for s in writes[0]] == [["WITH", "free"], ["UPDATE", "sw_outbox"]]  # the claim
    step_commits = [tx for tx in txs if any(s.startswith("INSERT INTO sw_events") for s in tx)]
    assert len(step_commits) == 8
    first = txs.index(step_commits[0])
    between = txs[first + 1:]
    assert all(any(s.startswith("INSERT INTO sw_events") for s in tx) for tx in between), between
    assert (workspace / "s8.calls").exists()


def test_run_task_sleeps_through_a_wait_step_on_the_clock_it_was_given(
    open_engine: Callable[..., Engine], clock: FakeClock, workspace: Path,
) -> None:
    engine = open_engine(clock=clock)
    tid = engine.submit(WAIT_THEN_SHIP, {"workspace": str(workspace)})
    started = clock.now_ms()

    view = run_task(engine, tid)

    assert view.status is TaskStatus.HALTED  # the flag never appeared: three checks, five minutes apart
    assert len((workspace / "wait-ci.calls").read_text().split()) == 3
    assert clock.now_ms() - started >= 2 * 300_000
    assert engine.store.timers(tid) == []


def test_run_task_takes_up_a_wait_step_whose_condition_holds(
    open_engine: Callable[..., Engine], clock: FakeClock, workspace: Path,
) -> None:
    engine = open_engine(clock=clock)
    (workspace / "flag").write_text("", encoding="utf-8")
    tid = engine.submit(WAIT_THEN_SHIP, {"workspace": str(workspace)})

    assert run_task(engine, tid).status is TaskStatus.COMPLETED
    assert (workspace / "ship.calls").exists()


@pytest.mark.parametrize("backend", ["sqlite"])  # counted from SQLite's own trace of statements
def test_start_task_and_approve_and_run_need_one_commit_per_step_plus_submit_and_approval(
    open_engine: Callable[..., Engine], workspace: Path,
) -> None:
    """The submit's commit claims the first step, the approval's the step after it: a task
    alone costs one write commit per step, one for the submit and one for the approval."""
    engine = open_engine()
    alice = People(engine).add("alice", "maintainer")
    engine.register(GATED)  # a workflow's first task stores its definition once

    with traced(engine) as seen:
        parked = start_task(engine, GATED, {"workspace": str(workspace)})
        assert parked.status is TaskStatus.AWAITING_APPROVAL and parked.current is not None
        done = approve_and_run(engine, parked.task_id, alice, proposal_hash=parked.current.proposal_hash)

    assert done.status is TaskStatus.COMPLETED
    writes = [tx for tx in transactions(seen)
              if any(s.split(None, 1)[0] in ("INSERT", "UPDATE", "DELETE") for s in tx)]
    events = [tx for tx in writes if any(s.startswith("INSERT INTO sw_events") for s in tx)]
    assert len(events) == len(writes) == 1 + 2 + 1  # submit, build, ship; the approval
    assert not any(tx[0].startswith("UPDATE sw_outbox SET lease_owner") for tx in writes)
    assert (workspace / "ship.calls").exists()


def test_a_step_held_for_a_worker_that_never_runs_it_is_claimed_when_the_lease_runs_out(
    open_engine: Callable[..., Engine], clock: FakeClock, workspace: Path,
) -> None:
    """A process that submits with ``hold_for`` and dies before running the step loses
    nothing: the step is held only for its lease, then any worker takes it."""
    engine = open_engine(clock=clock)
    gone = Worker(engine, worker_id="gone", lease_seconds=30)
    tid = engine.submit(EIGHT, {"workspace": str(workspace)}, hold_for=gone)
    [held] = engine.store.outbox(tid)
    assert held["lease_owner"] == "gone"

    assert engine.store.claim("other", clock.now_ms(), 30_000, task_id=tid) == []
    clock.advance(30_001)
    assert run_task(engine, tid).status is TaskStatus.COMPLETED
    assert (workspace / "s1.calls").read_text().split() != []


def test_a_running_worker_given_a_held_step_runs_it(
    open_engine: Callable[..., Engine], workspace: Path,
) -> None:
    """A step held for a worker before its ``run`` starts is worked by that run."""
    engine = open_engine()
    worker = Worker(engine)
    tid = engine.submit(EIGHT, {"workspace": str(workspace)}, hold_for=worker)

    worker.run(until_idle=True)

    assert engine.state(tid).status is TaskStatus.COMPLETED


def test_a_long_running_worker_runs_what_it_is_handed_and_says_when_it_settled(
    open_engine: Callable[..., Engine], workspace: Path,
) -> None:
    """A worker running in another thread: ``wait_for`` returns the state its commit left
    at the human step, and again at the end, with no claim of its own between."""
    engine = open_engine()
    alice = People(engine).add("alice", "maintainer")
    worker = Worker(engine)
    stop = threading.Event()
    thread = threading.Thread(target=lambda: worker.run(until=stop.is_set), daemon=True)
    thread.start()
    try:
        tid = engine.submit(GATED, {"workspace": str(workspace)}, hold_for=worker)
        parked = worker.wait_for(tid, timeout=30)
        assert parked.status is TaskStatus.AWAITING_APPROVAL and parked.current is not None
        engine.approve(tid, alice, proposal_hash=parked.current.proposal_hash, hold_for=worker)
        done = worker.wait_for(tid, timeout=30)
    finally:
        stop.set()
        thread.join(timeout=30)
    assert done.status is TaskStatus.COMPLETED
    assert engine.state(tid).version == done.version
    assert (workspace / "ship.calls").exists()


def test_calls_of_one_thread_share_a_worker_and_a_step_that_runs_a_task_gets_its_own(
    open_engine: Callable[..., Engine], workspace: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    import statewright.runtime.run as run_module
    from runtime import rt_steps

    made: list[Worker] = []

    class Counted(Worker):
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, **kwargs)  # type: ignore[arg-type]
            made.append(self)

    monkeypatch.setattr(run_module, "Worker", Counted)
    engine = open_engine()
    first = start_task(engine, EIGHT, {"workspace": str(workspace / "a")})
    second = start_task(engine, EIGHT, {"workspace": str(workspace / "b")})
    assert first.status is second.status is TaskStatus.COMPLETED
    assert len(made) == 1  # the second call took up the worker the first left

    inner = engine.submit(EIGHT, {"workspace": str(workspace / "inner")})
    monkeypatch.setitem(rt_steps.INNER, "engine", engine)
    monkeypatch.setitem(rt_steps.INNER, "task_id", inner)
    outer = workflow("outer", code("first", "record"), code("nested", "run_inner"), code("last", "record"))
    view = start_task(engine, outer, {"workspace": str(workspace / "outer")})

    assert view.status is TaskStatus.COMPLETED, view.status
    assert engine.state(inner).status is TaskStatus.COMPLETED
    assert len(made) == 2  # the nested call could not share the worker in use: it made one
    assert engine.store.outbox(inner) == [] and engine.store.outbox(view.task_id) == []


@pytest.mark.parametrize("backend", ["sqlite"])  # counted from SQLite's own trace of statements
def test_a_step_that_leaves_the_status_as_it_was_does_not_write_it(
    open_engine: Callable[..., Engine], workspace: Path,
) -> None:
    """SQLite rewrites an index entry for every UPDATE that names its column: the task's
    status is written only by the commit that changes it."""
    engine = open_engine()
    tid = engine.submit(EIGHT, {"workspace": str(workspace)})

    with traced(engine) as seen:
        assert run_task(engine, tid).status is TaskStatus.COMPLETED

    updates = [s for s in seen if s.startswith("UPDATE sw_tasks SET")]
    assert len(updates) == 8
    assert [s for s in updates if s.startswith("UPDATE sw_tasks SET status")] == updates[-1:]  # running -> completed
    assert "'completed'" in updates[-1]
    assert engine.store.load(tid).status == "completed"  # type: ignore[union-attr]


class NotingClock:
    """Wall time, whose sleep says when a worker has gone idle."""

    def __init__(self) -> None:
        self.asleep = threading.Event()

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def sleep(self, seconds: float, wake: threading.Event | None = None) -> None:
        self.asleep.set()
        if wake is not None:
            wake.wait(seconds)


def test_an_idle_worker_starts_a_step_handed_to_it_at_once(
    open_engine: Callable[..., Engine], workspace: Path,
) -> None:
    """A worker waiting for work (here for up to an hour) is woken by a submit that holds
    a step for it: the step starts then, not when the idle wait ends, and the stop ends the
    wait too."""
    clock = NotingClock()
    engine = open_engine(clock=clock)
    worker = Worker(engine, idle_poll_seconds=3600)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        assert clock.asleep.wait(timeout=30)
        tid = engine.submit(EIGHT, {"workspace": str(workspace)}, hold_for=worker)
        done = worker.wait_for(tid, timeout=30)
    finally:
        worker.stopping.set()
        thread.join(timeout=30)
    assert done.status is TaskStatus.COMPLETED
    assert not thread.is_alive()
