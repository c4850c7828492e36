"""Real worker processes SIGKILLed at each named crash point, and during an effect; a new
worker then finishes the task with every effect done exactly once per idempotency key. Every
test runs on SQLite and on PostgreSQL."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from people.support import People
from statewright.machine.state import Outcome, TaskStatus
from statewright.runtime.engine import Engine
from statewright.store.base import Claim
from store.backends import fresh_pg_schema
from tally import tally

from .support import clean_env, code, effect_workflow, invoke, lines, work_until, worker_argv, workflow


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Path | str]:
    """The database the crashing workers share: a SQLite file, or a fresh PostgreSQL schema."""
    if request.param == "sqlite":
        yield tmp_path / "state.db"
        return
    with fresh_pg_schema("swcrash") as (url, _name):
        yield url


def backend_of(db: Path | str) -> str:
    return "postgres" if str(db).startswith("postgresql://") else "sqlite"


def tally_effects(db: Path | str, point: str, kills: int, done: list[str], expected: list[str]) -> None:
    """Record a crash run: effects lost are expected keys never done; effects duplicated are
    keys done more than once, or done under a key no command carried."""
    seen = Counter(done)
    lost = sum(1 for k in set(expected) if k not in seen)
    duplicated = sum(n - 1 for n in seen.values()) + sum(1 for k in seen if k not in set(expected))
    tally("crash", f"{point}", backend=backend_of(db), point=point, kills=kills, effects_lost=lost,
          effects_duplicated=duplicated)

# point -> (keys in attempts.log when it died, steps whose outcome was recorded, the step
# whose command the dead worker still held)
WHERE_IT_DIED = {
    "after_claim": ([], [], "charge"),
    "before_effect": ([], [], "charge"),
    "after_effect": (["charge"], [], "charge"),
    "in_append_txn": (["charge"], [], "charge"),
    "after_append": (["charge"], ["charge"], "notify"),
}


def record_claims(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> list[Claim]:
    """Every claim the engine's store hands out from now on."""
    seen: list[Claim] = []
    real = engine.store.claim

    def claim(*args: object, **kwargs: object) -> list[Claim]:
        got = real(*args, **kwargs)  # type: ignore[arg-type]
        seen.extend(got)
        return got

    monkeypatch.setattr(engine.store, "claim", claim)
    return seen


def reported_steps(engine: Engine, tid: str) -> list[str]:
    return [str(e.body["step"]) for e in engine.store.events(tid) if e.type == "AttemptReported"]


def assert_done_exactly_once(engine: Engine, db: Path | str, tid: str, out: Path) -> None:
    key = {step: f"{tid}/{step}/1" for step in ("charge", "notify")}
    st = engine.state(tid)
    assert st.status is TaskStatus.COMPLETED
    assert lines(out / "effects.log") == [key["charge"], key["notify"]]
    events = engine.store.events(tid)
    assert len({e.event_id for e in events}) == len(events)
    assert [e.type for e in events] == ["TaskSubmitted", "AttemptReported", "AttemptReported"]
    assert [e.body["command_id"] for e in events[1:]] == [key["charge"], key["notify"]]
    assert [(a.step, a.number, a.outcome) for a in st.attempts] == [
        ("charge", 1, Outcome.PASSED), ("notify", 1, Outcome.PASSED),
    ]
    assert engine.store.outbox(tid) == []
    verified = invoke("verify", "--db", str(db))
    assert verified.exit_code == 0, verified.output
    assert "verified 1 tasks: 0 differ" in verified.stdout


