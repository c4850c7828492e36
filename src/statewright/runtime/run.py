"""``run_task``: work one task in this process until it settles, for scripts, tests and
``statewright run``. It drives a Worker over the engine; the engine itself never builds a
worker (the worker calls the engine, not the other way round)."""

from __future__ import annotations

from statewright.machine.state import TaskState
from statewright.runtime.engine import Engine
from statewright.runtime.worker import SETTLED, Worker

__all__ = ["SETTLED", "run_task"]


def run_task(engine: Engine, task_id: str, *, lease_seconds: float = 30.0) -> TaskState:
    """Work in this process until the task ends or parks at a human step, and return its
    state then: the same ``TaskState`` that ``engine.state(task_id)`` returns (``.status``,
    ``.current``, ``.results``, ``.cost``). Only this task's steps are worked, in the calling
    thread, one commit per step (``Worker.run_one``)."""
    return Worker(engine, lease_seconds=lease_seconds).run_one(task_id)
