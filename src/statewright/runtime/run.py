"""``run_task``: work one task in this process until it settles, for scripts, tests and
``statewright run``. It drives a Worker over the engine; the engine itself never builds a
worker (the worker calls the engine, not the other way round).

``start_task`` and ``approve_and_run`` are the same with the act that comes first: the
submit's (or the approval's) commit claims the task's next step for this process, so the
step starts with no commit of its own."""

from __future__ import annotations

from collections.abc import Mapping
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
    return Worker(engine, lease_seconds=lease_seconds).run_one(task_id)


def start_task(
    engine: Engine,
    workflow: Workflow | str | Path,
    input: Mapping[str, Any] | None = None,
    *,
    key: str | None = None,
    lease_seconds: float = 30.0,
) -> TaskState:
    """Submit a task and work it here as ``run_task`` does; its ``task_id`` is on the state."""
    worker = Worker(engine, lease_seconds=lease_seconds)
    task_id = engine.submit(workflow, input, key=key, hold_for=worker)
    return worker.run_one(task_id)


def approve_and_run(
    engine: Engine, task_id: str, by: Principal, *, proposal_hash: str, comment: str = "",
    lease_seconds: float = 30.0,
) -> TaskState:
    """Approve the proposal the task waits on (``Engine.approve``), then work the task here
    as ``run_task`` does."""
    worker = Worker(engine, lease_seconds=lease_seconds)
    engine.approve(task_id, by, proposal_hash=proposal_hash, comment=comment, hold_for=worker)
    return worker.run_one(task_id)
