"""Group commit: a worker writes the outcomes that are ready together in one transaction,
each still claiming its own task's next command; a refusal in a batch costs the others
nothing; ``batch=1`` gives every outcome a commit of its own."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from people.support import People
from statewright._errors import IllegalEventError, StaleLeaseError
from statewright.machine.events import AttemptReported
from statewright.machine.state import TaskStatus
from statewright.runtime import worker as worker_module
from statewright.runtime.clock import FakeClock
from statewright.runtime.engine import Applied, Engine, Report
from statewright.runtime.worker import READY_HOLD_SECONDS, Worker
from statewright.store import AppendRequest, AppendResult
from statewright.store.base import Wake

from .support import code, lines, workflow

THREE_STEPS = workflow("three-steps", code("a", "record"), code("b", "record"), code("c", "record"))


@pytest.fixture
def engine(open_engine: Callable[..., Engine], clock: FakeClock) -> Engine:
    return open_engine(clock=clock)


def spy_batches(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Record the size of every append_batch the store is given."""
    sizes: list[int] = []
    real = engine.store.append_batch

    def append_batch(requests: Sequence[AppendRequest], *, wake: Wake | None = None) -> list[AppendResult] | None:
        sizes.append(len(requests))
        return real(requests, wake=wake)

    monkeypatch.setattr(engine.store, "append_batch", append_batch)
    return sizes


def report_for(engine: Engine, task_id: str, command_id: str, token: int, at_ms: int) -> Report:
    state = engine.state(task_id)
    step = command_id.split("/")[1]
    event = AttemptReported(event_id=f"{command_id}:result", at_ms=at_ms, command_id=command_id,
                            step=step, attempt=1, actor=f"code:{step}", ok=True)
    return Report(task_id, event, state, (command_id, token))


