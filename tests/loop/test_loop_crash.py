"""SIGKILL a real loop process in each working state, then restart it.

The named crash point ``STATEWRIGHT_LOOP_CRASH_AT=<STATE>`` makes the runner SIGKILL
itself right after the record line that names STATE is committed (for IDLE: right
after the run row exists). The restart must follow the resume rules.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from statewright.loop.runner import local_dir
from statewright.loop.store import LoopStore
from statewright.loop.wake import drive_run, handlers
from statewright.machine.loop.model import LineKind, LoopStatus
from statewright.runtime.clock import SystemClock
from statewright.runtime.engine import Engine
from statewright.runtime.worker import Worker
from statewright.store import open_store
from store.backends import SQL_BACKENDS, fresh_pg_schema

from .helpers import alive, cli, command, gone, launches, record, table, token_file, write_loop

S = LoopStatus
KILLED = -signal.SIGKILL


SQLITE_ONLY = pytest.mark.parametrize("db", ["sqlite"], indirect=True)


@pytest.fixture(params=SQL_BACKENDS)
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Path | str]:
    """The database the loop's processes share: a SQLite file, or a fresh PostgreSQL schema
    (an in-memory one would end with each process)."""
    if request.param == "sqlite":
        yield tmp_path / "state" / "state.db"
        return
    with fresh_pg_schema() as (url, _name):
        yield url


def _run(root: Path, db: Path | str, crash_at: str | None = None) -> int:
    done = cli(root, db, "run", "loop.yaml", crash_at=crash_at)
    if crash_at is None:
        assert "Traceback" not in done.stderr, done.stderr
    return done.returncode


def _only_run(db: Path | str) -> str:
    with LoopStore.open(db) as store:
        (run,) = store.runs()
        return run.run_id


def _restarts(db: Path | str) -> list[tuple[str, str, str]]:
    return [row for row in table(record(db, _only_run(db))) if row[1] != "move"]


@SQLITE_ONLY
@pytest.mark.parametrize(
    ("state", "expected"),
    [
        (S.IDLE, [("idle", "start", "idle")]),
        (S.FINDING, [("finding", "restart", "finding")]),
        (S.ASSIGNING, [("assigning", "restart", "assigning")]),
        (S.CHECKING, [("checking", "restart", "checking")]),
        (S.RECORDING, [("recording", "restart", "recording")]),
        (S.DECIDING, [("deciding", "restart", "deciding")]),
    ],
)
def test_one_crash_then_the_state_runs_again(
    tmp_path: Path, db: Path | str, state: S, expected: list[tuple[str, str, str]]
) -> None:
    """A crash in a state that is safe to redo: one counted restart, then on to DONE."""
    root = tmp_path / "l"
    write_loop(root, [{"id": "88"}])
    assert _run(root, db, crash_at=str(state)) == KILLED
    assert _run(root, db) == 0
    assert _restarts(db) == expected
    lines = record(db, _only_run(db))
    assert lines[-1].next_state is S.DONE
    assert launches(root) == [("88", 1)]
    with LoopStore.open(db) as store:
        assert len(store.passes(_only_run(db))) == 1  # RECORDING's append is idempotent


def test_crash_in_running_records_no_result_and_never_relaunches(tmp_path: Path, db: Path | str) -> None:
    """Killed right after the record names RUNNING (before launch): the restart stops any worker,
    writes 'no result' for attempt 1 and the next pass launches attempt 2; attempt 1 never runs."""
    root = tmp_path / "l"
    write_loop(root, [{"id": "88"}])
    assert _run(root, db, crash_at="RUNNING") == KILLED
    assert launches(root) == []
    assert _run(root, db) == 0
    assert _restarts(db) == [("running", "restart", "recording")]
    lines = record(db, _only_run(db))
    moved = next(x for x in lines if x.kind is LineKind.RESTART)
    assert moved.written["verdict"] == "no_result"
    assert launches(root) == [("88", 2)]
    assert lines[-1].next_state is S.DONE


@SQLITE_ONLY
def test_a_sigkilled_loop_leaves_no_worker_running(tmp_path: Path, db: Path | str) -> None:
    """The worker starts a child, SIGKILLs its loop process and blocks: the worker and its
    child die with the loop (before any restart); the restart records 'no result' and does
    not launch that attempt again."""
    root = tmp_path / "l"
    write_loop(root, [{"id": "88", "kill_parent": "KILL", "spawn": True}], attempts_per_item=1)
    assert _run(root, db) == KILLED
    (line,) = (root / "launches.log").read_text().splitlines()
    worker_pid = int(line.split()[2])
    (child_pid,) = (int(x) for x in (root / "children.log").read_text().split())
    assert gone(worker_pid), "the pass worker outlived its SIGKILLed loop"
    assert gone(child_pid), "the pass worker's child outlived the SIGKILLed loop"
    assert _run(root, db) == 5  # attempts_per_item 1: the item parks -> ESCALATED
    assert launches(root) == [("88", 1)]
    assert _restarts(db) == [("running", "restart", "recording")]
    assert record(db, _only_run(db))[-1].next_state is S.ESCALATED


@SQLITE_ONLY
def test_the_restart_stops_a_worker_the_supervisor_did_not(tmp_path: Path, db: Path | str) -> None:
    """Where no parent-death signal stops it (a worker that left its supervisor's reach), the
    pid file lets the next start kill a worker of the crashed attempt (StopWorker)."""
    root = tmp_path / "l"
    write_loop(root, [{"id": "88"}], attempts_per_item=1)
    orphan = subprocess.Popen([sys.executable, "-c", "import select; select.select([], [], [])"],
                              start_new_session=True)
    try:
        with LoopStore.open(db) as store:
            state_dir = local_dir(store) / "loop-workers"
        state_dir.mkdir(parents=True)
        (state_dir / "loop-run-1-item-88-attempt-1.pid").write_text(str(orphan.pid))
        assert _run(root, db, crash_at="RUNNING") == KILLED  # dies before it launches
        assert alive(orphan.pid)
        assert _run(root, db) == 5
        assert orphan.wait(timeout=30) == -signal.SIGKILL
    finally:
        if orphan.poll() is None:
            orphan.kill()
            orphan.wait()
    assert _restarts(db) == [("running", "restart", "recording")]
    assert launches(root) == []


@SQLITE_ONLY
def test_checking_crashing_twice_fails_the_check(tmp_path: Path, db: Path | str) -> None:
    """CHECKING on its second restart records FAIL 'check did not complete'; the item is retried."""
    root = tmp_path / "l"
    write_loop(root, [{"id": "88"}])
    assert _run(root, db, crash_at="CHECKING") == KILLED
    assert _run(root, db, crash_at="CHECKING") == KILLED  # dies again after its restart line
    assert _run(root, db) == 0
    assert _restarts(db) == [
        ("checking", "restart", "checking"),
        ("checking", "restart", "recording"),
    ]
    lines = record(db, _only_run(db))
    failed = [x for x in lines if x.kind is LineKind.RESTART][-1]
    assert failed.written == {
        "verdict": "fail",
        "failing_check": "check did not complete",
        "restarts": 2,
    }
    assert launches(root) == [("88", 1), ("88", 2)]
    assert lines[-1].next_state is S.DONE


def test_crash_awaiting_human_keeps_waiting(tmp_path: Path, db: Path | str) -> None:
    """Killed at the gate: the restart asks again and sleeps (clean stop); the approval moves the
    sleeping run to RECORDING, the next start is excused and the run finishes."""
    root = tmp_path / "l"
    write_loop(root, [{"id": "88"}], gate={"role": "maintainer"})
    assert _run(root, db, crash_at="AWAITING_HUMAN") == KILLED
    assert _run(root, db) == 4  # paused, asleep at the gate: a person decides next
    run_id = _only_run(db)
    status = cli(root, db, "status")
    assert "gate: role maintainer to approve item 88" in status.stdout
    ann = token_file(db, "ann", "maintainer")
    shown = re.search(r"hash ([0-9a-f]{64})", status.stdout)
    assert shown is not None, status.stdout
    approved = cli(root, db, "approve", run_id, "--as", "ann", "--role", "maintainer", "--token-file", str(ann),
                   "--hash", shown.group(1))
    assert approved.returncode == 0, approved.stderr
    assert _run(root, db) == 0
    assert _restarts(db) == [
        ("awaiting_human", "restart", "awaiting_human"),
        ("awaiting_human", "clean stop", "awaiting_human"),
        ("recording", "start", "recording"),
    ]
    assert record(db, run_id)[-1].next_state is S.DONE
    assert launches(root) == [("88", 1)]


def test_third_restart_in_one_state_is_stuck_and_holds_the_loop(tmp_path: Path, db: Path | str) -> None:
    """Dying in FINDING on every start: restarts 1 and 2 run it again, the third is STUCK naming
    FINDING; the next run is refused until someone clears it."""
    root = tmp_path / "l"
    write_loop(root, [{"id": "88"}])
    for _ in range(3):
        assert _run(root, db, crash_at="FINDING") == KILLED
    assert _run(root, db, crash_at="FINDING") == 5  # STUCK is reached without dying again
    assert _restarts(db) == [
        ("finding", "restart", "finding"),
        ("finding", "restart", "finding"),
        ("finding", "restart", "stuck"),
    ]
    stuck = record(db, _only_run(db))[-1]
    assert stuck.written == {"reason": "restarts", "state": "finding", "restarts": 3, "stop_worker": False}
    held = cli(root, db, "run", "loop.yaml")
    assert held.returncode == 1
    assert held.stderr.count("\n") == 1 and "Traceback" not in held.stderr
    assert "clear 1 --reason TEXT' with an operator's token" in held.stderr
    ann = token_file(db, "ann", "operator")
    cleared = cli(root, db, "clear", "1", "--as", "ann", "--reason", "disk was full", "--token-file", str(ann))
    assert cleared.returncode == 0, cleared.stderr
    assert _run(root, db) == 0
    with LoopStore.open(db) as store:
        assert [r.status for r in store.runs()] == [S.DONE, S.STUCK]


@SQLITE_ONLY
def test_sigterm_writes_a_clean_stop_line(tmp_path: Path, db: Path | str) -> None:
    """SIGTERM mid-pass interrupts the worker and writes a clean-stop line; the next start is
    excused and records the interrupted attempt as 'no result'."""
    root = tmp_path / "l"
    write_loop(root, [{"id": "88", "kill_parent": "TERM"}])
    assert _run(root, db) == 0
    assert _restarts(db) == [("running", "clean stop", "running")]
    write_loop(root, [{"id": "88"}])
    assert _run(root, db) == 0
    assert _restarts(db) == [
        ("running", "clean stop", "running"),
        ("running", "start", "recording"),
    ]
    assert launches(root) == [("88", 1), ("88", 2)]


def test_loop_stop_is_the_kill_switch(tmp_path: Path, db: Path | str) -> None:
    """'statewright loop stop' from inside a running pass stops the run cleanly. The worker
    inherits no database: the loop file declares where it is (``env: {LOOP_DB: ...}``)."""
    root = tmp_path / "l"
    stop = [sys.executable, "-m", "statewright.loop", "stop", "--db", "$LOOP_DB"]
    worker = {"command": command("worker.py"), "timeout": "60s", "env": {"LOOP_DB": str(db)}}
    write_loop(root, [{"id": "88", "run": stop}], workflow=worker)
    assert _run(root, db) == 0
    lines = record(db, _only_run(db))
    assert lines[-1].kind is LineKind.CLEAN_STOP and lines[-1].state is S.RUNNING
    assert lines[-1].event.startswith("kill switch (loop stop: requested)")  # the stop's own line
    idle = cli(root, db, "stop")
    assert idle.returncode == 1 and "nothing to stop" in idle.stderr
    status = cli(root, db, "status")
    assert status.returncode == 0, status.stderr
    row = next(line for line in status.stdout.splitlines() if line.strip().startswith(_only_run(db)))
    assert "stopped cleanly; 'statewright loop run' resumes it" in row, status.stdout


class _PastTheLease(SystemClock):
    """A worker's clock a minute ahead: a lease the dead process took has run out for it."""

    def now_ms(self) -> int:
        return super().now_ms() + 60_000


def test_a_worker_takes_up_a_run_whose_loop_process_died(tmp_path: Path, db: Path | str) -> None:
    """Nobody starts 'loop run' again: once the dead process's lease runs out, a worker with the
    loop's handlers takes the run up where it was (an unclean start, counted) and ends it."""
    root = tmp_path / "l"
    write_loop(root, [{"id": "a"}, {"id": "b"}])
    assert _run(root, db, crash_at="CHECKING") == KILLED
    run_id = _only_run(db)
    store = open_store(str(db))
    engine = Engine(store, clock=_PastTheLease())
    try:
        with LoopStore.open(db) as loops:
            [drive] = [c for c in store.outbox(f"loop-run-{run_id}") if c["type"] == "DriveRun"]
            assert loops.run(run_id).status is S.CHECKING
        Worker(engine, handlers=handlers(store)).run(until_idle=True)
        with LoopStore.open(db) as loops:
            run = loops.run(run_id)
            assert run.status is S.DONE and run.owner_pid == os.getpid()
            assert not store.outbox(f"loop-run-{run_id}")  # the run's end took every lease with it
        assert _restarts(db) == [("checking", "restart", "checking")]
        assert drive["command_id"].startswith(f"loop-run-{run_id}:drive:")
    finally:
        engine.close()


def test_the_lease_of_a_process_that_died_before_another_started_is_given_up(
    tmp_path: Path, db: Path | str
) -> None:
    """Two processes died on the run, one after the other: the first one's lease is stale (a
    process started on the run after it) and is given up without a line; the second one's
    takes the run up."""
    root = tmp_path / "l"
    write_loop(root, [{"id": "a"}])
    assert _run(root, db, crash_at="CHECKING") == KILLED
    assert _run(root, db, crash_at="RECORDING") == KILLED
    run_id = _only_run(db)
    store = open_store(str(db))
    engine = Engine(store, clock=_PastTheLease())
    try:
        leases = sorted(int(c["command_id"].rsplit(":", 1)[1]) for c in store.outbox(f"loop-run-{run_id}")
                        if c["type"] == "DriveRun")
        assert len(leases) == 2
        written = len(record(db, run_id))
        assert drive_run(store, run_id, leases[0]) is None
        assert len(record(db, run_id)) == written
        Worker(engine, handlers=handlers(store)).run(until_idle=True)
        with LoopStore.open(db) as loops:
            assert loops.run(run_id).status is S.DONE
        assert [r[:2] for r in _restarts(db)] == [("checking", "restart"), ("recording", "restart")]
    finally:
        engine.close()