@pytest.mark.parametrize("point", sorted(WHERE_IT_DIED))
def test_a_worker_killed_at_a_crash_point_is_finished_by_the_next_one(
    point: str, open_engine: Callable[..., Engine], db: Path | str, workspace: Path, effect_script: Path,
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """SIGKILL at the point, then a new worker takes over the expired lease with a new
    fencing token: the task completes, each effect happened once, no event twice."""
    out = tmp_path / "out"
    out.mkdir()
    engine = open_engine()
    tid = engine.submit(effect_workflow(effect_script, out), {"workspace": str(workspace)})

    crashed = subprocess.run(
        worker_argv(db), env=clean_env(STATEWRIGHT_CRASH_AT=point), capture_output=True, text=True, timeout=60,
    )

    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    attempted, reported, held = WHERE_IT_DIED[point]
    assert lines(out / "attempts.log") == [f"{tid}/{s}/1" for s in attempted]
    assert reported_steps(engine, tid) == reported
    [row] = engine.store.outbox(tid)
    assert (row["command_id"], row["token"], row["deliveries"]) == (f"{tid}/{held}/1", 1, 1)
    assert row["lease_owner"] is not None  # still leased to the dead worker

    claims = record_claims(engine, monkeypatch)
    work_until(engine, lambda: engine.state(tid).terminal)
    tally_effects(db, point, 1, lines(out / "effects.log"), [f"{tid}/charge/1", f"{tid}/notify/1"])

    redelivered = [c for c in claims if c.command_id == f"{tid}/{held}/1"]
    assert [(c.token, c.deliveries) for c in redelivered] == [(2, 2)]
    assert_done_exactly_once(engine, db, tid, out)
    runs = lines(out / "attempts.log")
    # The effect ran a second time only when the first run's outcome was lost with the
    # worker; the idempotency key kept it from happening twice.
    assert runs.count(f"{tid}/charge/1") == (2 if point in ("after_effect", "in_append_txn") else 1)
    assert runs.count(f"{tid}/notify/1") == 1


def test_a_worker_killed_during_the_effect_is_finished_by_the_next_one(
    open_engine: Callable[..., Engine], db: Path | str, workspace: Path, effect_script: Path, tmp_path: Path,
) -> None:
    """The effect blocks until the test lets it go; the test SIGKILLs the worker process
    instead. The lost run never did the effect; the next worker does it, once."""
    out = tmp_path / "out"
    out.mkdir()
    engine = open_engine()
    with socket.create_server(("127.0.0.1", 0)) as server:
        server.settimeout(30)
        port = server.getsockname()[1]
        tid = engine.submit(effect_workflow(effect_script, out, port=port), {"workspace": str(workspace)})
        with subprocess.Popen(worker_argv(db), env=clean_env(), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE) as proc:
            try:
                conn, _ = server.accept()  # the effect script is running, inside the worker's command
                with conn:
                    assert conn.recv(200).decode().strip() == f"{tid}/charge/1"
                    proc.kill()
                    proc.communicate(timeout=30)
                # the connection is closed: the orphaned effect script exits with no effect
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.communicate()
    assert proc.returncode == -signal.SIGKILL
    assert lines(out / "effects.log") == []
    assert engine.state(tid).status is TaskStatus.RUNNING

    (out / "release").touch()
    work_until(engine, lambda: engine.state(tid).terminal)
    tally_effects(db, "during the effect", 1, lines(out / "effects.log"), [f"{tid}/charge/1", f"{tid}/notify/1"])

    assert_done_exactly_once(engine, db, tid, out)
    assert lines(out / "attempts.log") == [f"{tid}/charge/1", f"{tid}/charge/1", f"{tid}/notify/1"]


@pytest.mark.parametrize("point", ["after_effect:7", "in_append_txn:5", "after_append:12"])
def test_a_worker_killed_inside_a_group_commit_loses_nothing(
    point: str, open_engine: Callable[..., Engine], db: Path | str, workspace: Path,
) -> None:
    """Ten tasks of three quick steps, so outcomes share commits; the worker process dies at
    the Nth pass of a point (in_append_txn:5 is inside a commit that carries several
    outcomes). A new worker finishes every task; each effect happened exactly once."""
    engine = open_engine()
    wf = workflow("quick", *(code(s, "effect_once") for s in ("a", "b", "c")))
    tids = [engine.submit(wf, {"workspace": str(workspace)}) for _ in range(10)]
    tests_dir = str(Path(__file__).resolve().parents[1])

    crashed = subprocess.run(
        worker_argv(db), env=clean_env(STATEWRIGHT_CRASH_AT=point, PYTHONPATH=tests_dir),
        capture_output=True, text=True, timeout=60,
    )

    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    assert not all(engine.state(t).terminal for t in tids)
    work_until(engine, lambda: all(engine.state(t).terminal for t in tids))

    keys = sorted(f"{t}/{s}/1" for t in tids for s in ("a", "b", "c"))
    tally_effects(db, f"{point} (group commit of 10 tasks)", 1, lines(workspace / "effects.log"), keys)
    assert sorted(lines(workspace / "effects.log")) == keys  # every effect, each once
    for t in tids:
        assert engine.state(t).status is TaskStatus.COMPLETED
        events = engine.store.events(t)
        assert [e.type for e in events] == ["TaskSubmitted"] + ["AttemptReported"] * 3
    verified = invoke("verify", "--db", str(db))
    assert verified.exit_code == 0, verified.output
    assert "verified 10 tasks: 0 differ" in verified.stdout


def test_an_operator_retry_runs_the_halted_effect_again_under_the_same_key(
    open_engine: Callable[..., Engine], db: Path | str, workspace: Path, effect_script: Path, tmp_path: Path,
) -> None:
    """charge does its effect, then fails, so the task halts; the operator's retry runs charge
    again under the key of the halted attempt, so the target recognises the repeat and the
    effect happens once. Command ids stay distinct, and verify passes."""
    out = tmp_path / "out"
    out.mkdir()
    effect = f"{sys.executable} {effect_script} {out} && test -e {out}/fixed"
    wf = workflow(
        "charge-then-fail",
        {"id": "charge", "kind": "code", "owner": "payments", "run": {"command": ["sh", "-c", effect]}},
    )
    engine = open_engine()
    tid = engine.submit(wf, {"workspace": str(workspace)})
    work_until(engine, lambda: engine.state(tid).terminal)
    assert engine.state(tid).status is TaskStatus.HALTED
    (out / "fixed").touch()

    engine.retry(tid, People(engine).add("olga", "operator"), "the card processor was down")
    work_until(engine, lambda: engine.state(tid).terminal)

    st = engine.state(tid)
    assert st.status is TaskStatus.COMPLETED
    key = f"{tid}/charge/1"
    assert lines(out / "attempts.log") == [key, key]
    assert lines(out / "effects.log") == [key]
    assert [(a.number, a.key, a.outcome) for a in st.attempts] == [
        (1, key, Outcome.FAILED), (2, key, Outcome.PASSED),
    ]
    reports = [e.body["command_id"] for e in engine.store.events(tid) if e.type == "AttemptReported"]
    assert reports == [f"{tid}/charge/1", f"{tid}/charge/2"]
    verified = invoke("verify", "--db", str(db))
    assert verified.exit_code == 0, verified.output
