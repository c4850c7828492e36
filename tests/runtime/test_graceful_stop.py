"""SIGTERM stops a worker process cleanly: it finishes the command it holds, claims
nothing more, leaves no lease behind and exits 0."""

from __future__ import annotations

import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from statewright.machine.state import TaskStatus
from statewright.runtime.engine import Engine
from statewright.runtime.run import run_task
from statewright.runtime.worker import Worker
from store.backends import SQL_BACKENDS

from . import rt_steps
from .support import clean_env, code, drain, effect_workflow, lines, worker_argv, workflow


@pytest.mark.parametrize("backend", SQL_BACKENDS)  # a worker in another process shares the database
def test_sigterm_mid_command_finishes_it_releases_every_lease_and_exits_0(
    open_engine: Callable[..., Engine], db: Path, workspace: Path, effect_script: Path, tmp_path: Path,
) -> None:
    """The worker (no --until-idle: it would run for ever) is inside charge's effect when
    SIGTERM arrives; it reports charge, does not start notify, and exits 0."""
    out = tmp_path / "out"
    out.mkdir()
    engine = open_engine()
    with socket.create_server(("127.0.0.1", 0)) as server:
        server.settimeout(30)
        tid = engine.submit(effect_workflow(effect_script, out, port=server.getsockname()[1]),
                            {"workspace": str(workspace)})
        with subprocess.Popen(worker_argv(db, until_idle=False), env=clean_env(), text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:
            try:
                conn, _ = server.accept()  # the worker is inside charge's command
                with conn:
                    assert conn.recv(200).decode().strip() == f"{tid}/charge/1"
                    proc.send_signal(signal.SIGTERM)
                    conn.sendall(b"go")
                    stdout, stderr = proc.communicate(timeout=30)
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.communicate()

    assert proc.returncode == 0, stderr
    assert "Traceback" not in stderr
    assert "worker stopped: 1 commands" in stdout
    assert lines(out / "effects.log") == [f"{tid}/charge/1"]  # charge done, notify not started
    st = engine.state(tid)
    assert st.status is TaskStatus.RUNNING and st.current is not None and st.current.step == "notify"
    outbox = engine.store.outbox()
    assert [r["command_id"] for r in outbox] == [f"{tid}/notify/1"]
    assert all(r["lease_owner"] is None and r["lease_expires_ms"] is None for r in outbox)

    drain(engine)  # nothing was held back: the next worker goes on at once
    assert engine.state(tid).status is TaskStatus.COMPLETED


def _run(engine: Engine, tid: str) -> None:
    Worker(engine, lease_seconds=0.3).run(until=lambda: engine.state(tid).terminal)


def _run_task(engine: Engine, tid: str) -> None:
    run_task(engine, tid, lease_seconds=0.3)


@pytest.mark.parametrize("work", [_run, _run_task], ids=["worker_run", "run_task"])
def test_no_lease_renewal_outlives_the_call_that_worked_the_task(
    open_engine: Callable[..., Engine], workspace: Path, monkeypatch: pytest.MonkeyPatch,
    work: Callable[[Engine, str], None],
) -> None:
    """Leases are renewed while a step runs (by run()'s heartbeat thread, or by the process's
    renewal thread for run_task), and the call returns only when a renewal in flight is done
    with the store: closing the engine right after cannot break it, and the leases it
    released stay released."""
    engine = open_engine()
    renewed = threading.Event()
    real_renew = engine.store.renew

    def slow_renew(*args: object, **kwargs: object) -> bool:
        rt_steps.HEARTBEAT_SEEN.set()  # the step ends now, while this renewal is in flight
        time.sleep(0.3)  # a slow database round trip, in the renewing thread
        try:
            return real_renew(*args, **kwargs)  # type: ignore[arg-type]
        finally:
            renewed.set()

    monkeypatch.setattr(engine.store, "renew", slow_renew)
    rt_steps.HEARTBEAT_SEEN.clear()
    tid = engine.submit(workflow("slow", code("work", "wait_for_heartbeat")), {"workspace": str(workspace)})

    work(engine, tid)

    assert renewed.is_set()
    assert engine.state(tid).status is TaskStatus.COMPLETED
    assert engine.store.outbox(tid) == []
