"""A step's processes die with the worker that started them, and the redelivered attempt is
told that its idempotency key was already started. Real worker processes, SIGKILLed while
their step's child runs; no sleeps: the test waits on a socket and on pidfds."""

from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from statewright.definition import workflow_from_dict
from statewright.executors import ExecContext
from statewright.machine.state import TaskStatus
from statewright.runtime.engine import Engine
from statewright.runtime.worker import Worker
from store.backends import SQL_BACKENDS

STEP = '''
import os, socket, subprocess, sys
if os.environ.get("STATEWRIGHT_REDELIVERED") == "1":
    print("redelivered", os.environ["STATEWRIGHT_DELIVERIES"], os.environ["STATEWRIGHT_IDEMPOTENCY_KEY"])
    sys.exit(0)
grandchild = subprocess.Popen(["sleep", "600"])
with socket.create_connection(("127.0.0.1", int(sys.argv[1]))) as conn:
    key = os.environ["STATEWRIGHT_IDEMPOTENCY_KEY"]
    conn.sendall(f"{os.getppid()} {os.getpid()} {grandchild.pid} {key}\\n".encode())
    conn.recv(16)  # until the test lets go, which it never does
grandchild.wait()
'''


def _dead(pid: int) -> bool:
    """Whether ``pid`` has exited (gone, or a zombie nobody reaped yet)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def _wait_dead(pid: int, timeout_seconds: float) -> bool:
    """Wait (on a pidfd, not by polling) until ``pid`` exits; True if it did in time."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        ready, _, _ = select.select([fd], [], [], timeout_seconds)
    finally:
        os.close(fd)
    return bool(ready) and _dead(pid)


def _worker_argv(store_url: str) -> list[str]:
    return [sys.executable, "-m", "statewright", "worker", "--db", store_url, "--lease", "1",
            "--until-idle"]


@pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="needs Linux pidfds")
def _ignore_hup() -> None:
    """In the worker's process before exec: SIGHUP ignored, as ``nohup`` starts it."""
    signal.signal(signal.SIGHUP, signal.SIG_IGN)


@pytest.mark.parametrize("hup", ["default", "ignored"])  # ignored: a worker started under nohup
@pytest.mark.parametrize("backend", SQL_BACKENDS)  # workers in other processes share the database
def test_a_killed_workers_step_processes_die_and_the_next_delivery_is_told(
    open_engine: Callable[..., Engine], store_url: str, tmp_path: Path, hup: str,
) -> None:
    """SIGKILL the worker while its step's child (and the child's own child) run: every
    one of the step's processes is gone by pid, also where the worker was started with
    SIGHUP ignored, which its children inherit. The next worker's delivery of the same
    command sees STATEWRIGHT_REDELIVERED=1, the delivery count and the same key."""
    script = tmp_path / "step.py"
    script.write_text(STEP)
    engine = open_engine()
    env = {k: v for k, v in os.environ.items() if not k.startswith("STATEWRIGHT_")}
    with socket.create_server(("127.0.0.1", 0)) as server:
        server.settimeout(60)
        port = server.getsockname()[1]
        wf = workflow_from_dict({"workflow": "effect", "steps": [
            {"id": "charge", "kind": "code", "owner": "t",
             "run": {"command": [sys.executable, str(script), str(port)]}},
        ]})
        tid = engine.submit(wf, {"workspace": str(tmp_path)})
        with subprocess.Popen(_worker_argv(store_url), env=env, stdout=subprocess.PIPE,
                              preexec_fn=_ignore_hup if hup == "ignored" else None,
                              stderr=subprocess.PIPE) as worker:
            pids: list[int] = []
            try:
                conn, _ = server.accept()  # the step's child is running, its own child too
                with conn:
                    supervisor, child, grandchild, key = conn.makefile().readline().split()
                    pids = [int(supervisor), int(child), int(grandchild)]
                    assert all(not _dead(p) for p in pids)
                    worker.kill()
                    worker.communicate(timeout=30)
                    gone = {p: _wait_dead(p, 10.0) for p in pids}
            finally:
                for p in pids:  # never leave a stray process behind, whatever happened
                    if not _dead(p):
                        os.kill(p, signal.SIGKILL)
    assert worker.returncode == -signal.SIGKILL
    assert gone == dict.fromkeys(pids, True)

    deadline = time.monotonic() + 30  # bounds a broken run; the worker waits for the lease
    Worker(engine, lease_seconds=1).run(
        until=lambda: engine.state(tid).terminal or time.monotonic() > deadline)

    st = engine.state(tid)
    assert st.status is TaskStatus.COMPLETED
    assert st.attempts[0].output == f"redelivered 2 {key}"


def test_the_context_says_how_often_the_command_was_delivered(tmp_path: Path) -> None:
    """Python callables read ctx.deliveries / ctx.redelivered; commands get the same in
    STATEWRIGHT_DELIVERIES and STATEWRIGHT_REDELIVERED."""
    first = ExecContext("t", "s", 1, "t/s/1", tmp_path)
    again = ExecContext("t", "s", 1, "t/s/1", tmp_path, deliveries=3)
    assert (first.redelivered, again.redelivered) == (False, True)
    assert "STATEWRIGHT_REDELIVERED" not in first.base_env()
    assert first.base_env()["STATEWRIGHT_DELIVERIES"] == "1"
    assert (again.base_env()["STATEWRIGHT_REDELIVERED"], again.base_env()["STATEWRIGHT_DELIVERIES"]) == ("1", "3")


def test_without_a_parent_death_signal_commands_still_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Where the platform has no prctl, a command runs unsupervised as its group's leader,
    with the same environment, input and output."""
    from statewright.executors import _process

    monkeypatch.setattr(_process, "_die_with_parent", lambda: None)
    code = "import os, sys; print(os.getpgid(0) == os.getpid(), sys.stdin.read(), os.environ['X'])"
    out = _process.run_process([sys.executable, "-c", code], cwd=tmp_path, env={"X": "1"},
                               timeout_seconds=30, stdin_text="brief")
    assert (out.returncode, out.stdout) == (0, "True brief 1\n")