def test_apply_many_writes_several_tasks_in_one_commit(
    engine: Engine, clock: FakeClock, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Three tasks' reports: one append_batch, each task moves on, and each next command is
    claimed for the worker named in claim_for."""
    tids = [engine.submit(THREE_STEPS, {"workspace": str(tmp_path / f"ws{i}")}) for i in range(3)]
    claims = engine.store.claim("w1", clock.now_ms(), 30_000, 3)
    sizes = spy_batches(engine, monkeypatch)
    reports = [report_for(engine, c.task_id, c.command_id, c.token, clock.now_ms()) for c in claims]

    results = engine.apply_many(reports, claim_for=("w1", clock.now_ms() + 30_000))

    assert sizes == [3]
    assert all(isinstance(r, Applied) for r in results)
    for c, res in zip(claims, results, strict=True):
        assert isinstance(res, Applied) and res.claimed is not None
        assert res.claimed.command_id == f"{c.task_id}/b/1"
        assert engine.state(c.task_id).version == 2
    assert sorted(r["lease_owner"] for r in engine.store.outbox()) == ["w1"] * 3
    assert {c.task_id for c in claims} == set(tids)


def test_a_refused_report_in_a_batch_costs_the_others_nothing(
    engine: Engine, clock: FakeClock, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One task cancelled and one lease lost after their steps ran: the batch is refused as a
    whole, then each report is applied alone; the refusals come back in their places."""
    tids = [engine.submit(THREE_STEPS, {"workspace": str(tmp_path / f"ws{i}")}) for i in range(3)]
    claims = {c.task_id: c for c in engine.store.claim("w1", clock.now_ms(), 30_000, 3)}
    reports = [report_for(engine, t, claims[t].command_id, claims[t].token, clock.now_ms()) for t in tids]
    engine.cancel(tids[1], People(engine).add("olga", "operator"), "duplicate issue")
    stale = reports[2]
    reports[2] = Report(stale.task_id, stale.event, stale.state, (claims[tids[2]].command_id, 99))
    sizes = spy_batches(engine, monkeypatch)

    results = engine.apply_many(reports)

    assert sizes == [3]  # tried together once, then one by one
    assert isinstance(results[0], Applied) and engine.state(tids[0]).version == 2
    assert isinstance(results[1], IllegalEventError)
    assert engine.state(tids[1]).status is TaskStatus.CANCELLED
    assert isinstance(results[2], StaleLeaseError)
    assert engine.state(tids[2]).version == 1


def test_a_worker_shares_commits_among_ready_tasks(
    engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Twenty tasks drained by one worker: every step ran once, every task completed, and
    fewer commits than outcomes were needed (some batches held more than one)."""
    tids = [engine.submit(THREE_STEPS, {"workspace": str(tmp_path / f"ws{i}")}) for i in range(20)]
    # However long a step takes on a busy machine, the worker claims a whole batch ahead, so
    # outcomes queue behind the held commit (with one claim at a time nothing could queue)
    monkeypatch.setattr(worker_module, "PREFETCH_SECONDS", 60.0)
    worker = Worker(engine)
    sizes: list[int] = []
    held: list[bool] = []
    real = engine.store.append_batch

    def slow_first_commit(requests: Sequence[AppendRequest], *, wake: Wake | None = None) -> list[AppendResult] | None:
        # An executor commits a lone outcome itself; hold the committer's first commit (made
        # while the executor has more ready) until more outcomes wait behind it
        if not held and threading.current_thread() is not threading.main_thread():
            held.append(True)
            with worker._cv:
                queued = worker._cv.wait_for(lambda: len(worker._staged) >= 2, timeout=30)
            assert queued, "no outcome queued behind the held commit"
        sizes.append(len(requests))
        return real(requests, wake=wake)

    monkeypatch.setattr(engine.store, "append_batch", slow_first_commit)

    stats = worker.run(until_idle=True)

    assert stats.commands == 60
    assert all(engine.state(t).status is TaskStatus.COMPLETED for t in tids)
    for i in range(20):
        for step in ("a", "b", "c"):
            assert len(lines(tmp_path / f"ws{i}" / f"{step}.calls")) == 1
    assert sum(sizes) == 60
    assert max(sizes) > 1 and len(sizes) < 60


def test_batch_one_gives_every_outcome_its_own_commit(
    engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    tids = [engine.submit(THREE_STEPS, {"workspace": str(tmp_path / f"ws{i}")}) for i in range(5)]
    sizes = spy_batches(engine, monkeypatch)

    stats = Worker(engine, batch=1).run(until_idle=True)

    assert stats.commands == 15
    assert all(engine.state(t).status is TaskStatus.COMPLETED for t in tids)
    assert sizes == [1] * 15


def test_commands_no_executor_could_start_are_given_back(
    engine: Engine, clock: FakeClock, tmp_path: Path,
) -> None:
    """Claims waiting in a worker's ready queue longer than READY_HOLD_SECONDS (its executors
    were busy with slow steps) are released, so an idle worker can take them at once."""
    for i in range(3):
        engine.submit(THREE_STEPS, {"workspace": str(tmp_path / f"ws{i}")})
    worker = Worker(engine, worker_id="busy")
    claims = engine.store.claim("busy", clock.now_ms(), 30_000, 3)
    worker._hand_over(claims)
    start = time.monotonic()

    assert worker._give_back_waiting(now=start) == 0  # not waiting long yet
    assert len(worker._ready) == 3

    assert worker._give_back_waiting(now=start + READY_HOLD_SECONDS + 0.5) == 3
    assert len(worker._ready) == 0 and worker._held == {}
    assert [r["lease_owner"] for r in engine.store.outbox()] == [None] * 3
    taken = engine.store.claim("idle", clock.now_ms(), 30_000, 10)
    assert sorted(c.command_id for c in taken) == sorted(c.command_id for c in claims)
    assert all(c.token == 2 for c in taken)  # a new claim, a new fencing token
    assert all(c.deliveries == 1 for c in taken)  # the give-back was no delivery


def test_a_stopping_worker_commits_what_it_performed_and_releases_the_rest(
    engine: Engine, tmp_path: Path,
) -> None:
    """Stopped mid-way with several tasks in flight: every performed step's outcome is
    committed, every command it held but did not start is released, and another worker
    finishes the tasks with each step run exactly once."""
    tids = [engine.submit(THREE_STEPS, {"workspace": str(tmp_path / f"ws{i}")}) for i in range(12)]
    first = Worker(engine, worker_id="first")
    first.run(until=lambda: first.stats.commands >= 7)

    assert 7 <= first.stats.commands < 36
    assert all(r["lease_owner"] is None for r in engine.store.outbox())
    assert all(r["deliveries"] == 0 for r in engine.store.outbox())  # none was started
    second = Worker(engine, worker_id="second").run(until_idle=True)
    assert first.stats.commands + second.commands == 36
    assert all(engine.state(t).status is TaskStatus.COMPLETED for t in tids)
    for i in range(12):
        for step in ("a", "b", "c"):
            assert len(lines(tmp_path / f"ws{i}" / f"{step}.calls")) == 1


def test_a_task_alone_is_committed_by_its_own_executor(
    engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With nothing else under way and no other work due when the worker last looked, the
    executor that performed a step commits its outcome itself and goes on to the next step:
    no commit of a task alone waits for the committer thread. A waiter still learns when the
    task settles."""
    threads: list[threading.Thread] = []
    real = engine.store.append_batch

    def append_batch(requests: Sequence[AppendRequest], *, wake: Wake | None = None) -> list[AppendResult] | None:
        threads.append(threading.current_thread())
        return real(requests, wake=wake)

    monkeypatch.setattr(engine.store, "append_batch", append_batch)
    worker = Worker(engine, idle_poll_seconds=60.0)
    assert not worker._find_work()  # nothing due: what the worker found stands for 60 s
    tid = engine.submit(THREE_STEPS, {"workspace": str(tmp_path / "ws")}, hold_for=worker)
    runner = threading.Thread(target=worker.run, kwargs={"until_idle": True})
    runner.start()
    state = worker.wait_for(tid, timeout=30)
    runner.join(timeout=30)

    assert state.status is TaskStatus.COMPLETED
    assert len(threads) == 3 and set(threads) == {runner}
    assert all(len(lines(tmp_path / "ws" / f"{s}.calls")) == 1 for s in ("a", "b", "c"))


def test_a_command_being_performed_is_held_until_its_commit(engine: Engine, clock: FakeClock, tmp_path: Path) -> None:
    """A task whose command an executor has taken from the ready queue is still the worker's:
    a waiter is told by the commit instead of reading the task's state."""
    tid = engine.submit(THREE_STEPS, {"workspace": str(tmp_path / "ws")})
    worker = Worker(engine, worker_id="w1")
    [claim] = engine.store.claim("w1", clock.now_ms(), 30_000, 1)
    worker._hand_over([claim])
    assert worker._take() == claim  # being performed: no longer ready

    assert worker._handed_or_held(tid)
    worker._unhold(claim.command_id, claim.token)
    assert not worker._handed_or_held(tid)
