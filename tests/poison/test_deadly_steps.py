"""A step that ends the worker process it runs in (``os._exit``, SIGKILL to itself, or the
out-of-memory killer) is not redelivered into a crash loop: once a command was started
``max_deliveries`` times without an outcome, the next worker does not run it again and fails
it with ``worker_died``, which routes like any failure. A claim given back unstarted (its
executor was busy, its worker stopped first) is no delivery.

The crash-loop tests run real ``statewright worker --until-idle`` processes, one after the
other, each ending when the step kills it; between runs the dead worker's lease is made to
run out (in the database, instead of waiting for it)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from statewright.definition.loader import workflow_from_dict
from statewright.machine.state import Outcome, TaskStatus
from statewright.runtime.clock import FakeClock
from statewright.runtime.engine import Engine
from statewright.runtime.worker import MAX_DELIVERIES, Worker
from store.backends import SQL_BACKENDS, raw_sql
from tally import tally

DEADLY = "poison.deadly"
TESTS_DIR = Path(__file__).resolve().parents[1]
LEASE_SECONDS = 30.0
RUN_BOUND_SECONDS = 60.0  # only bounds a broken (hung) worker run
WORKER_DIED = "worker_died"


def flow(name: str, *steps: dict[str, Any]) -> Any:
    return workflow_from_dict({"workflow": name, "steps": list(steps)}, f"<{name}>")


def step(step_id: str, fn: str = "counted", **extra: Any) -> dict[str, Any]:
    return {"id": step_id, "kind": "code", "owner": "tests", "run": {"callable": f"{DEADLY}:{fn}"}, **extra}


def runs(workspace: Path) -> list[str]:
    path = workspace / "runs"
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


def die_unreported(engine: Engine, clock: FakeClock, times: int, commands: int = 1) -> None:
    """``times`` workers claim the due commands and die before reporting: each claim's lease
    then runs out on the fake clock."""
    for n in range(times):
        claimed = engine.store.claim(f"dead-{n}", clock.now_ms(), int(LEASE_SECONDS * 1000), commands)
        assert len(claimed) == commands
        clock.advance(LEASE_SECONDS + 1)


# --- the bound, in process, on a fake clock ------------------------------------------------

def test_a_command_started_max_deliveries_times_without_an_outcome_fails_with_worker_died(
    engine: Engine, backend: str, tmp_path: Path,
) -> None:
    """MAX_DELIVERIES workers died holding the command: the next one does not run the step;
    the attempt fails with worker_died (the detail says how often) and the task halts."""
    ws = tmp_path / "ws"
    tid = engine.submit(flow("doomed", step("a"), step("b")), {"workspace": str(ws)})
    clock = engine.clock
    assert isinstance(clock, FakeClock)
    die_unreported(engine, clock, MAX_DELIVERIES)

    Worker(engine).run(until_idle=True)

    st = engine.state(tid)
    assert st.status is TaskStatus.HALTED
    [attempt] = st.attempts
    assert (attempt.step, attempt.outcome, attempt.reason) == ("a", Outcome.FAILED, WORKER_DIED)
    assert attempt.detail.startswith(f"delivered {MAX_DELIVERIES} times; each worker that ran it stopped")
    assert runs(ws) == []  # never run by the worker that failed it
    assert engine.store.outbox(tid) == []


def test_a_command_redelivered_below_the_bound_still_runs_and_is_told(
    engine: Engine, backend: str, tmp_path: Path,
) -> None:
    """One dead worker (a normal crash and recovery) and MAX_DELIVERIES - 1 dead workers:
    the step runs, told how often it was delivered, and the task completes."""
    clock = engine.clock
    assert isinstance(clock, FakeClock)
    for dead in (1, MAX_DELIVERIES - 1):
        ws = tmp_path / f"ws{dead}"
        tid = engine.submit(flow("recovers", step("a")), {"workspace": str(ws)})
        die_unreported(engine, clock, dead)

        Worker(engine).run(until_idle=True)

        assert engine.state(tid).status is TaskStatus.COMPLETED
        assert runs(ws) == [f"1 {dead + 1}"]


def test_reported_failures_that_were_retried_do_not_count_toward_the_bound(
    engine: Engine, backend: str, tmp_path: Path,
) -> None:
    """Deliveries that ended in a reported, retried failure (a transient error, released with
    the failure counted) are outcomes: only deaths count, so the step still runs."""
    ws = tmp_path / "ws"
    tid = engine.submit(flow("flaky", step("a")), {"workspace": str(ws)})
    for _ in range(MAX_DELIVERIES + 2):
        [c] = engine.store.claim("flaky", engine.clock.now_ms(), 30_000)
        engine.store.release(c.command_id, c.token, engine.clock.now_ms(), failed=True, error="TransientError")

    Worker(engine).run(until_idle=True)

    assert engine.state(tid).status is TaskStatus.COMPLETED
    assert runs(ws) == [f"1 {MAX_DELIVERIES + 3}"]


def test_a_wait_steps_check_follows_the_same_bound(engine: Engine, backend: str, tmp_path: Path) -> None:
    """A check command whose workers all died: the wait step fails with worker_died and takes
    its failure route (here: continue to the next step)."""
    ws = tmp_path / "ws"
    wait = {"id": "wait", "kind": "wait", "owner": "ops", "check": {"callable": f"{DEADLY}:counted"},
            "every": "5m", "max_checks": 3, "on_failure": "continue"}
    tid = engine.submit(flow("waits", wait, step("after")), {"workspace": str(ws)})
    clock = engine.clock
    assert isinstance(clock, FakeClock)
    die_unreported(engine, clock, MAX_DELIVERIES)

    Worker(engine).run(until_idle=True)

    st = engine.state(tid)
    assert st.status is TaskStatus.COMPLETED
    assert [(a.step, a.outcome, a.reason) for a in st.attempts] == [
        ("wait", Outcome.FAILED, WORKER_DIED), ("after", Outcome.PASSED, ""),
    ]
    assert runs(ws) == ["1 1"]  # only the next step ran


def test_a_claim_given_back_by_a_busy_worker_is_no_delivery(
    engine: Engine, backend: str, tmp_path: Path,
) -> None:
    """Claims that waited over READY_HOLD_SECONDS for a busy executor are given back: the
    worker that takes them next gets a first delivery, as often as that happens."""
    wf = flow("slow", step("a"))
    tids = [engine.submit(wf, {"workspace": str(tmp_path / f"ws{i}")}) for i in range(3)]
    busy = Worker(engine, worker_id="busy")
    for _ in range(MAX_DELIVERIES + 2):
        busy._hand_over(engine.store.claim("busy", engine.clock.now_ms(), 30_000, 3))
        assert busy._give_back_waiting(now=float("inf")) == 3
    assert [r["deliveries"] for r in engine.store.outbox()] == [0, 0, 0]

    Worker(engine, worker_id="idle").run(until_idle=True)

    assert all(engine.state(t).status is TaskStatus.COMPLETED for t in tids)
    assert all(runs(tmp_path / f"ws{i}") == ["1 1"] for i in range(3))


# --- the crash loop, with real worker processes -------------------------------------------

def worker_run(store_url: str, max_deliveries: int) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STATEWRIGHT_")}
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS_DIR), os.environ.get("PYTHONPATH", "")])
    argv = [sys.executable, "-m", "statewright", "worker", "--db", store_url, "--until-idle",
            "--lease", str(LEASE_SECONDS), "--max-deliveries", str(max_deliveries)]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=RUN_BOUND_SECONDS)


KILLS = {"exit_process": ("os._exit(1) in a code step", 1),
         "kill_process": ("SIGKILL to its own worker in a code step", -signal.SIGKILL)}


@pytest.mark.parametrize("fn", sorted(KILLS))
@pytest.mark.parametrize("backend", SQL_BACKENDS)  # workers in other processes share the database
def test_a_step_that_kills_its_worker_is_failed_and_routed_and_the_fleet_goes_on(
    open_engine: Callable[..., Engine], backend: str, store_url: str, tmp_path: Path, fn: str,
) -> None:
    """Three tasks: one whose step kills its worker and halts on failure, one whose step kills
    its worker on its first attempt and loops back on failure, and a healthy one. Workers are
    started one after the other (each dies or runs until idle): with --max-deliveries 2 each
    deadly command kills exactly two workers, the third fails it with worker_died, and after
    at most 2 * (2 + 1) - 1 runs the halting task has halted, the looping one completed on
    its second attempt and the healthy one completed."""
    case, died_with = KILLS[fn]
    cap = 2
    engine = open_engine(clock=None)
    halting = engine.submit(flow("halts", step("a", fn)), {"workspace": str(tmp_path / "h")})
    looping = engine.submit(
        flow("loops", step("prepare"), step("a", fn, on_failure={"loop_back": "prepare", "max_attempts": 2})),
        {"workspace": str(tmp_path / "l")})
    healthy = engine.submit(flow("healthy", step("a")), {"workspace": str(tmp_path / "g")})

    codes: list[int] = []
    for _ in range(2 * (cap + 1) - 1):
        done = worker_run(store_url, cap)
        codes.append(done.returncode)
        if done.returncode == 0:
            break
        # The dead worker's lease runs out (set here instead of waited for).
        raw_sql(store_url, "UPDATE sw_outbox SET lease_expires_ms = 0 WHERE lease_owner IS NOT NULL")

    assert codes == [died_with] * (2 * cap) + [0], codes
    halted = engine.state(halting)
    assert halted.status is TaskStatus.HALTED
    [attempt] = halted.attempts
    assert (attempt.outcome, attempt.reason) == (Outcome.FAILED, WORKER_DIED)
    assert attempt.detail.startswith(f"delivered {cap} times")
    assert runs(tmp_path / "h") == ["1 1", "1 2"]  # two starts, then never again
    looped = engine.state(looping)
    assert looped.status is TaskStatus.COMPLETED
    assert [(a.step, a.number, a.outcome, a.reason) for a in looped.attempts] == [
        ("prepare", 1, Outcome.PASSED, ""), ("a", 1, Outcome.FAILED, WORKER_DIED),
        ("prepare", 2, Outcome.PASSED, ""), ("a", 2, Outcome.PASSED, ""),
    ]
    assert engine.state(healthy).status is TaskStatus.COMPLETED
    tally("poison", f"{case}, halt route", backend=backend, outcome=attempt.reason, worker_alive=True)
    tally("poison", f"{case}, loop_back route", backend=backend, outcome=looped.attempts[1].reason,
          worker_alive=True)


def test_a_steps_retry_policy_sets_its_own_delivery_bound(engine: Engine, backend: str, tmp_path: Path) -> None:
    """``retry: {max_deliveries: 1}``: one worker died holding the command, and the next
    fails it (the worker's own bound would have run it again); a step without the setting
    in the same run still runs after a death."""
    clock = engine.clock
    assert isinstance(clock, FakeClock)
    strict_ws, plain_ws = tmp_path / "strict", tmp_path / "plain"
    strict = engine.submit(flow("strict", step("a", retry={"max_deliveries": 1})), {"workspace": str(strict_ws)})
    plain = engine.submit(flow("plain", step("a")), {"workspace": str(plain_ws)})
    die_unreported(engine, clock, 1, commands=2)

    Worker(engine).run(until_idle=True)

    [attempt] = engine.state(strict).attempts
    assert (attempt.outcome, attempt.reason) == (Outcome.FAILED, WORKER_DIED)
    assert attempt.detail.startswith("delivered once; each worker that ran it stopped before reporting")
    assert runs(strict_ws) == []
    assert engine.state(plain).status is TaskStatus.COMPLETED
    assert runs(plain_ws) == ["1 2"]


def test_the_command_lines_default_bound_is_the_workers() -> None:
    """``statewright worker --max-deliveries`` defaults to MAX_DELIVERIES and is bounded
    like a step's ``retry.max_deliveries``."""
    from statewright.cli import cli
    from statewright.definition.limits import MAX_DELIVERIES_BOUND

    command = cli.commands["worker"]
    [option] = [p for p in command.params if p.name == "max_deliveries"]
    assert option.default == MAX_DELIVERIES
    assert (option.type.min, option.type.max) == (1, MAX_DELIVERIES_BOUND)
