"""When recording an outcome fails with anything but a store error, that outcome's attempt
fails instead (``handling_error``) and routes, while the rest of its group commits; a
command whose handling raises is failed once, never redelivered into a crash loop; and a
committer that cannot record even that failure stops the worker, which releases its leases
and ends with one error line."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from statewright._errors import WorkerStoppedError
from statewright.definition.loader import workflow_from_dict
from statewright.machine.events import AttemptReported, Event
from statewright.machine.state import Outcome, TaskStatus
from statewright.runtime import engine as engine_module
from statewright.runtime.engine import Engine
from statewright.runtime.worker import Worker
from statewright.store import AppendRequest, AppendResult
from statewright.store.base import Wake
from store.backends import SQL_BACKENDS, raw_sql
from tally import tally

AGENTS = "poison.agents"
TESTS_DIR = Path(__file__).resolve().parents[1]
RUN_BOUND_SECONDS = 60.0  # only bounds a broken (hung) run


def flow(name: str, *steps: dict[str, Any]) -> Any:
    return workflow_from_dict({"workflow": name, "steps": list(steps)}, f"<{name}>")


def code_step(step_id: str, fn: str = "done", **extra: Any) -> dict[str, Any]:
    return {"id": step_id, "kind": "code", "owner": "tests", "run": {"callable": f"{AGENTS}:{fn}"}, **extra}


def ai_step(step_id: str, fn: str, **extra: Any) -> dict[str, Any]:
    return {"id": step_id, "kind": "ai", "owner": "agents", "agent": {"type": "python", "callable": f"{AGENTS}:{fn}"},
            "output_schema": {"type": "object", "properties": {"approved": {"type": "boolean"}}}, **extra}


def refuse_appends(engine: Engine, monkeypatch: pytest.MonkeyPatch, refused: Callable[[dict[str, Any]], bool],
                   exc: Callable[[], Exception]) -> list[int]:
    """Make the store raise ``exc()`` (not a store error) for any append whose event body
    ``refused(body)`` picks, alone or in a batch; returns the sizes of the batches tried."""
    store = engine.store
    real_batch, real_append = store.append_batch, store.append
    sizes: list[int] = []

    def append_batch(requests: Sequence[AppendRequest], *, wake: Wake | None = None) -> list[AppendResult] | None:
        sizes.append(len(requests))
        if any(refused(dict(r.event)) for r in requests):
            raise exc()
        return real_batch(requests, wake=wake)

    def append(task_id: str, expected_version: int, event: Any, *args: Any, **kwargs: Any) -> AppendResult:
        if refused(dict(event)):
            raise exc()
        return real_append(task_id, expected_version, event, *args, **kwargs)

    monkeypatch.setattr(store, "append_batch", append_batch)
    monkeypatch.setattr(store, "append", append)
    return sizes


def run_bounded(worker: Worker) -> BaseException | None:
    """``worker.run(until_idle=True)`` in a thread; what it raised (None when it returned)."""
    raised: list[BaseException] = []

    def work() -> None:
        try:
            worker.run(until_idle=True)
        except BaseException as exc:  # the test looks at it
            raised.append(exc)

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    thread.join(RUN_BOUND_SECONDS)
    assert not thread.is_alive(), f"the worker did not return within {RUN_BOUND_SECONDS:g} s"
    return raised[0] if raised else None


def test_an_outcome_the_store_refuses_fails_alone_and_its_group_still_commits(
    engine: Engine, backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Three outcomes in one group commit; the store raises OverflowError for one of them.
    The two others commit and move on; the third is recorded as a handling_error failure
    and halts its task (the step's route), and the worker goes on."""
    wf = flow("group", code_step("a"), code_step("b"))
    tids = [engine.submit(wf, {"workspace": str(tmp_path / f"ws{i}")}) for i in range(3)]
    poisoned = tids[1]

    def refused(body: dict[str, Any]) -> bool:
        return body.get("command_id", "").startswith(poisoned) and body.get("ok") is True

    sizes = refuse_appends(engine, monkeypatch, refused, lambda: OverflowError("int too large to convert"))
    worker = Worker(engine)
    claims = engine.store.claim(worker.worker_id, engine.clock.now_ms(), 30_000, 3)
    reports = [r for r in (worker._perform_held(c) for c in claims) if r is not None]
    worker._pending = len(reports)
    worker._commit(reports)

    assert sizes[0] == 3  # the group was tried together first
    states = engine.states(tids)
    for tid in (tids[0], tids[2]):
        assert [(a.step, a.outcome) for a in states[tid].attempts] == [("a", Outcome.PASSED)]
    failed = states[poisoned]
    assert failed.status is TaskStatus.HALTED and failed.halt is not None
    assert failed.halt.reason == "handling_error"
    assert "OverflowError" in failed.attempts_of("a")[-1].detail
    assert worker.stats.commands == 3
    tally("poison", "store refuses one outcome of a group commit", backend=backend,
          outcome=failed.halt.reason, worker_alive=worker._failure is None)


