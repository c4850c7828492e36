"""``run_task``: work one task in this process until it settles, for scripts, tests and
``statewright run``. It drives a Worker over the engine; the engine itself never builds a
worker (the worker calls the engine, not the other way round).

``start_task`` and ``approve_and_run`` are the same with the act that comes first: the
submit's (or the approval's) commit claims the task's next step for this process, so the
step starts with no commit of its own."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from statewright.definition.model import Workflow
from statewright.machine.state import TaskState
from statewright.runtime.engine import Engine
from statewright.runtime.users import Principal
from statewright.runtime.worker import SETTLED, Worker

__all__ = ["SETTLED", "approve_and_run", "run_task", "start_task"]


def run_task(engine: Engine, task_id: str, *, lease_seconds: float = 30.0) -> TaskState:
    """Work in this process until the task ends or parks at a human step, and return its
    state then: the same ``TaskState`` that ``engine.state(task_id)`` returns (``.status``,
    ``.current``, ``.results``, ``.cost``). Only this task's steps are worked, in the calling
    thread, one commit per step (``Worker.run_one``)."""
    with _worker(engine, lease_seconds) as worker:
        return worker.run_one(task_id)


def start_task(
    engine: Engine,
    workflow: Workflow | str | Path,
    input: Mapping[str, Any] | None = None,
    *,
    key: str | None = None,
    lease_seconds: float = 30.0,
) -> TaskState:
    """Submit a task and work it here as ``run_task`` does; its ``task_id`` is on the state."""
    with _worker(engine, lease_seconds) as worker:
        task_id = engine.submit(workflow, input, key=key, hold_for=worker)
        return worker.run_one(task_id)


def approve_and_run(
    engine: Engine, task_id: str, by: Principal, *, proposal_hash: str, comment: str = "",
    lease_seconds: float = 30.0,
) -> TaskState:
    """Approve the proposal the task waits on (``Engine.approve``), then work the task here
    as ``run_task`` does."""
    with _worker(engine, lease_seconds) as worker:
        engine.approve(task_id, by, proposal_hash=proposal_hash, comment=comment, hold_for=worker)
        return worker.run_one(task_id)


_idle = threading.local()  # per thread: the worker its last call left, (engine, lease, worker)


@contextmanager
def _worker(engine: Engine, lease_seconds: float) -> Iterator[Worker]:
    """The worker for one call: the one this thread's last call on the same engine left
    (what it learned, such as the secrets it must redact and the workspaces it made, is kept),
    or a new one. A call made from inside a step of another (a python step that runs a task)
    finds none left, so it never shares a worker that is in use. A call that raised leaves
    nothing behind."""
    left = getattr(_idle, "left", None)
    _idle.left = None
    if left is not None and left[0]() is engine and left[1] == lease_seconds:
        worker = left[2]
    else:
        worker = Worker(engine, lease_seconds=lease_seconds)
    yield worker
    _idle.left = (weakref.ref(engine), lease_seconds, worker)