def test_a_check_whose_timer_the_store_refuses_fails_the_wait_step(
    engine: Engine, backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A failed check schedules the next one; the store raises OverflowError on that timer
    (as a due time past 64 bits did). The wait step fails with handling_error, its route
    (continue) runs the next step, and another task is untouched."""
    wf = flow("waits", {"id": "wait", "kind": "wait", "owner": "tests", "every": "1m", "max_checks": 3,
                        "check": {"callable": f"{AGENTS}:failing_check"}, "on_failure": "continue"},
              code_step("after"))
    poisoned = engine.submit(wf, {"workspace": str(tmp_path / "p")})
    healthy = engine.submit(flow("fine", code_step("only")), {"workspace": str(tmp_path / "h")})
    refuse_appends(engine, monkeypatch, lambda body: body.get("type") == "CheckReported" and not body.get("error"),
                   lambda: OverflowError("Python int too large to convert to SQLite INTEGER"))

    raised = run_bounded(Worker(engine, concurrency=2))

    assert raised is None
    st = engine.state(poisoned)
    [attempt] = st.attempts_of("wait")
    assert (attempt.outcome, attempt.reason) == (Outcome.FAILED, "handling_error")
    assert st.status is TaskStatus.COMPLETED and engine.state(healthy).status is TaskStatus.COMPLETED
    tally("poison", "store refuses a wait step's next timer", backend=backend, outcome=attempt.reason,
          worker_alive=True)


def test_a_reducer_that_raises_fails_the_command_once(
    engine: Engine, backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The reducer raises RecursionError on one task's verdict. That attempt fails with
    handling_error and routes (loop_back, then halt when the budget is spent); the agent
    ran once per attempt, never again for a redelivery, and other tasks complete."""
    wf = flow("reduce", code_step("prepare"),
              ai_step("work", "counted", on_failure={"loop_back": "prepare", "max_attempts": 2}))
    ws = tmp_path / "poisoned"
    poisoned = engine.submit(wf, {"workspace": str(ws)})
    healthy = [engine.submit(wf, {"workspace": str(tmp_path / f"h{i}")}) for i in range(2)]
    real = engine_module.transition

    def transition(state: Any, event: Event) -> Any:
        if isinstance(event, AttemptReported) and event.ok and state.task_id == poisoned and event.step == "work":
            raise RecursionError("maximum recursion depth exceeded")
        return real(state, event)

    monkeypatch.setattr(engine_module, "transition", transition)

    raised = run_bounded(Worker(engine, concurrency=2))

    assert raised is None
    st = engine.state(poisoned)
    assert [a.reason for a in st.attempts_of("work")] == ["handling_error", "handling_error"]
    assert st.status is TaskStatus.HALTED and st.halt is not None and st.halt.reason == "loop_budget_exhausted"
    assert len((ws / "calls").read_text().split()) == 2  # one run per attempt, no redelivery
    assert all(engine.state(t).status is TaskStatus.COMPLETED for t in healthy)
    tally("poison", "reducer raises RecursionError on a verdict", backend=backend,
          outcome=st.attempts_of("work")[-1].reason, worker_alive=True)


@pytest.mark.parametrize("backend", SQL_BACKENDS)
def test_a_task_whose_definition_no_longer_loads_does_not_stop_the_worker(
    open_engine: Callable[..., Engine], backend: str, store_url: str, tmp_path: Path,
) -> None:
    """A stored definition that no longer loads makes reading its task raise. The worker
    gives that one command back with a long delay (no failure can be built without the
    task's state), records why, and completes every other task."""
    submitter = open_engine()
    broken = submitter.submit(flow("broken", code_step("a"), code_step("b")), {"workspace": str(tmp_path / "b")})
    fine = [submitter.submit(flow("fine", code_step("a")), {"workspace": str(tmp_path / f"f{i}")}) for i in range(3)]
    [(digest,)] = raw_sql(store_url, "SELECT workflow_hash FROM sw_tasks WHERE task_id = ?", (broken,))
    raw_sql(store_url, "UPDATE sw_definitions SET body = ? WHERE hash = ?", ('{"workflow": "broken"}', digest))
    engine = open_engine()  # no definition cached

    raised = run_bounded(Worker(engine, concurrency=2))

    assert raised is None
    assert all(engine.state(t).status is TaskStatus.COMPLETED for t in fine)
    [(failures, error, owner, due)] = raw_sql(
        store_url, "SELECT failures, last_error, lease_owner, available_at_ms FROM sw_outbox WHERE task_id = ?",
        (broken,))
    assert failures == 1 and "DefinitionError" in error and owner is None
    assert due > engine.clock.now_ms() + 60_000
    tally("poison", "stored definition no longer loads", backend=backend, outcome="given_back",
          worker_alive=True)


@pytest.mark.parametrize("backend", SQL_BACKENDS)
def test_a_committer_that_cannot_go_on_releases_its_leases_and_stops(
    engine: Engine, backend: str, store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The store raises RuntimeError on every append of an outcome, failures included: the
    worker stops with WorkerStoppedError (one line) and releases every lease it held."""
    wf = flow("stuck", code_step("a"), code_step("b"))
    for i in range(4):
        engine.submit(wf, {"workspace": str(tmp_path / f"ws{i}")})
    refuse_appends(engine, monkeypatch, lambda body: body.get("type") == "AttemptReported",
                   lambda: RuntimeError("disk says no"))

    raised = run_bounded(Worker(engine, concurrency=2))

    assert isinstance(raised, WorkerStoppedError)
    assert "RuntimeError: disk says no" in str(raised) and "\n" not in str(raised)
    assert raw_sql(store_url, "SELECT command_id FROM sw_outbox WHERE lease_owner IS NOT NULL") == []
    assert len(raw_sql(store_url, "SELECT command_id FROM sw_outbox")) == 4  # nothing lost


STUCK_WORKER = textwrap.dedent("""
    import sys
    from statewright.store.sql import SqlStore
    from statewright.store.postgres import PostgresStore

    def boom(*args, **kwargs):
        raise RuntimeError("disk says no")

    for cls in (SqlStore, PostgresStore):
        cls.append = boom
        cls.append_batch = boom
    from statewright.cli import cli
    cli(["worker", "--until-idle", "--quiet", "--lease", "30", "--db", sys.argv[1]])
""")


@pytest.mark.parametrize("backend", SQL_BACKENDS)
def test_statewright_worker_that_cannot_go_on_prints_one_line_and_exits_non_zero(
    engine: Engine, backend: str, store_url: str, tmp_path: Path,
) -> None:
    """`statewright worker` in a real process whose store raises on every append: one error
    line on stderr, a non-zero exit, and no lease left held."""
    wf = flow("stuck", code_step("a"))
    for i in range(3):
        engine.submit(wf, {"workspace": str(tmp_path / f"ws{i}")})
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS_DIR), os.environ.get("PYTHONPATH", "")])}
    env.pop("STATEWRIGHT_DB", None)

    done = subprocess.run([sys.executable, "-c", STUCK_WORKER, store_url], env=env, capture_output=True,
                          text=True, timeout=RUN_BOUND_SECONDS)

    lines = done.stderr.strip().splitlines()
    assert done.returncode != 0
    assert len(lines) == 1 and lines[0].startswith("error: worker stopped:"), done.stderr
    assert raw_sql(store_url, "SELECT command_id FROM sw_outbox WHERE lease_owner IS NOT NULL") == []


@pytest.mark.parametrize("backend", SQL_BACKENDS)
def test_statewright_worker_survives_a_deep_verdict_and_a_fifo(
    engine: Engine, backend: str, store_url: str, tmp_path: Path,
) -> None:
    """`statewright worker --until-idle` in a real process, given a python agent's verdict
    nested 5,000 deep, a command agent that makes its verdict path a FIFO, and a healthy
    task: it returns with exit 0 and every task has ended, the poisoned ones routed."""
    deep = engine.submit(flow("deep", ai_step("work", "agent", on_failure="continue"), code_step("after")),
                         {"case": "verdict nested 5,000 deep"})
    fifo_agent = {"type": "command", "timeout": "5s",
                  "command": [sys.executable, str(Path(__file__).parent / "command_agent.py"), "verdict is a FIFO"]}
    fifo = engine.submit(flow("fifo", {**ai_step("work", "agent"), "agent": fifo_agent}), {})
    healthy = engine.submit(flow("fine", ai_step("work", "agent")), {"case": "clean"})
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS_DIR), os.environ.get("PYTHONPATH", "")])}
    env.pop("STATEWRIGHT_DB", None)

    done = subprocess.run([sys.executable, "-m", "statewright", "worker", "--until-idle", "--db", store_url],
                          env=env, capture_output=True, text=True, timeout=RUN_BOUND_SECONDS)

    assert done.returncode == 0, done.stderr
    states = engine.states([deep, fifo, healthy])
    assert states[deep].status is TaskStatus.COMPLETED
    assert states[deep].attempts_of("work")[-1].reason == "invalid_verdict"
    assert states[fifo].status is TaskStatus.HALTED and states[fifo].halt is not None
    assert states[fifo].halt.reason == "invalid_verdict"
    assert states[healthy].status is TaskStatus.COMPLETED
    for name, tid in (("python agent verdict nested 5,000 deep", deep), ("command agent verdict FIFO", fifo)):
        tally("poison", f"statewright worker process: {name}", backend=backend,
              outcome=states[tid].attempts_of("work")[-1].reason, worker_alive=done.returncode == 0)
